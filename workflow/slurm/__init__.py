"""SLURM through submitit: the Snakemake executor plugin (`executor.py`), the callable every SLURM job runs
(`job.py`), batched status polling and retried controller calls (`cluster.py`), and the mapping from a stage's
resources to sbatch options (`params.py`). `snakemake --profile profiles/slurm` selects it."""
