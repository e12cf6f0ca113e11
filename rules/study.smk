# Optuna study: one localrule runs the driver (workflow/study/driver.py), which asks trials and runs each one as a
# nested snakemake over this Snakefile with the trial's targets, `in_flight` at a time, then writes the summary.
# The done file names n_trials, so raising n_trials in the sweep continues the same study.

from workflow.layout import study_dir

STUDY_DONE = (str(study_dir(RESULTS, SWEEP.name) / f"DONE_n{SWEEP.spec.optuna.n_trials}.json")
              if SWEEP.spec.optuna is not None else None)

if SWEEP.spec.optuna is not None:
    from workflow.study.nested import nested_snakemake_args

    localrules: study

    rule study:
        output: STUDY_DONE
        params:
            # the outer invocation's executor / profile / jobs, so trials run where this snakemake sends jobs
            args=nested_snakemake_args(sys.argv),
            cores=max(1, (workflow._cores or 1) // SWEEP.spec.optuna.in_flight),
            snakefile=workflow.main_snakefile,
        shell:
            "{PYTHON:q} -m workflow.study.driver --sweep-file {SWEEP_FILE:q} --results {RESULTS:q} "
            "--snakefile {params.snakefile:q} --cores {params.cores} --out {output:q} -- {params.args}"
