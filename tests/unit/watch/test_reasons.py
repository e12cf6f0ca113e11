"""Why a job failed, as `rlsweep watch` names it (workflow/watch/reasons.py)."""

from __future__ import annotations

from workflow.watch.reasons import classify, last_exception, log_tail

TRACEBACK = """Traceback (most recent call last):
  File "scripts/stage.py", line 9, in <module>
    main()
  File "workflow/launch.py", line 300, in run_training
    raise ValueError("rl.lr: must be > 0")
ValueError: rl.lr: must be > 0
srun: error: node3: task 0: Exited with exit code 1
"""


def test_the_scheduler_knows_time_memory_node_and_preemption_best():
    for state in ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"):
        assert classify(state, "RuntimeError: something else", TRACEBACK) == state


def test_cuda_memory_and_nccl_are_found_in_the_error_or_the_log():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert classify("FAILED", None, f"...\n{oom}\n") == "CUDA out of memory"
    assert classify(None, oom, "") == "CUDA out of memory"
    nccl = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
    assert classify("FAILED", None, nccl) == "NCCL error"


def test_otherwise_the_last_line_of_the_python_exception():
    assert classify(None, "ValueError: rl.lr: must be > 0", "") == "ValueError: rl.lr: must be > 0"
    assert classify("FAILED", None, TRACEBACK) == "ValueError: rl.lr: must be > 0"  # the srun line after it skipped
    assert last_exception("all went well\n") is None
    assert classify("FAILED", None, "no traceback here\n") == "FAILED"
    assert classify(None, None, "") == "failed"


def test_a_log_tail_is_the_end_of_the_file_and_nothing_for_a_missing_one(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("x" * 100_000 + "\nRuntimeError: the end\n")
    assert log_tail(log).endswith("RuntimeError: the end\n") and len(log_tail(log)) <= 16384
    assert log_tail(tmp_path / "missing.log") == "" and log_tail(None) == ""
