"""The verl engine's driver side: what runs in the stage job itself, before, around and after verl's processes:
the engine (engine.py), the run config as verl's keys (translate.py) and verl's composed config checked (compose.py),
the task as verl's parquet (data.py), verl's trainers as supervised children (process.py, sft_launch.py), their
checkpoints exported (export.py), and the tiny model rlsweep:tiny (tiny_model.py)."""
