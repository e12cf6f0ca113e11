# Data (datasets tasks only): the training mixture, prepared once per distinct data config, and its overlap with
# each distinct set of evaluated benchmarks. The SFT and RL stages read both and refuse to train when an overlap
# is above checks.max_train_overlap.

rule data:
    output: pattern("data", "{data_id}")
    params:
        args=lambda wc: stage_args("data", wc.data_id, config=canonical_json(SWEEP.data_configs[wc.data_id])),
    threads: SWEEP.spec.resources.data.threads
    resources: **SWEEP.spec.resources.data.snakemake_resources()
    shell:
        "{STAGE_CMD} data {params.args} --threads {threads}"


rule overlap:
    input: lambda wc: pattern("data", SWEEP.overlap_configs[wc.overlap_id]["data_id"])
    output: pattern("overlap", "{overlap_id}")
    params:
        args=lambda wc, input: stage_args("overlap", wc.overlap_id, data=input[0],
                                          config=canonical_json(SWEEP.overlap_configs[wc.overlap_id])),
    threads: SWEEP.spec.resources.data.threads
    resources: **SWEEP.spec.resources.data.snakemake_resources()
    shell:
        "{STAGE_CMD} overlap {params.args} --threads {threads}"
