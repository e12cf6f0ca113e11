# Eval: one job per (RL checkpoint step, benchmark group) of each run; they start when the RL run is done.

rule eval:
    input: pattern("rl", "{run_id}")
    output: pattern("eval", "{eval_id}", run_id="{run_id}", step="{step}", group="{group}")
    params:
        cfg=lambda wc: canonical_json(EVAL_OF[wc.eval_id].stage_config("eval")),
        label=lambda wc: EVAL_OF[wc.eval_id].label,
    threads: SWEEP.spec.resources.eval.threads
    resources: **SWEEP.spec.resources.eval.snakemake_resources()
    shell:
        "{PYTHON:q} {STAGE:q} eval --sweep {SWEEP.name} --id {wildcards.eval_id} "
        "--checkpoint-from {input:q} --step {wildcards.step} --group {wildcards.group} "
        "--label {params.label:q} --results {RESULTS:q} --threads {threads} --config {params.cfg:q}"
