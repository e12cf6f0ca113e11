"""Training data: the registry of the seeds' training sets (sources.py), the data stage that prepares a sweep's
mixture once for every run that shares it (prepare.py), and the overlap check against the evaluated benchmarks
(overlap.py)."""
