# SFT: one job per distinct SFT config; every RL run that shares it depends on the same job.

def _sft_inputs(wc):  # a datasets task: the prepared data, and the overlap checks of every run sharing this SFT
    return data_inputs(SWEEP.sft_configs[wc.sft_id].get("data_id"), SWEEP.sft_overlaps.get(wc.sft_id))


rule sft:
    input: unpack(_sft_inputs)
    output: pattern("sft", "{sft_id}")
    params:
        args=lambda wc, input: stage_args("sft", wc.sft_id, input, config=canonical_json(SWEEP.sft_configs[wc.sft_id])),
    threads: SWEEP.spec.resources.sft.threads
    resources: **SWEEP.spec.resources.sft.snakemake_resources()
    shell:
        "{STAGE_CMD} sft {params.args} --threads {threads}"
