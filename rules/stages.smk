# One rule per declared stage but eval (workflow/stages.py STAGES: data, overlap, sft, rl; eval's jobs, one
# per checkpoint step and benchmark group, have their rules in rules/eval.smk). Each rule follows from its stage's
# declaration: its output is the stage's DONE.json named by the stage's id field, its inputs the DONE.json of every
# job its declared upstream options read (Sweep.upstream: a datasets task's SFT job waits for the prepared data and
# the overlap checks of every run sharing it; an RL run for its SFT job), and its arguments come from
# workflow/job_args.py. A stage trained in segments (RL: workflow/segments.py) has one job per (id, end step): its
# output is DONE_<end>.json, and each segment after the first waits for the one before (--after) and for nothing
# else: the first segment already waits for the upstream jobs, so declaring them again would only cost planning a
# file lookup per job (its command still names them: the same job as before).

def _stage_rule_functions(stage):
    """The input and params functions of `stage`'s rule (one pair per stage, made here so that each rule of the
    loop below keeps its own stage)."""
    name, field = stage.name, stage.id_field
    segment = SEGMENT_OF[name] if stage.segments else None

    def upstream_files(stage_id):  # option -> the DONE.json file(s) of the upstream job(s) it reads
        return {option: ([done_of(upstream_of[option], i) for i in ids] if isinstance(ids, list)
                         else done_of(upstream_of[option], ids))
                for option, ids in SWEEP.upstream(name, stage_id).items()}

    @job_function
    def inputs(wc):
        stage_id = getattr(wc, field)
        if segment is not None:
            ends = SWEEP.segment_ends(name, stage_id)
            if at := ends.index(int(wc.end)):
                return {"after": segment.format(stage_id, ends[at - 1])}
        return upstream_files(stage_id)

    @job_function
    def args(wc, input, threads):
        stage_id = getattr(wc, field)
        label = {"label": SWEEP.label(name, stage_id)} if stage.labelled else {}
        until = {"until": wc.end} if segment is not None else {}
        read = {**upstream_files(stage_id), "after": input.after} if "after" in input.keys() else input
        return stage_command(name, stage_id, read, threads, **label, **until, config=SWEEP.config_json(name, stage_id))

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
        shell:
            f"{STAGE_SHELL} {{params.args}}"
