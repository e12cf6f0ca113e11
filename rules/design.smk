# Seeds on demand: one localrule runs the design's driver (workflow/design/driver.py), which trains round after
# round of seeds where a comparison is undecided, each round as a nested snakemake over this Snakefile with that
# round's targets, and tests after each. The done file names the design (workflow/design/rounds.py design_key) and
# its budget: a changed design is refused with a message, a raised budget continues the design.

if SWEEP.spec.design is not None:
    from workflow.layout import design_done
    from workflow.study.nested import nested_snakemake_args
    from workflow.design.rounds import design_key
    from workflow.sweep.families import families

    DESIGN_DONE = str(design_done(RESULTS, SWEEP.name, design_key(SWEEP.spec, families(SWEEP.spec, SWEEP.runs)),
                                  SWEEP.spec.design.gpu_hours))

    localrules: design

    rule design:
        output: DESIGN_DONE
        params:
            # the outer invocation's executor / profile / jobs, so rounds run where this snakemake sends jobs
            args=nested_snakemake_args(sys.argv),
            cores=max(1, workflow._cores or 1),
            snakefile=workflow.main_snakefile,
        shell:
            "{PYTHON:q} -m workflow.design.driver --sweep-file {SWEEP_FILE:q} --results {RESULTS:q} "
            "--snakefile {params.snakefile:q} --cores {params.cores} --out {output:q} -- {params.args}"
else:
    DESIGN_DONE = None
