"""SFT on the verl engine, end to end on CPU: our SFT stage -> torchrun -> verl's own SFTTrainer (FSDP2, gloo, 1 and
2 ranks) -> train_steps rows and checkpoints where the RL and eval stages find them, with engine.verl.device: cpu
(the package's CPU platform loaded into the torchrun ranks by verl's external-modules hook, verl's CPU settings)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import need

need("verl")

import duckdb  # noqa: E402

from workflow.config import RunConfig  # noqa: E402
from workflow.engines.verl.job.sft_launch import command  # noqa: E402
from workflow.layout import stage_dir, table_dir  # noqa: E402
from workflow.launch import run_stage  # noqa: E402
from workflow.stages import stage_config  # noqa: E402
from workflow.identity import stable_id  # noqa: E402
from workflow.tracking.hook import record_tracking  # noqa: E402

pytestmark = [pytest.mark.serial("verl"), pytest.mark.slow]
# Long tests (on demand, their last pass in docs/tests.md) since issue 58 took CI under 35 minutes: two verl SFT
# starts (1 and 2 ranks, ~3.5 min of a loaded worker). In CI without them: verl SFT through torchrun as the first stage
# of the verl chain (tests/verl/test_verl_cpu.py: checkpoints where RL finds them, train_steps), and the global token-mean
# loss of verl's SFT step by the integrity preflight on verl's own actor (tests/verl/test_verl_preflight.py)
SFT_CODE = ["workflow/engines/verl/", "workflow/preflight.py", "workflow/algos/losses.py", "workflow/launch.py"]  # README "Tests": one at a time with the other verl modules

STEPS, EVERY, BATCH, LR = 4, 2, 8, 1e-2


def sft_stage(model: Path, ranks: int) -> dict:
    cfg = RunConfig.model_validate({
        # device cpu: the package's CPU platform in every torchrun rank and the CPU keys of verl's SFT config
        "engine": {"name": "verl", "verl": {"model_path": str(model), "n_gpus_per_node": ranks, "device": "cpu"}},
        "sft": {"steps": STEPS, "batch_size": BATCH, "micro_batch_size": 2, "checkpoint_every": EVERY, "lr": LR}})
    from workflow.engines.verl.job.compose import validate
    validate(cfg)  # what loading a sweep with this run does
    return stage_config(cfg, "sft")


def run(root: Path, cfg: dict) -> Path:
    return run_stage("sft", "s", stable_id(cfg), cfg, results_root=root)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    import verl_cpu
    root = tmp_path_factory.mktemp("verl_sft")
    model = verl_cpu.write_tiny_model(root / "model")
    mp = pytest.MonkeyPatch()
    mp.setenv("OMP_NUM_THREADS", "1")
    mp.setenv("TOKENIZERS_PARALLELISM", "false")
    out = {"model": model}
    try:
        for ranks in (1, 2):
            cfg = sft_stage(model, ranks)
            record_tracking(root / f"r{ranks}", "s", {"tensorboard": {}})  # what the Snakefile does for the sweep
            out[ranks] = {"cfg": cfg, "root": root / f"r{ranks}", "done": run(root / f"r{ranks}", cfg)}
        yield out
    finally:
        mp.undo()


def steps_table(root: Path) -> list[dict]:
    return duckdb.sql(f"SELECT step, loss, grad_norm, lr, tokens FROM '{table_dir(root, 'train_steps')}/*.parquet' "
                      "ORDER BY step").fetchdf().to_dict("records")


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM
    return {k: v.float() for k, v in AutoModelForCausalLM.from_pretrained(ckpt).state_dict().items()}


@pytest.mark.long(covers=SFT_CODE)
def test_the_stage_ends_with_checkpoints_where_rl_and_eval_find_them(trained):
    done = json.loads(trained[1]["done"].read_text())
    final = trained[1]["done"].parent / done["checkpoint"]
    assert done["step"] == STEPS and final.name == f"step_{STEPS:06d}"
    ckpts = sorted(p.name for p in final.parent.iterdir())
    assert ckpts == [f"step_{s:06d}" for s in range(EVERY, STEPS + 1, EVERY)]
    meta = json.loads((final / "meta.json").read_text())
    assert (meta["stage"], meta["engine"], meta["step"]) == ("sft", "verl", STEPS)
    trainedw, init = weights(final), weights(trained["model"])
    assert max(float((trainedw[k] - init[k]).abs().max()) for k in init) > 1e-3  # SFT moved the weights
    runs = duckdb.sql(f"SELECT stage, status, preflight FROM '{table_dir(trained[1]['root'], 'runs')}/*.parquet'")
    assert runs.fetchall() == [("sft", "completed", "passed")]  # the integrity preflight ran on verl first


@pytest.mark.long(covers=SFT_CODE)
def test_train_steps_hold_every_step_once_with_the_steps_learning_rate(trained):
    rows = steps_table(trained[1]["root"])
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[0]["lr"] == pytest.approx(LR)  # warmup 0.1 x 4 steps = none; the lr the step used, not the next
    assert rows[-1]["lr"] < rows[0]["lr"]  # cosine
    assert all(r["tokens"] > 0 and r["grad_norm"] > 0 for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]


@pytest.mark.long(covers=[*SFT_CODE, "workflow/tracking/"])
def test_verls_sft_trainer_sends_every_step_once_to_the_sweeps_trackers(trained):
    """verl's trainer records the steps in its own process (rank 0 of 1 or 2): it reports them to the sweep's
    trackers itself, one tracker run per SFT job, every step once with train_steps' loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    for ranks in (1, 2):
        root = trained[ranks]["root"]
        (folder,) = (root / "s" / "tensorboard").iterdir()
        assert folder.name == f"sft_{stable_id(trained[ranks]['cfg'])}"
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        sent = [(e.step, e.value) for e in acc.Scalars("train/loss")]
        assert sent == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps_table(root)], ranks


@pytest.mark.long(covers=SFT_CODE)
def test_the_loss_is_the_global_token_mean_over_the_assistant_tokens(trained):
    """verl's step-1 loss equals our own computation on the initial model: the mean NLL over every assistant token
    of the batch (the batch is torch's DistributedSampler order, which verl's trainer uses)."""
    import pyarrow.parquet as pq
    from torch.utils.data import DistributedSampler
    from transformers import AutoModelForCausalLM, AutoTokenizer
    data = trained[1]["done"].parent / "data" / "sft.parquet"
    rows = pq.read_table(data).to_pylist()
    assert len(rows) == STEPS * BATCH
    batch = list(DistributedSampler(range(len(rows)), num_replicas=1, rank=0, shuffle=True, seed=0,
                                    drop_last=True))[:BATCH]
    tok = AutoTokenizer.from_pretrained(trained["model"])
    model = AutoModelForCausalLM.from_pretrained(trained["model"], attn_implementation="sdpa").float()
    nll, n = 0.0, 0
    for i in batch:
        user, assistant = (tok(m["content"], add_special_tokens=False)["input_ids"] for m in rows[i]["messages"])
        ids = torch.tensor([user + assistant])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
        nll -= float(logp[len(user) - 1:].sum())  # predictions of the assistant's tokens only
        n += len(assistant)
    assert steps_table(trained[1]["root"])[0]["loss"] == pytest.approx(nll / n, rel=1e-6)


@pytest.mark.long(covers=SFT_CODE)
def test_two_ranks_train_what_one_rank_trains(trained):
    """Same global batches split over 2 gloo ranks: the same losses (global token mean across ranks) and weights."""
    one, two = steps_table(trained[1]["root"]), steps_table(trained[2]["root"])
    for a, b in zip(one, two, strict=True):
        assert (a["step"], a["tokens"]) == (b["step"], b["tokens"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["grad_norm"] == pytest.approx(b["grad_norm"],
                                                                                                    rel=1e-5)
    w1 = weights(trained[1]["done"].parent / "checkpoints" / f"step_{STEPS:06d}")
    w2 = weights(trained[2]["done"].parent / "checkpoints" / f"step_{STEPS:06d}")
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-2  # verl's merger writes bf16


@pytest.mark.long(covers=SFT_CODE)
def test_a_restarted_stage_resumes_from_verls_checkpoint(trained, tmp_path, monkeypatch):
    """The job died after flushing steps 3-4 but before saving step 4: the rerun resumes at step 2 from verl's own
    checkpoint, writes steps 3-4 once, and ends with the uninterrupted run's weights."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src, cfg = trained[1]["root"], trained[1]["cfg"]
    root = tmp_path / "r"
    shutil.copytree(src, root)
    stage = stage_dir(root, "sft", stable_id(cfg))
    shutil.rmtree(stage / "verl" / f"global_step_{STEPS}")
    (stage / "verl" / "latest_checkpointed_iteration.txt").write_text(str(EVERY))  # verl writes it after a save
    shutil.rmtree(stage / "checkpoints" / f"step_{STEPS:06d}")
    (stage / "DONE.json").unlink()
    files = {f.name: f.stat().st_mtime_ns for f in table_dir(root, "train_steps").iterdir()}
    time.sleep(0.01)
    run(root, cfg)
    # (mtimes, not inodes: a deleted file's inode number is reused by the next file written)
    after = {f.name: f.stat().st_mtime_ns for f in table_dir(root, "train_steps").iterdir()}
    first, second = (f"sft_{stable_id(cfg)}_{a:06d}-{b:06d}.parquet" for a, b in ((1, 2), (3, 4)))
    assert set(after) == set(files) == {first, second}
    assert after[first] == files[first] and after[second] != files[second]  # steps 1-2 not retrained, 3-4 redone
    rows = steps_table(root)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in steps_table(src)], rel=1e-6)
    final = f"step_{STEPS:06d}"
    a, b = weights(stage / "checkpoints" / final), weights(trained[1]["done"].parent / "checkpoints" / final)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_launch_command_runs_torchrun_here_or_over_the_allocation():
    one = command(Path("c.yaml"), Path("l.json"), n_gpus_per_node=8)
    assert one[:5] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8", "--standalone"]
    assert one[-4:] == ["-m", "workflow.engines.verl.torchrun.sft_trainer", "c.yaml", "l.json"]
    multi = command(Path("c.yaml"), Path("l.json"), n_gpus_per_node=4, nodes=["n1", "n2"], port=29400,
                             job_id="77")
    assert multi[:6] == ["srun", "--overlap", "--nodes=2", "--ntasks-per-node=1", "--nodelist=n1,n2",
                         "--kill-on-bad-exit=1"]
    assert {"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=n1:29400", "--rdzv-id=77",
            "--nproc-per-node=4"} <= set(multi)
