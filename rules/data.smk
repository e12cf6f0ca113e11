# Data (datasets tasks only): the training mixture, prepared once per distinct data config, and its overlap with
# each distinct set of evaluated benchmarks. The SFT and RL stages read both and refuse to train when an overlap
# is above checks.max_train_overlap.

rule data:
    output: pattern("data", "{data_id}")
    params:
        cfg=lambda wc: canonical_json(SWEEP.data_configs[wc.data_id]),
    threads: SWEEP.spec.resources.data.threads
    resources: **SWEEP.spec.resources.data.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} data --sweep {SWEEP.name} --id {wildcards.data_id} "
        "--results {RESULTS:q} --threads {threads} --config {params.cfg:q}"


rule overlap:
    input: lambda wc: pattern("data", SWEEP.overlap_configs[wc.overlap_id]["data_id"])
    output: pattern("overlap", "{overlap_id}")
    params:
        cfg=lambda wc: canonical_json(SWEEP.overlap_configs[wc.overlap_id]),
    threads: SWEEP.spec.resources.data.threads
    resources: **SWEEP.spec.resources.data.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} overlap --sweep {SWEEP.name} --id {wildcards.overlap_id} --data {input:q} "
        "--results {RESULTS:q} --threads {threads} --config {params.cfg:q}"
