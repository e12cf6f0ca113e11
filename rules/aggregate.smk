# Aggregate: the sweep's summary table (mean ± std over seeds), then its report (rlsweep report: tables, curves,
# efficiency against the baseline), both from SQL over its Parquet tables.

# DuckDB over the sweep's tables takes seconds: on a cluster it runs where Snakemake runs instead of queueing.
localrules: aggregate, report


rule aggregate:
    # a design's runs are its driver's (each round a nested snakemake): the outer DAG waits for the driver alone
    input: [DESIGN_DONE] if DESIGN_DONE is not None else EVAL_DONE + RESCORE_DONE
    output: str(summary_path(RESULTS, SWEEP.name))
    shell:
        "{STAGE_CMD} aggregate --sweep {SWEEP.name} --results {RESULTS:q} --out {output:q}"


rule report:
    input: str(summary_path(RESULTS, SWEEP.name))
    output: str(report_dir(RESULTS, SWEEP.name) / "index.html")
    shell:
        "{PYTHON:q} -m workflow.cli report {SWEEP_FILE:q} --results {RESULTS:q}"
