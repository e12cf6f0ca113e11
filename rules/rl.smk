# RL: starts from its SFT checkpoint (or a fresh random init when sft.enabled is false).

def _rl_init(wc):
    sft_id = RUNS[wc.run_id].sft_id
    return [pattern("sft", sft_id)] if sft_id else []


rule rl:
    input: _rl_init
    output: pattern("rl", "{run_id}")
    params:
        cfg=lambda wc: canonical_json(RUNS[wc.run_id].stage_config("rl")),
        init=lambda wc, input: f"--init {input[0]}" if input else "",
        label=lambda wc: RUNS[wc.run_id].label,
    threads: SWEEP.spec.resources.rl.threads
    resources: **SWEEP.spec.resources.rl.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} rl --sweep {SWEEP.name} --id {wildcards.run_id} {params.init} "
        "--label {params.label:q} --results {RESULTS:q} --threads {threads} --config {params.cfg:q}"
