# RL: starts from its SFT checkpoint (or the engine's start model when sft.enabled is false); a datasets task
# also reads the prepared data and its overlap checks.

@job_function
def _rl_inputs(wc):
    run = RUNS[wc.run_id]
    init = {"init": pattern("sft", run.sft_id)} if run.sft_id else {}
    return {**init, **data_inputs(run.data_id, [run.overlap_id] if run.overlap_id else [])}


rule rl:
    input: unpack(_rl_inputs)
    output: pattern("rl", "{run_id}")
    params:
        args=job_function(lambda wc, input: stage_args("rl", wc.run_id, input, label=RUNS[wc.run_id].label,
                                                       config=RUNS[wc.run_id].stage_config_json("rl"))),
    threads: SWEEP.spec.resources.rl.threads
    resources: **SWEEP.spec.resources.rl.snakemake_resources()
    shell:
        "{STAGE_CMD} rl {params.args} --threads {threads}"
