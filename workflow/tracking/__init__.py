"""Experiment trackers (TensorBoard, MLflow, W&B): outputs of the store, never a second source of truth.

    runs.py      what a tracker run is: one per training stage job (pretrain, SFT, RL), its id from the job's content
                 id (a resume, a segment, a requeue and an extension continue it), its name, group, tags, config;
                 and the points a train_steps row or an evaluation becomes
    destinations.py  where each tracker sends: the sweep file, else the ecosystem's variables, else our default
    base.py      the Tracker interface (open a run, what it holds, log points) and the backends by name
    tensorboard.py, mlflow.py, wandb.py   the backends (each imports its library only when used)
    hook.py      the job side: the sweep's trackers for a job, fed TrainLog's rows, never failing or slowing it
    child.py     the trackers in a child process of the job at the lowest CPU priority (the job's GIL stays free)
    sending.py   the loop they run in: what each tracker's run lacks, sent; a failing tracker switched off
    backfill.py  `rlsweep track`: whatever the store holds that a tracker lacks (idempotent)
    bounds.py    how long an unreachable tracker may hold a job, the backfill or `rlsweep track` up
"""
