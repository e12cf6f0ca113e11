"""`rlsweep watch`: a sweep while it runs, read from what its jobs leave on disk (never written to, never locked).

    jobs.py      one stage job's state (pending / queued / running / failed / done) from its files and squeue's line
    reasons.py   why a job failed, as a class a researcher acts on (TIMEOUT, CUDA out of memory, ...)
    snapshot.py  every run of a sweep at one moment: its current stage, step, rate, metrics, latest evaluation
    view.py      a snapshot as a rich table (live) or plain text (no TTY, --once)
"""
