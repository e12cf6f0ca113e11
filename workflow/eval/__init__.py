"""Evaluation: answer extraction, metrics, and (later) the benchmark registry."""
