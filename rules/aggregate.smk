# Aggregate: the sweep's summary table (mean ± std over seeds), from SQL over its Parquet tables.

rule aggregate:
    input: EVAL_DONE
    output: f"{OUT}/summary.md"
    shell:
        "{PYTHON:q} {STAGE:q} aggregate --sweep {SWEEP.name} --results {RESULTS:q} --out {output:q}"
