# One rule per declared stage but eval (workflow/stages.py STAGES: data, overlap, sft, rl; eval's jobs, one
# per checkpoint step and benchmark group, have their rules in rules/eval.smk). Each rule follows from its stage's
# declaration: its output is the stage's DONE.json named by the stage's id field, its inputs the DONE.json of every
# job its declared upstream options read (Sweep.upstream: a datasets task's SFT job waits for the prepared data and
# the overlap checks of every run sharing it; an RL run for its SFT job), and its arguments come from
# workflow/job_args.py. A stage trained in segments (RL: workflow/segments.py) has one job per (id, end step): its
# output is DONE_<end>.json, and each segment after the first also waits for the one before (--after).

def _stage_rule_functions(stage):
    """The input and params functions of `stage`'s rule (one pair per stage, made here so that each rule of the
    loop below keeps its own stage)."""
    name, field = stage.name, stage.id_field
    segment = SEGMENT_OF[name] if stage.segments else None

    @job_function
    def inputs(wc):
        stage_id = getattr(wc, field)
        out = {option: ([done_of(upstream_of[option], i) for i in ids] if isinstance(ids, list)
                        else done_of(upstream_of[option], ids))
               for option, ids in SWEEP.upstream(name, stage_id).items()}
        if segment is not None:
            ends = SWEEP.segment_ends(name, stage_id)
            at = ends.index(int(wc.end))
            if at:
                out["after"] = segment.format(stage_id, ends[at - 1])
        return out

    @job_function
    def args(wc, input):
        stage_id = getattr(wc, field)
        label = {"label": SWEEP.label(name, stage_id)} if stage.labelled else {}
        until = {"until": wc.end} if segment is not None else {}
        return stage_args(name, stage_id, input, **label, **until, config=SWEEP.config_json(name, stage_id))

    upstream_of = {o.name: o.upstream for o in stage.upstream}
    return inputs, args


for _stage in RULE_FROM_DECLARATION:
    _inputs, _args = _stage_rule_functions(_stage)
    _resources = getattr(SWEEP.spec.resources, _stage.resources_key)
    _wildcard = "{%s}" % _stage.id_field
    _output = SEGMENT_OF[_stage.name].format(_wildcard, "{end}") if _stage.segments else pattern(_stage.name, _wildcard)

    rule:
        name: _stage.name
        input: unpack(_inputs)
        output: _output
        params:
            args=_args,
        threads: _resources.threads
        resources: **_resources.snakemake_resources()
        shell:  # {rule}, the stage's name, a placeholder: Snakemake evaluates this expression again when the job
            # runs (after the loop is over: `_stage` is the last stage then), and `-n -p` prints its first evaluation
            f"{STAGE_SHELL} {{rule}} {{params.args}} --threads {{threads}}"
