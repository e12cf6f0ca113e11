# Aggregate: the sweep's summary table (mean ± std over seeds), from SQL over its Parquet tables.

rule aggregate:
    input: [f"{OUT}/eval/{r.run_id}/{r.eval_id}/DONE.json" for r in SWEEP.runs]
    output: f"{OUT}/summary.md"
    shell:
        "{PYTHON:q} {STAGE:q} aggregate --sweep {SWEEP.name} --results {RESULTS:q} --out {output:q}"
