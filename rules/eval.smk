# Eval: one job per (RL checkpoint step, benchmark group) of each run; each starts when the RL segment that ends at its
# step is done (workflow/segments.py), while the next segment trains. Step 0
# (eval.at_start) evaluates the model the run starts from (its SFT checkpoint, else its pretrained base, or verl's
# model_path), so it waits for that stage only (or for nothing), and runs that start from the same model with the same
# eval settings share it: the first run of the sweep evaluates it (rule eval_start), the others' step-0 jobs copy its rows
# (rule eval_copy, on the machine running snakemake: no GPU for a copy).
# The steps after 0 are most of a big sweep's jobs: their input is a plain pattern of their own wildcards (no input
# function to call per job), which keeps planning 10,000 runs near bare Snakemake's time (bench/plan_dag.py).

# START_FROM: eval id -> the run whose step-0 evaluations that run copies. SELF_STARTS: the eval ids of the runs that
# evaluate their start themselves (one per distinct start), as a regex: eval_start and eval_copy match disjoint
# ids, so planning does not build both candidate jobs for every step-0 file and then drop one by a ruleorder.
_starts, START_FROM = SWEEP.starts()
SELF_STARTS = "|".join(sorted(r.eval_id for r in _starts))


@job_function
def _eval_args(wc, input, threads):
    """What the eval job reads (a stage's DONE.json, or at step 0 without SFT verl's model_path), and how."""
    evaluated = ({"checkpoint_from": input[0]} if input else
                 {"start_model": EVAL_OF[wc.eval_id].config.engine.verl.model_path})
    return stage_command("eval", wc.eval_id, threads=threads, **evaluated, step=wc.get("step", 0), group=wc.group,
                         label=EVAL_OF[wc.eval_id].label, config=EVAL_OF[wc.eval_id].stage_config_json("eval"))


# A run trained in one job (on an engine without segments, or rl.segment_steps 0) has no segment that ends at an
# evaluated step before its last: those evaluations wait for the segment that holds their step's checkpoint (the
# whole job). Only a sweep with such runs pays for an input function per evaluation job.
SEGMENT_HOLDING = {(run_id, step): end for run_id in SWEEP.jobs("rl")
                   for step, end in SWEEP.segment_of("rl", run_id).items()}


@job_function
def _segment_holding(wc):
    return SEGMENT_OF["rl"].format(wc.run_id, SEGMENT_HOLDING.get((wc.run_id, int(wc.step)), wc.step))


rule eval:  # the segment that ends at the evaluated step (workflow/segments.py), so it runs while the next trains
    input: _segment_holding if SEGMENT_HOLDING else SEGMENT_OF["rl"].format("{run_id}", "{step}")
    output: pattern("eval", "{eval_id}", run_id="{run_id}", step="{step}", group="{group}")
    wildcard_constraints:
        step="[1-9][0-9]*",
    params:
        args=_eval_args,
    threads: SWEEP.spec.resources.eval.threads
    resources: **SWEEP.spec.resources.eval.snakemake_resources()
    shell:
        f"{STAGE_SHELL} {{params.args}}"


@job_function
def _start_input(wc):  # the SFT checkpoint, else the pretrained base, or nothing when verl starts from its model_path
    run = RUNS[wc.run_id]
    return (done_of("sft", run.sft_id) if run.sft_id else done_of("pretrain", run.pretrain_id) if run.pretrain_id
            else [])


rule eval_start:
    input: _start_input
    output: pattern("eval", "{eval_id}", run_id="{run_id}", step="0", group="{group}")
    wildcard_constraints:
        eval_id=f"(?:{SELF_STARTS})" if START_FROM else "[0-9a-f]{12}",  # without copies: every step-0 job
    params:
        args=_eval_args,
    threads: SWEEP.spec.resources.eval.threads
    resources: **SWEEP.spec.resources.eval.snakemake_resources()
    shell:
        f"{STAGE_SHELL} {{params.args}}"


if START_FROM:
    localrules: eval_copy

    # the step-0 file each copy reads: runs that all start from one model (one SFT job, the usual sweep) copy from
    # one start, whose file of the job's group is a plain pattern (no input function to call for each run)
    _sources = {(r.eval_id, r.run_id): r for r in START_FROM.values()}
    if len(_sources) == 1:
        [_source] = _sources.values()
        _copy_source = _EVAL_PATTERN.format(eval_id=_source.eval_id, run_id=_source.run_id, step=0, group="{group}")
    else:
        @job_function
        def _copy_source(wc):
            source = START_FROM[wc.eval_id]
            return _EVAL_PATTERN.format(eval_id=source.eval_id, run_id=source.run_id, step=0, group=wc.group)

    @job_function
    def _copy_args(wc, input):
        return stage_command("eval", wc.eval_id, copy_from=input[0], step=0, group=wc.group,
                             label=EVAL_OF[wc.eval_id].label, config=EVAL_OF[wc.eval_id].stage_config_json("eval"))

    rule eval_copy:
        input: _copy_source
        output: pattern("eval", "{eval_id}", run_id="{run_id}", step="0", group="{group}")
        wildcard_constraints:  # every step-0 job but the starts' own (an alternation of every copy's id instead
            # would be tried against every step-0 path while planning)
            eval_id=f"(?!{SELF_STARTS})[0-9a-f]{{12}}",
        params:
            args=_copy_args,
        shell:
            f"{STAGE_SHELL} {{params.args}}"


# Rescore: other graders judge a finished eval job's stored responses again (eval.graders, or `rlsweep rescore`'s
# `--config graders=a,b`): no generation, no GPU, minutes; on the machine running snakemake, like the summary. One job
# per (eval job, grader), so adding a grader later runs only its jobs and never touches another grader's verdicts.
localrules: rescore


@job_function
def _rescore_args(wc):  # workflow/eval/rescore.py's own options (a rescore job is no stage: it holds no lock)
    args = ["--sweep", SWEEP.name, "--id", wc.eval_id, "--step", wc.step, "--group", wc.group, "--grader", wc.grader,
            "--config", EVAL_OF[wc.eval_id].stage_config_json("eval"), "--results", RESULTS]
    return " ".join(shlex.quote(a) for a in args)


rule rescore:
    input: pattern("eval", "{eval_id}", run_id="{run_id}", step="{step}", group="{group}")
    output: str(rescore_path(RESULTS, "{eval_id}", "{run_id}", "{step}", "{group}", "{grader}"))
    wildcard_constraints:
        grader="[a-z0-9_]+",
    params:
        args=_rescore_args,
    shell:
        f"{STAGE_SHELL} rescore {{params.args}}"
