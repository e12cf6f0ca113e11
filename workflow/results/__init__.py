"""Results: the four Parquet tables, the atomic writer, the DuckDB catalog and the sweep summary."""
