# RL: starts from its SFT checkpoint (or the engine's start model when sft.enabled is false); a datasets task
# also reads the prepared data and its overlap checks.

def _rl_inputs(wc):
    run = RUNS[wc.run_id]
    init = {"init": pattern("sft", run.sft_id)} if run.sft_id else {}
    return {**init, **data_inputs(run.data_id, [run.overlap_id] if run.overlap_id else [])}


rule rl:
    input: unpack(_rl_inputs)
    output: pattern("rl", "{run_id}")
    params:
        cfg=lambda wc: canonical_json(RUNS[wc.run_id].stage_config("rl")),
        inputs=lambda wc, input: stage_options(input),
        label=lambda wc: RUNS[wc.run_id].label,
    threads: SWEEP.spec.resources.rl.threads
    resources: **SWEEP.spec.resources.rl.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} rl --sweep {SWEEP.name} --id {wildcards.run_id} {params.inputs} "
        "--label {params.label:q} --results {RESULTS:q} --threads {threads} --config {params.cfg:q}"
