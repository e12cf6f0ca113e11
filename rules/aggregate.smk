# Aggregate: the sweep's summary table (mean ± std over seeds), from SQL over its Parquet tables.

# DuckDB over the sweep's tables takes seconds: on a cluster it runs where Snakemake runs instead of queueing.
localrules: aggregate


rule aggregate:
    input: EVAL_DONE
    output: str(summary_path(RESULTS, SWEEP.name))
    shell:
        "{PYTHON:q} {STAGE:q} aggregate --sweep {SWEEP.name} --results {RESULTS:q} --out {output:q}"
