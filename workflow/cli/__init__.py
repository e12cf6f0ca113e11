"""`rlsweep`: inspect sweeps and query results.

    rlsweep validate SWEEP.yaml          expand + validate a sweep, list its runs (nothing runs)
    rlsweep status SWEEP.yaml            each run's stage states (pending / step n/N / running / failed / done);
                                         for an Optuna sweep also its study: trials by state, best value, params
    rlsweep watch SWEEP.yaml [--every 5] [--once] [--sort COL]
                                         the sweep while it runs, redrawn every few seconds: per run its stage,
                                         state (pending / queued: job, reason / running: node / failed: why, log /
                                         done), step, s/step, ETA, reward, entropy, its method's headline number,
                                         latest evaluation; jobs by state and GPU-hours; newest failures. --once
                                         (or no terminal): one plain snapshot, exit 1 when a job failed
    rlsweep track SWEEP.yaml [--to tensorboard|mlflow|wandb ...]
                                         send the sweep's trackers (its tracking: block) what the store holds that
                                         they lack: a finished sweep's history, what a job's trackers missed;
                                         idempotent (exit 1: a tracker failed)
    rlsweep query "SQL" [--sweep NAME] [--format table|records|csv|json] [--timeout S] [--memory SIZE]
                                         read-only DuckDB over the views runs, train_steps, eval_samples, eval_scores,
                                         eval_grades
    rlsweep plan SWEEP.yaml [--detect D] what running it would do: per stage the jobs done / partial (a checkpoint) /
                                         failed / running / new, each job's SLURM ask, the GPU-hours left (from
                                         finished jobs' per-step cost, else the time limits as an upper bound);
                                         --detect 0.01: the seeds (and samples per problem) each benchmark needs to
                                         detect that difference, from the spread the results measured
    rlsweep report SWEEP.yaml            the sweep's report: accuracy (mean ± std, 95% interval over seeds), efficiency
                                         against a baseline, training and accuracy curves, failed and missing runs;
                                         results/<sweep>/report/ (index.html, report.md, queries.sql, figures/)
    rlsweep gain SWEEP.yaml              did RL improve the model it started from: per setting the start, each seed's
                                         final, the pooled paired final − start [95% interval] (exit 1: a seed ended
                                         at or below its start, or an interval holds 0)
    rlsweep rescore SWEEP.yaml --graders G [G ...]
                                         other graders (math_verify, math_equal, dapo, exact, mc_letter, mc_text)
                                         judge the stored responses again, no generation; table eval_grades, and
                                         the report's Graders section
    rlsweep smoke SWEEP.yaml [--steps 2] [--dry-run] [--snakemake ARGS]
                                         the sweep's DAG shrunk to minutes on this machine (tiny model, a few
                                         steps) before it spends a GPU allocation: results/<name>-smoke
    rlsweep doctor SWEEP.yaml | --sweep NAME [--fix [--also SWEEP]]
                                         damaged table files (each checked in full), leftover temporaries, DONE.json
                                         vs the tables, and how to recompute; --fix moves what must go to quarantine
                                         and restores a damaged pack from its mirror (exit 1: problems found)
    rlsweep compact                      merge the finished stages' table files (every sweep's) into a few packs per
                                         table (the aggregate stage does it once there are 256 files); queries stay
                                         fast. Every file is checked in full first: a damaged one is left as it is,
                                         never copied (exit 1)
    rlsweep gc [SWEEP.yaml ...] [--remove [--yes]]
                                         the stage outputs in results/_store/ that no sweep references (the sweep
                                         files given, default sweeps/*.yaml; a sweep without one keeps what it
                                         planned); --remove deletes them after confirmation, never while a stage runs
    rlsweep migrate                      move results of rlsweep before the shared store (results/<sweep>/sft, rl,
                                         eval, tables, ...) into results/_store/ (snakemake and the commands that
                                         read results do it on their own)
    rlsweep preflight SWEEP.yaml         the integrity preflight of every SFT and mixed-policy job: the gradient is
                                         the same for any micro-batch split, one accumulated step equals one
                                         full-batch step (exit 1: a job would train wrongly)
    rlsweep gpu-check [--engine local|verl|all] [--allow-cpu]
                                         before GPU-hours are spent: SFT, every update rule, every mixed-policy
                                         method, FAST-GRPO and an evaluation for a few steps on this node's GPU; a
                                         table of pass/fail, s/step, peak GPU memory (exit 1: a failure; 3: no GPU)
    rlsweep profile install [--partition P] [--account A] [--qos Q] [--name slurm]
                                         install profiles/slurm as your Snakemake profile: `snakemake --profile slurm`
"""

from __future__ import annotations

import argparse
import importlib
import sys

from workflow.errors import UserError
from workflow.layout import SWEEP_NAME, SWEEP_NAME_RULE
from workflow.results.display import FORMATS


def sweep_name(value: str) -> str:
    """argparse type of --sweep: the name of a sweep (its results/<name>/), never a path."""
    if not SWEEP_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a sweep name: {SWEEP_NAME_RULE}; give the sweep's name, "
                                         "not a path (the results directory is --results)")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rlsweep", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", help="results directory (default: $RLSWEEP_RESULTS or ./results)")
    # --results is accepted after the subcommand too (SUPPRESS: it only overrides when given there)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--results", default=argparse.SUPPRESS, help="results directory")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("query", parents=[common], help="run read-only SQL over the result tables")
    q.add_argument("sql")
    q.add_argument("--sweep", type=sweep_name, help="only this sweep's results")
    q.add_argument("--format", choices=FORMATS, default="table",
                   help="table (one record per block when too wide), records, csv, json")
    q.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="stop the query after this long (default 300; Ctrl-C stops it at once)")
    q.add_argument("--memory", default="4GB", metavar="SIZE", help="DuckDB's memory bound (default 4GB)")
    q.set_defaults(fn="query:cmd_query")
    s = sub.add_parser("status", parents=[common], help="show each run's stage states")
    s.add_argument("sweep_file")
    s.set_defaults(fn="status:cmd_status")
    w = sub.add_parser("watch", parents=[common], help="watch a sweep while it runs (live; --once: one snapshot)")
    w.add_argument("sweep_file")
    w.add_argument("--every", type=float, default=5.0, metavar="S", help="seconds between refreshes (default 5)")
    w.add_argument("--once", action="store_true",
                   help="print one plain snapshot and exit: 0, or 1 when a job failed (also without a terminal)")
    w.add_argument("--sort", metavar="COLUMN", help="order the lines by a column (state, step, eta, eval, reward, ...)")
    w.add_argument("--lines", type=int, metavar="N",
                   help="fold each setting's seeds into one line above N runs (default: the terminal's height)")
    w.add_argument("--svg", metavar="FILE", help="with --once: also save the view as an SVG picture")
    w.set_defaults(fn="watch:cmd_watch")
    tr = sub.add_parser("track", parents=[common], help="send the sweep's trackers what the store holds that they lack")
    tr.add_argument("sweep_file")
    tr.add_argument("--to", nargs="+", choices=["tensorboard", "mlflow", "wandb"], metavar="BACKEND",
                    help="these trackers (default: the sweep's tracking block); tensorboard and mlflow need no settings")
    tr.set_defaults(fn="track:cmd_track")
    d = sub.add_parser("doctor", parents=[common], help="find damaged or inconsistent results; say how to recompute")
    d.add_argument("sweep_file", nargs="?", help="the sweep file (or --sweep NAME)")
    d.add_argument("--sweep", type=sweep_name, help="the sweep's name, when its file is not at hand")
    d.add_argument("--fix", action="store_true", help="move what each problem lists to results/_store/quarantine/, "
                   "and restore a damaged pack from its mirror")
    d.add_argument("--also", action="append", default=[], type=sweep_name, metavar="SWEEP",
                   help="with --fix: where a damaged pack without an intact mirror holds rows of another sweep's stage "
                   "jobs, mark that sweep's to rerun too (without, they are named and the pack stays); repeatable")
    d.set_defaults(fn="doctor:cmd_doctor")
    c = sub.add_parser("compact", parents=[common], help="merge finished stages' table files into a few packs")
    c.set_defaults(fn="compact:cmd_compact")
    g = sub.add_parser("gc", parents=[common], help="list (and remove) stage outputs no sweep references")
    g.add_argument("sweep_files", nargs="*", metavar="SWEEP.yaml",
                   help="the sweeps whose stages stay (default: sweeps/*.yaml)")
    g.add_argument("--remove", action="store_true", help="delete what is listed (asks first)")
    g.add_argument("--yes", action="store_true", help="with --remove: do not ask")
    g.set_defaults(fn="gc:cmd_gc")
    mg = sub.add_parser("migrate", parents=[common], help="move per-sweep results into the shared store")
    mg.set_defaults(fn="migrate:cmd_migrate")
    pl = sub.add_parser("plan", parents=[common], help="what running the sweep would do, and its GPU-hours")
    pl.add_argument("sweep_file")
    pl.add_argument("--detect", type=float, metavar="DIFFERENCE",
                    help="also: the seeds per setting (and samples per problem) needed to detect this difference of "
                         "accuracy on each benchmark, from the spread the sweep's results measured (e.g. 0.01)")
    pl.add_argument("--on", choices=("local", "slurm"), default=None,
                    help="where the sweep will run, for its GPU-hours (default: where it last started, else SLURM "
                         "when this machine has sbatch, else this machine: a CPU machine's jobs use no GPU)")
    pl.set_defaults(fn="plan:cmd_plan")
    rp = sub.add_parser("report", parents=[common], help="write the sweep's report (HTML, Markdown, figures)")
    rp.add_argument("sweep_file")
    rp.set_defaults(fn="report:cmd_report")
    gn = sub.add_parser("gain", parents=[common], help="RL's gain over its start, per setting, with its interval")
    gn.add_argument("sweep_file")
    gn.add_argument("--setting", action="append", default=[], metavar="TEXT",
                    help="only the settings whose label contains TEXT (repeat: every TEXT), e.g. "
                         "--setting pretrain.enabled=True --setting sft.enabled=False")
    gn.set_defaults(fn="gain:cmd_gain")
    rs = sub.add_parser("rescore", parents=[common], help="judge stored responses again with other graders")
    rs.add_argument("sweep_file")
    rs.add_argument("--graders", nargs="+", required=True, metavar="GRADER",
                    help="graders (workflow/benchmarks/graders.py): math_verify, math_equal, dapo, exact, mc_letter, "
                         "mc_text")
    rs.add_argument("--cores", type=int, default=1, help="rescore jobs at once (default 1)")
    rs.add_argument("--snakemake", default="", metavar="ARGS", help="more options for snakemake")
    rs.set_defaults(fn="rescore:cmd_rescore")
    v = sub.add_parser("validate", help="expand and validate a sweep file without running anything")
    v.add_argument("sweep_file")
    v.set_defaults(fn="validate:cmd_validate")
    sm = sub.add_parser("smoke", parents=[common], help="run the sweep shrunk to minutes on this machine")
    sm.add_argument("sweep_file")
    sm.add_argument("--steps", type=int, default=2, help="RL steps per run (default 2)")
    sm.add_argument("-n", "--dry-run", action="store_true", help="plan the smoke DAG without running it")
    sm.add_argument("--snakemake", default="", metavar="ARGS", help="options for snakemake, e.g. '--cores 2'")
    sm.set_defaults(fn="smoke:cmd_smoke")
    pf = sub.add_parser("preflight", parents=[common], help="check gradient accumulation and the optimizer step")
    pf.add_argument("sweep_file")
    pf.set_defaults(fn="preflight:cmd_preflight")
    gk = sub.add_parser("gpu-check", help="run every stage and method for a few steps on this node's GPU")
    gk.add_argument("--engine", choices=("local", "verl", "all"), default="all",
                    help="local: the local engine, in this process; verl: a generated sweep on verl + vLLM (needs "
                         "them installed); all (default): both, verl only where it is installed")
    gk.add_argument("--steps", type=int, default=4, help="RL steps per check (default 4)")
    gk.add_argument("--sft-steps", type=int, default=300,
                    help="local SFT steps (default 300: enough that RL groups get mixed rewards and real gradients)")
    gk.add_argument("--only", type=lambda s: [n for n in s.split(",") if n], metavar="CHECK,...",
                    help="run only these checks (and what they start from), e.g. gxpo,eval")
    gk.add_argument("--verl-model", default=None, metavar="MODEL",
                    help="the verl part's model (default rlsweep:tiny; a Hugging Face id or path for a real one)")
    gk.add_argument("--allow-cpu", action="store_true",
                    help="without a GPU, run the checks on the CPU anyway (the wiring, not the devices)")
    gk.add_argument("--keep", metavar="DIR", help="keep the stage jobs' results here (default: a temporary directory)")
    gk.add_argument("--json", metavar="FILE", help="also write the outcomes as JSON")
    gk.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    gk.set_defaults(fn="gpu_check:cmd_gpu_check")
    pr = sub.add_parser("profile", help="manage the Snakemake profile for SLURM")
    prs = pr.add_subparsers(dest="action", required=True)
    pi = prs.add_parser("install", help="write profiles/slurm as a user profile with your cluster's names")
    pi.add_argument("--partition", help="default partition (a stage's `resources.<stage>.partition` wins)")
    pi.add_argument("--account", help="default account")
    pi.add_argument("--qos", help="default QOS")
    pi.add_argument("--name", default="slurm", help="profile name (default: slurm -> `snakemake --profile slurm`)")
    pi.add_argument("--force", action="store_true", help="replace an existing, different profile of that name")
    pi.set_defaults(fn="profile:cmd_profile_install")
    a = p.parse_args(argv)
    module, function = a.fn.split(":")
    try:  # each command imports what it needs: `rlsweep query` never loads pydantic, Optuna or torch
        return getattr(importlib.import_module(f"workflow.cli.{module}"), function)(a)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: stopped as asked, no traceback
        print("interrupted", file=sys.stderr)
        return 130
