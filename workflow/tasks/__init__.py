"""Tasks the local engine trains on and evaluates (synthetic; no downloads)."""
