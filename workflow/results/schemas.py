"""Arrow schemas of the tables (docs/results.md). Counters in train_steps are per step; totals are a SQL window
sum. `train_steps` has its own columns and every known method's per-step numbers, declared on the methods' cards
(workflow/methods/base.py `StepNumber`): a method, a plug-in's too, adds a column without an edit here. Columns a
run does not produce (GXPO diagnostics for GRPO, say) are null, never absent, so every query works on every sweep."""

from __future__ import annotations

import functools

import pyarrow as pa

from workflow.methods.registry import METHODS, step_numbers

S, F, I, B = pa.string(), pa.float64(), pa.int64(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")

# runs: one row per stage job; run_id is that stage's id (sft id, RL run id or eval id), parent_id links the
# chain (rl -> its sft id, eval -> its RL run id). Flattened hyperparameters (rl_lr, sft_steps, ...) are added
# as extra columns per row; `config` keeps the whole stage config as JSON.
RUNS = pa.schema([
    ("run_id", S), ("sweep", S), ("stage", S), ("parent_id", S), ("method", S), ("label", S), ("seed", I),
    ("engine", S),  # the engine that trained (sft, rl) or whose checkpoint is evaluated (eval)
    ("backend", S),  # eval: the generation backend that produced the samples (vllm | local)
    ("status", S), ("error", S), ("started_at", TS), ("finished_at", TS), ("wall_s", F),
    ("host", S), ("git_sha", S), ("git_dirty", B),
    ("gpus", I), ("gpu_kind", S),  # what the job ran on: the GPUs it could use (0: the CPU) and their model
    ("slurm_job_id", S), ("slurm_array_index", I), ("slurm_node", S), ("slurm_partition", S), ("requeue_count", I),
    # from SLURM's accounting (sacct) when the stage ends: elapsed seconds over all attempts, allocated GPUs,
    # GPU-hours (each attempt's elapsed x its GPUs), attempts (null off SLURM or without accounting)
    ("slurm_elapsed_s", F), ("slurm_gpus", I), ("gpu_hours", F), ("slurm_attempts", I),
    ("slurm_retries", S),  # the jobs a retry by failure reason replaced: JSON [{job, state, node}] (retry.py)
    ("config", S),
    # the integrity preflight of SFT and mixed-policy jobs (workflow/preflight.py): passed | failed | no gradient
    ("preflight", S), ("preflight_grad_diff", F), ("preflight_update_diff", F),
])

TRAIN_STEPS = pa.schema([
    ("run_id", S), ("sweep", S), ("stage", S), ("step", I),
    ("loss", F), ("reward", F), ("entropy", F), ("kl", F), ("clip_frac", F), ("grad_norm", F), ("lr", F),
    ("alpha", F), ("z", F), ("gate_tripped", B), ("backward_passes", I), ("optimizer_steps", I),
    ("rollouts", I), ("tokens", I), ("flops", F), ("wall_s", F), ("gen_s", F), ("update_s", F),
    ("response_len", F), ("truncated_frac", F),
    # verl: the largest |p| gap between the rollout engine's and the actor's probabilities of the step's tokens
    # (verl's training/rollout_probs_diff_max): ~1e-4 when vLLM runs the actor's weights (LoRA adapter included)
    ("rollout_probs_diff_max", F),
    # then the methods' own numbers (GXPO's ratio quantiles, the mixed-policy columns, FAST-GRPO's parts', a
    # plug-in's), from the methods' cards: schema("train_steps")
])

EVAL_SAMPLES = pa.schema([
    ("run_id", S), ("eval_id", S), ("sweep", S), ("step", I), ("benchmark", S), ("problem_id", S),
    ("sample_idx", I),
    ("grader", S),  # what decided `correct` (workflow/benchmarks/graders.py): the benchmark's own; null in older files
    ("correct", B), ("response_len", I), ("extracted", S), ("truncated", B), ("response", S),
    ("timed_out", B),  # math-verify gave up on this comparison (scored wrong)
    ("shuffle_seed", I),  # multiple choice: options shown in option_permutation(n, shuffle_seed, id, sample_idx)
])

EVAL_SCORES = pa.schema([
    ("run_id", S), ("eval_id", S), ("sweep", S), ("step", I), ("benchmark", S),
    ("grader", S),  # as eval_samples.grader
    ("k", I),
    ("avg_at_k", F), ("pass_at_k", F), ("n_problems", I), ("n_samples", I), ("mean_len", F), ("truncated_frac", F),
    ("maj_at_k", F), ("avg_ci_low", F), ("avg_ci_high", F), ("pass_ci_low", F), ("pass_ci_high", F),  # 95% bootstrap
    ("timeout_frac", F),
])

# eval_grades: other graders' verdicts on eval_samples' responses (rule rescore, workflow/eval/rescore.py), one row
# per (sample, grader); eval_samples keeps the generation-time verdict, so no other number changes with a rescore
EVAL_GRADES = pa.schema([
    ("run_id", S), ("eval_id", S), ("sweep", S), ("step", I), ("benchmark", S), ("problem_id", S),
    ("sample_idx", I), ("grader", S), ("correct", B), ("extracted", S), ("timed_out", B),
    ("gold", S),  # the item's answer it was judged against (math: the gold; multiple choice: the correct letter shown)
])

_OWN: dict[str, pa.Schema] = {
    "runs": RUNS, "train_steps": TRAIN_STEPS, "eval_samples": EVAL_SAMPLES, "eval_scores": EVAL_SCORES,
    "eval_grades": EVAL_GRADES,
}
TABLES: tuple[str, ...] = tuple(_OWN)
NUMBER_TYPES = {"float": F, "int": I, "bool": B}


def schema(table: str) -> pa.Schema:
    """The columns of `table`: its own, and for train_steps every known method's numbers after them (in the cards'
    order). A method number named like one of the table's own columns is refused, naming the methods."""
    if table not in _OWN:
        raise ValueError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
    own = _OWN[table]
    if table != "train_steps":
        return own
    # read per file by the catalog: built again only when a method was registered since
    return _train_steps((tuple(METHODS.names()), tuple(map(id, METHODS.loaded.values()))))


@functools.lru_cache(maxsize=1)
def _train_steps(registry_state: tuple) -> pa.Schema:
    """train_steps' own columns, then the known methods' numbers (`registry_state` only keys the cache)."""
    own = _OWN["train_steps"]
    fields = []
    for number, methods in step_numbers():
        if number.name in own.names:
            raise ValueError(f"method(s) {', '.join(methods)} log {number.name!r}, a column train_steps has "
                             "of its own: name the number otherwise")
        fields.append(pa.field(number.name, NUMBER_TYPES[number.type]))
    return pa.schema([*own, *fields])
