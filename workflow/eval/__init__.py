"""Evaluation jobs: the harness that samples and scores a checkpoint on benchmarks (harness.py), the generation
backends (backends.py), which jobs a run has (plan.py) and rescoring stored responses (rescore.py). What a
benchmark is, and how an answer is judged, sits one floor down in workflow/benchmarks/."""
