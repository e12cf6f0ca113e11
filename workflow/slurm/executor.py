"""The Snakemake executor plugin `rlsweep-slurm`: every rule job becomes a SLURM job submitted through submitit.

Why a plugin and not rules that call submitit themselves: Snakemake stays the only scheduler (it knows the DAG,
`--jobs`, retries, `--keep-going`, what is done), and a rule that submitted and waited on its own SLURM job would
hold a Snakemake job slot while the cluster queues it, and hide its resources from Snakemake.

What it adds over a plain sbatch executor:
- requeue on preemption / time limit through submitit's Checkpointable (job.py), capped by `max_requeues`;
- ready jobs of one rule with identical resources go out as job arrays, split to the cluster's MaxArraySize;
- job states come from ONE squeue call per poll for all jobs (+ one sacct call for the ones squeue forgot), a
  failing poll backs off instead of failing jobs, and sbatch is retried on a busy controller;
- a requeued job is still the same job to Snakemake (it is PENDING again under the same id), so it is never
  submitted twice; a job that fails for good is reported with its SLURM state and log path;
- a job that ends TIMEOUT, OUT_OF_MEMORY or NODE_FAIL is resubmitted as its stage's retry policy allows (more time,
  more memory, the node excluded: retry.py), still the same Snakemake job;
- a plain shell rule's job runs its command directly, without starting a second Snakemake inside the job
  (command.py: most of the per-job cost of a Snakemake cluster executor).
"""

# no `from __future__ import annotations`: Snakemake reads ExecutorSettings' field types at run time to build
# its command-line flags
import pickle
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, List, Optional

import submitit
from snakemake_interface_executor_plugins.executors.base import SubmittedJobInfo
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase

from workflow.atomic import write_json
from workflow.capture import copy_without_machine_paths, path_names
from workflow.layout import JOB_LOG, SLURM_RECORD
from workflow.slurm import cluster
from workflow.slurm.command import direct_command, runs_directly
from workflow.slurm.job import SnakemakeJob
from workflow.slurm.params import sbatch_parameters
from workflow.slurm.retry import RETRY_RESOURCE, RetryPolicy, with_attempts


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    partition: Optional[str] = field(default=None, metadata={
        "help": "Partition for jobs whose stage resources name none (else the cluster's default)."})
    account: Optional[str] = field(default=None, metadata={
        "help": "Account for jobs whose stage resources name none."})
    qos: Optional[str] = field(default=None, metadata={"help": "QOS for jobs whose stage resources name none."})
    max_requeues: int = field(default=3, metadata={
        "help": "How often one job may be requeued (preemption, time limit, node failure) before it counts as "
                "failed."})
    signal_delay_s: int = field(default=120, metadata={
        "help": "Seconds before the time limit at which SLURM asks the job to checkpoint (at most a fifth of the "
                "limit)."})
    logdir: str = field(default=".snakemake/slurm", metadata={
        "help": "Where job scripts, submitit pickles and job logs go (on the shared file system)."})
    array_min: int = field(default=2, metadata={
        "help": "Ready jobs of one rule with the same resources go out as one job array when there are at least "
                "this many (0 = never use arrays)."})
    max_array_size: int = field(default=0, metadata={
        "help": "Largest array to submit (0 = the cluster's MaxArraySize)."})
    job_command: str = field(default="direct", metadata={
        "help": "What a plain shell: rule's SLURM job runs: 'direct' (its command, prepared and checked by this "
                "Snakemake over the shared file system) or 'snakemake' (a `python -m snakemake` for the job, as "
                "other rules always do)."})
    max_poll_interval_s: int = field(default=300, metadata={
        "help": "Upper bound of the status-poll interval while the controller does not answer."})
    vanish_after_s: int = field(default=120, metadata={
        "help": "A job that neither squeue nor sacct knows and that left no result this long after submission "
                "counts as failed."})


common_settings = CommonSettings(
    non_local_exec=True,
    implies_no_shared_fs=False,
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    pass_envvar_declarations_to_cmd=True,
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=1,
)


def _failure(job_id: str, state: cluster.JobState) -> cluster.JobState:
    """Why a job failed: a FAILED job whose payload step the OOM killer ended counts as OUT_OF_MEMORY (submitit runs
    it under srun, so SLURM records only the batch script's failed command: cluster.ran_out_of_memory)."""
    if state.state == "FAILED" and cluster.ran_out_of_memory(job_id):
        return cluster.JobState("OUT_OF_MEMORY", state.exit_code, state.node, "a step ran out of memory")
    return state


def _job_aux(submitted) -> dict:
    """What status checks need of a submitted job: its log (stdout; stderr beside it), submitit's result file, when
    it was submitted."""
    return {"log": Path(str(submitted.paths.stdout)), "err": Path(str(submitted.paths.stderr)),
            "result": Path(str(submitted.paths.result_pickle)), "submitted_at": time.time()}


def _stage_dir(job: JobExecutorInterface) -> Path | None:
    """The stage directory of a rule job (where its DONE file goes); None for a group or a job without one."""
    if getattr(job, "is_group", lambda: False)():  # (a group's outputs are several jobs': none of them alone)
        return None
    outputs = [Path(str(o)) for o in getattr(job, "output", ()) if Path(str(o)).name.startswith("DONE")]
    return outputs[0].parent if outputs else None


def _record(job: JobExecutorInterface, **fields) -> None:
    """What `rlsweep watch` reads to tell a queued stage job from a pending one (one squeue call for all of them):
    SLURM.json beside the job's DONE file, naming the SLURM job last submitted for it and its log, and, once it
    failed for good, its final state. The log is named relative to the stage directory (`job.log`, which the job
    keeps there, or the copy of submitit's log made when the job ended: `_keep_log`), never by the executor's
    folder (outside the results: a copied or remounted results directory would point at nothing). A job without a
    stage directory (the aggregate) gets none. Never fails the submission: it is a view."""
    directory = _stage_dir(job)
    if directory is None:
        return
    try:
        write_json(directory / SLURM_RECORD, {"rule": job.name, "time": time.time(), "log": JOB_LOG, **fields})
    except OSError:
        pass


def _keep_log(j: SubmittedJobInfo, names: list[tuple[str, str]] = ()) -> str | None:
    """Copy a finished SLURM job's submitit log (stdout and stderr, in the executor's folder) into its stage directory
    as `slurm-<job id>.out` / `.err`, so the log travels with the stage job's results, each of this machine's
    directories in it written as what it is (`names`: capture.path_names); returns the name of the last copy
    (stderr's when submitit keeps one), relative to the stage directory, or None when there is nothing to copy."""
    directory = _stage_dir(j.job)
    if directory is None or not directory.is_dir():
        return None
    kept = None
    for key, suffix in (("log", "out"), ("err", "err")):
        source = j.aux.get(key)
        if source is None or not Path(source).is_file():
            continue
        name = f"slurm-{j.external_jobid}.{suffix}"
        try:
            copy_without_machine_paths(Path(source), directory / name, names)
        except OSError:
            continue
        kept = name
    return kept


def _job_label(job: JobExecutorInterface) -> str:
    wc = "_".join(str(v) for _, v in job.wildcards.items()) if not job.is_group() else ""
    return f"rlsweep-{job.name}" + (f"-{wc}" if wc else "")


class Executor(RemoteExecutor):
    def __post_init__(self) -> None:
        self.settings: ExecutorSettings = self.workflow.executor_settings or ExecutorSettings()
        self.logdir = Path(self.settings.logdir).resolve()
        # this machine's directories, as the logs kept under results/ write them (_keep_log)
        self.path_names = path_names(getattr(self.workflow, "config", {}).get("results", "results"),
                                     self.workflow.main_snakefile, Path.cwd())
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._base_interval = self.workflow.remote_execution_settings.seconds_between_status_checks
        self._unanswered_since: float | None = None
        if self.settings.job_command not in ("direct", "snakemake"):
            raise ValueError(f"--rlsweep-slurm-job-command must be 'direct' or 'snakemake', got "
                             f"{self.settings.job_command!r}")

    # ------------------------------------------------------------------------------------------- submission
    def run_jobs(self, jobs: List[JobExecutorInterface]) -> None:
        groups: dict[tuple, list[JobExecutorInterface]] = defaultdict(list)
        for job in jobs:
            groups[(job.name, repr(sorted(self._params(job, array_size=0).items())))].append(job)
        for group in groups.values():
            for job in group:
                self.run_job_pre(job)
                self._prepare(job)
            if self.settings.array_min and len(group) >= self.settings.array_min and not group[0].is_group():
                self._submit_arrays(group)
            else:
                for job in group:
                    self._submit([job], self._params(job))

    def run_job(self, job: JobExecutorInterface) -> None:
        self._prepare(job)
        self._submit([job], self._params(job))

    def _direct(self, job: JobExecutorInterface) -> bool:
        return self.settings.job_command == "direct" and runs_directly(job)

    def _prepare(self, job: JobExecutorInterface) -> None:
        """A direct job is prepared here, as Snakemake's local executor prepares its jobs (stale outputs removed,
        their directories made, inputs waited for); the others' Snakemake inside the job does that."""
        if self._direct(job):
            self.workflow.async_run(job.prepare())

    def _command(self, job: JobExecutorInterface) -> str:
        if self._direct(job):
            return direct_command(job, self.get_envvar_declarations())
        return self.format_job_exec(job)

    def _params(self, job: JobExecutorInterface, array_size: int | None = None) -> dict:
        """sbatch options of a single job (array_size None) or of an array of that size (0: for grouping)."""
        return sbatch_parameters(job.resources, job_name=_job_label(job) if array_size is None else
                                 f"rlsweep-{job.name}", threads=job.threads,
                                 partition=self.settings.partition, account=self.settings.account,
                                 qos=self.settings.qos, signal_delay_s=self.settings.signal_delay_s,
                                 array_parallelism=array_size)

    def _submit_arrays(self, group: list[JobExecutorInterface]) -> None:
        size = self.settings.max_array_size or cluster.max_array_size()
        for part in cluster.chunks(len(group), size):
            jobs = [group[i] for i in part]
            self._submit(jobs, self._params(jobs[0], array_size=len(jobs)))

    def _sbatch(self, jobs: list[JobExecutorInterface], params: dict) -> list:
        """Submit the jobs (one job, or an array), retrying a busy controller; SlurmError when sbatch refuses."""
        ex = submitit.SlurmExecutor(folder=self.logdir / "%j", max_num_timeout=self.settings.max_requeues)
        ex.update_parameters(**params)
        calls = [SnakemakeJob(self._command(job), self.settings.max_requeues,
                              grace_s=max(5, params["signal_delay_s"] - 5)) for job in jobs]

        def submit_once() -> list:
            try:
                if len(calls) == 1:
                    return [ex.submit(calls[0])]
                with ex.batch():  # the jobs become real (array tasks) when the block ends
                    return [ex.submit(c) for c in calls]
            except submitit.core.utils.FailedJobError as e:
                raise cluster.SlurmError(["sbatch"], str(e), cluster.is_transient(str(e))) from None

        def busy(e: cluster.SlurmError, delay: float) -> None:
            self.logger.warning(f"sbatch: controller busy ({str(e)[:200]}); retrying in {delay:.0f}s")
        return cluster.retry_transient(submit_once, retries=5, on_retry=busy)

    def _submit(self, jobs: list[JobExecutorInterface], params: dict) -> None:
        try:
            submitted = self._sbatch(jobs, params)
        except cluster.SlurmError as e:
            for job in jobs:
                self.report_job_error(SubmittedJobInfo(job), msg=f"sbatch refused the job: {e}")
            return
        for job, sj in zip(jobs, submitted):
            self.logger.info(f"Job {job.jobid} ({_job_label(job)}) submitted as SLURM job {sj.job_id}; log: "
                             f"{sj.paths.stdout}")
            self.report_job_submission(SubmittedJobInfo(job, external_jobid=sj.job_id, aux=_job_aux(sj)))
            _record(job, job_id=str(sj.job_id))

    # ------------------------------------------------------------------------------------------------ status
    async def check_active_jobs(self, active_jobs: List[SubmittedJobInfo]) -> Generator[SubmittedJobInfo, None, None]:
        if not active_jobs:
            return
        async with self.status_rate_limiter:
            try:
                states = cluster.job_states([j.external_jobid for j in active_jobs])
            except cluster.SlurmError as e:
                # the controller did not answer: keep every job, ask again later, less often
                now = time.time()
                self._unanswered_since = self._unanswered_since or now
                self.next_seconds_between_status_checks = min(self.settings.max_poll_interval_s,
                                                              2 * self.next_seconds_between_status_checks)
                self.logger.warning(f"SLURM status unknown for {now - self._unanswered_since:.0f}s ({e}); next "
                                    f"check in {self.next_seconds_between_status_checks}s")
                for j in active_jobs:
                    yield j
                return
        self._unanswered_since = None
        self.next_seconds_between_status_checks = self._base_interval
        for j in active_jobs:
            state = states.get(j.external_jobid)
            if state is None:
                state = self._state_from_result(j)
            if state is None or state.active:
                yield j
            elif state.succeeded:
                kept = _keep_log(j, self.path_names)
                if kept:
                    _record(j.job, job_id=str(j.external_jobid), log=kept, state="COMPLETED",
                            attempts=j.aux.get("attempts", []))
                self.report_job_success(j)
            else:
                state = _failure(j.external_jobid, state)
                if self._retry(j, state):
                    yield j  # the same Snakemake job, now a new SLURM job
                else:
                    self._report_failure(j, state)

    def _retry(self, j: SubmittedJobInfo, state: cluster.JobState) -> bool:
        """Resubmit a job that ended TIMEOUT / OUT_OF_MEMORY / NODE_FAIL as its stage's retry policy allows
        (retry.py); the attempts so far reach the new job, which records them in runs. False: fail it."""
        policy = RetryPolicy.decode(j.job.resources.get(RETRY_RESOURCE))
        attempts = j.aux.setdefault("attempts", [])
        nxt = policy.next_parameters(state.state, state.node, attempts, j.aux.get("params") or self._params(j.job))
        if nxt is None:
            return False
        params, what = nxt
        attempts.append({"job": j.external_jobid, "state": state.state, "node": state.node})
        params = with_attempts(params, attempts)
        try:
            submitted, = self._sbatch([j.job], params)
        except cluster.SlurmError as e:
            self.logger.error(f"SLURM job {j.external_jobid} ended {state.state}; its retry was refused: {e}")
            return False
        n = sum(1 for a in attempts if a["state"] == state.state)
        self.logger.warning(f"SLURM job {j.external_jobid} ({_job_label(j.job)}) ended {state.state}"
                            f"{' on ' + state.node if state.node else ''}: retry {n} of {policy.retries(state.state)} "
                            f"as SLURM job {submitted.job_id}, {what}; log: {submitted.paths.stdout}")
        _keep_log(j, self.path_names)  # the failed attempt's log, before the job is the new one
        j.external_jobid = submitted.job_id
        j.aux.update(_job_aux(submitted), params=params)
        _record(j.job, job_id=str(submitted.job_id), attempts=attempts)
        return True

    def _state_from_result(self, j: SubmittedJobInfo) -> cluster.JobState | None:
        """squeue and sacct do not know the job (accounting off, or purged): submitit's result file decides."""
        result: Path = j.aux["result"]
        if result.exists():
            try:
                outcome, value = pickle.loads(result.read_bytes())
            except Exception:  # noqa: BLE001 - half-written: look again next time
                return None
            return cluster.JobState("COMPLETED" if outcome == "success" else "FAILED")
        if time.time() - j.aux["submitted_at"] > self.settings.vanish_after_s:
            return cluster.JobState("VANISHED", reason="neither squeue nor sacct knows the job and it left no result")
        return None

    def _report_failure(self, j: SubmittedJobInfo, state: cluster.JobState) -> None:
        why = {"TIMEOUT": "hit its time limit", "NODE_FAIL": "lost its node", "OUT_OF_MEMORY": "ran out of memory",
               "CANCELLED": "was cancelled", "PREEMPTED": "was preempted and not requeued",
               "BOOT_FAIL": "could not boot its node", "DEADLINE": "missed its deadline"}.get(state.state, "failed")
        detail = f" (exit {state.exit_code})" if state.exit_code and state.exit_code != "0:0" else ""
        log = j.aux["log"]
        _record(j.job, job_id=str(j.external_jobid), state=state.state, exit_code=state.exit_code,
                reason=state.reason, attempts=j.aux.get("attempts", []),
                **({"log": kept} if (kept := _keep_log(j, self.path_names)) else {}))
        self.report_job_error(j, msg=f"SLURM job {j.external_jobid} {why}: state {state.state}{detail}"
                                     f"{'; ' + state.reason if state.reason else ''}. Log: {log}\n",
                              aux_logs=[str(log)])

    # ------------------------------------------------------------------------------------------------ cancel
    def cancel_jobs(self, active_jobs: List[SubmittedJobInfo]) -> None:
        ids = [j.external_jobid for j in active_jobs if j.external_jobid]
        try:
            cluster.cancel(ids)
        except cluster.SlurmError as e:
            self.logger.error(f"could not cancel SLURM jobs {' '.join(ids)}: {e}")
