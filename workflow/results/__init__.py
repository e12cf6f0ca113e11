"""Results: the four Parquet tables, the atomic writer, the read-only DuckDB catalog, the sweep summary and the
doctor (damaged files, DONE.json vs the tables)."""
