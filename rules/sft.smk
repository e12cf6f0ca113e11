# SFT: one job per distinct SFT config; every RL run that shares it depends on the same job.

rule sft:
    output: pattern("sft", "{sft_id}")
    params:
        cfg=lambda wc: canonical_json(SWEEP.sft_configs[wc.sft_id]),
    threads: SWEEP.spec.resources.sft.threads
    resources: **SWEEP.spec.resources.sft.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} sft --sweep {SWEEP.name} --id {wildcards.sft_id} "
        "--results {RESULTS:q} --threads {threads} --config {params.cfg:q}"
