"""Sweep YAML -> validated Run records: the file's schema (spec.py), dotted run-config keys (keys.py), expansion
into runs with their stage ids (expand.py: `load_sweep`, `runs_for`), canonical hashing (identity.py)."""
