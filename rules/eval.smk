# Eval: one job per (RL checkpoint step, benchmark group) of each run; they start when the RL run is done. Step 0
# (eval.at_start) evaluates the model the run starts from (its SFT checkpoint, or verl's model_path without SFT), so
# it waits for the SFT stage only (or for nothing), and runs that start from the same model with the same eval
# settings share it: the first run of the sweep evaluates it, the others' step-0 jobs copy its rows (rule eval_copy,
# on the machine running snakemake: no GPU for a copy).

START_FROM = SWEEP.start_sources()  # eval id -> the run whose step-0 evaluations that run copies


def _eval_input(wc):
    run = RUNS[wc.run_id]
    if wc.step == "0":
        return pattern("sft", run.sft_id) if run.sft_id else []  # verl's model_path: nothing to wait for
    return pattern("rl", wc.run_id)


def _evaluated(wc, input):
    """What the eval job reads: a stage's DONE.json, or at step 0 without SFT the model_path itself."""
    if input:
        return "--checkpoint-from " + shlex.quote(str(input[0]))
    return "--start-model " + shlex.quote(RUNS[wc.run_id].config.engine.verl.model_path)


rule eval:
    input: _eval_input
    output: pattern("eval", "{eval_id}", run_id="{run_id}", step="{step}", group="{group}")
    params:
        cfg=lambda wc: canonical_json(EVAL_OF[wc.eval_id].stage_config("eval")),
        label=lambda wc: EVAL_OF[wc.eval_id].label,
        evaluated=_evaluated,
    threads: SWEEP.spec.resources.eval.threads
    resources: **SWEEP.spec.resources.eval.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} eval --sweep {SWEEP.name} --id {wildcards.eval_id} "
        "{params.evaluated} --step {wildcards.step} --group {wildcards.group} "
        "--label {params.label:q} --results {RESULTS:q} --threads {threads} --config {params.cfg:q}"


if START_FROM:
    ruleorder: eval_copy > eval
    localrules: eval_copy

    rule eval_copy:
        input:
            lambda wc: str(done_path(RESULTS, SWEEP.name, "eval", START_FROM[wc.eval_id].eval_id,
                                     START_FROM[wc.eval_id].run_id, 0, wc.group))
        output: pattern("eval", "{eval_id}", run_id="{run_id}", step="0", group="{group}")
        wildcard_constraints:
            eval_id="|".join(START_FROM),
        params:
            cfg=lambda wc: canonical_json(EVAL_OF[wc.eval_id].stage_config("eval")),
            label=lambda wc: EVAL_OF[wc.eval_id].label,
        shell:
            "{PYTHON:q} {STAGE:q} eval --sweep {SWEEP.name} --id {wildcards.eval_id} "
            "--copy-from {input:q} --step 0 --group {wildcards.group} "
            "--label {params.label:q} --results {RESULTS:q} --config {params.cfg:q}"
