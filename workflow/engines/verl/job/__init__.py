"""rlsweep's stage job, the verl engine's side of it: what runs in the job's own process, before, around and after
verl's processes: the engine (engine.py), the run config as verl's keys (translate.py) and verl's composed config
checked (compose.py), the task as verl's parquet (data.py), verl's trainers as supervised children (process.py,
sft_launch.py), their checkpoints exported (export.py), the tiny model rlsweep:tiny (tiny_model.py) and the integrity
preflight's probe and planned batch (probe.py, probe_batch.py)."""
