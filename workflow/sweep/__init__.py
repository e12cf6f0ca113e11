"""Sweep YAML -> validated Run records: reading the file within bounds (loader.py), its schema (spec.py), dotted
run-config keys (keys.py), expansion into runs with their stage ids (expand.py: `load_sweep`, `runs_for`),
canonical hashing (identity.py)."""
