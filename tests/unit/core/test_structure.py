"""The package's shape: no import cycle and no import of another module's private (_name) names inside workflow/,
the modules verl and torchrun load by name exist and import, reading a sweep imports neither torch nor Optuna,
and the update-rule registry and the run config agree."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from helpers import REPO

PACKAGE = REPO / "workflow"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@lru_cache(maxsize=None)
def parse(source: str) -> ast.Module:
    """One parse per source for the whole module: most tests here walk every module of the package."""
    return ast.parse(source)


def _runtime_nodes(tree: ast.AST):
    """Every node except what sits under `if TYPE_CHECKING:` (annotations only, never imported at run time)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, source: str | None = None, typing: bool = True) -> list[tuple[str, list[str]]]:
    """(module imported, names imported from it) for every import in the module, function-level ones included
    (a lazy import is still an edge of the graph), and those under `if TYPE_CHECKING:` unless typing=False (an
    annotation-only import is not run, but it is still a floor below depending on one above)."""
    path = MODULES.get(name, PACKAGE / "x.py")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = parse(source if source is not None else path.read_text())
    for node in (ast.walk(tree) if typing else _runtime_nodes(tree)):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


def ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def edges() -> dict[str, set[str]]:
    """Module -> the workflow modules importing it runs: the module itself, for `from pkg import sub` the
    submodule, and the __init__ of every package above it, except the importer's own packages (Python has
    initialised those before the importer runs; a package __init__ re-exporting its submodules is not a cycle)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, names in imports_of(m):
            if not target.startswith("workflow"):
                continue
            hit = {target} | {f"{target}.{n}" for n in names} | (ancestors(target) - ancestors(m))
            graph[m] |= {h for h in hit if h in MODULES and h != m}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_cycle_through_another_packages_init_counts(monkeypatch):
    """study.space importing workflow.sweep.keys runs workflow/sweep/__init__.py first: if that imported expand,
    and expand study.space, importing study.space first would fail half-way."""
    monkeypatch.setitem(MODULES, "workflow.sweep", MODULES["workflow.sweep"])
    real = imports_of

    def fake(name):
        extra = {"workflow.sweep": [("workflow.sweep.expand", ["load_sweep"])],
                 "workflow.sweep.expand": [("workflow.study.space", ["check_space"])]}
        return real(name) + extra.get(name, [])
    monkeypatch.setattr(sys.modules[__name__], "imports_of", fake)
    assert any({"workflow.study.space", "workflow.sweep", "workflow.sweep.expand"} <= set(c) for c in cycles(edges()))


def test_no_import_cycles_inside_the_package():
    found = cycles(edges())
    assert not found, "import cycles (module-level and function-level imports, parent packages included):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_the_files_long_tests_count_as_not_run_are_imported_by_no_module():
    """scripts/long_tests.py's NOT_RUN files (lists that only CI's tests read, such as the verl seam's) change no long
    test's pass: true while no module of the package imports them, lazily or relatively included."""
    spec = importlib.util.spec_from_file_location("long_tests", REPO / "scripts" / "long_tests.py")
    long_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long_tests)
    graph = edges()
    for rel in long_tests.NOT_RUN:
        name = module_name(REPO / rel)
        assert name in MODULES, f"{rel}: not a module of the package"
        importers = sorted(m for m, imported in graph.items() if name in imported)
        assert not importers, f"{rel} is imported by {importers}: it is run code, not a list only tests read"


# ------------------------------------------------------------------------------- floors
# Every module of the package stands on a floor, lowest first; a module imports its own floor and those below, never
# one above (an import that must run up is listed in UPWARD with its reason). A module's floor is the one whose
# pattern names it most closely (fnmatch patterns on dotted names: a package's pattern covers its modules). Floors
# are what a reader can rely on: config.py never drags in an engine, the sweep file's schema never the study or the
# report, a stage job's code never the CLI. Where a floor needs a check that belongs above it, the owner's function
# is named by "module:function" and loaded at run time (workflow/sweep/spec.py BLOCK_CHECKS, the registries'
# builtins): test_engines_and_builtin_methods_named_by_string_exist holds those names true.
FLOORS = [
    ("ground", "what every floor stands on: errors, files written whole, strict models, registries by name, paths on "
     "disk, progress, the hub, the model cache, live files, checkpoints, run identity (ids are hashes of configs), "
     "retry names (the resource a stage's retry settings travel in), the GPUs a process can use",
     ("workflow", "workflow.errors", "workflow.atomic", "workflow.strict", "workflow.registry", "workflow.layout",
      "workflow.progress", "workflow.capture", "workflow.hub", "workflow.kernels", "workflow.preemption",
      "workflow.live", "workflow.checkpoint", "workflow.models", "workflow.identity", "workflow.dry_run",
      "workflow.big_dag", "workflow.slurm.retry", "workflow.devices")),
    ("cluster", "where a job runs: SLURM (the executor plugin, the job callable, the controller, retries by reason), "
     "where a job ran (provenance) and the lock a stage holds while it runs", ("workflow.slurm", "workflow.provenance",
                                                                           "workflow.runlock")),
    ("algorithms", "the math of training, one definition for both engines", ("workflow.algos",)),
    ("units", "what a sweep names, light to import: benchmarks and graders, methods (cards and algorithms), training "
     "sets, and what the rest knows of an engine (traits, the registry, the capability table)",
     ("workflow.benchmarks", "workflow.methods", "workflow.data.sources", "workflow.engine_api")),
    ("config", "the run config, each stage declared once, where segments end and which steps are evaluated",
     ("workflow.config", "workflow.stages", "workflow.segments", "workflow.eval.plan", "workflow.job_args")),
    ("store", "the tables and what writes, reads, compacts and checks them, the trackers the rows feed, and a run "
     "taking a finished run's segments (links in the store)", ("workflow.results", "workflow.tracking",
                                                                "workflow.extend")),
    ("training", "what a stage job runs: the engines (the Engine protocol names the stage configs and the train log "
     "it is handed; a method's verl adapter and verl half meet the verl engine's), evaluation, data, the integrity "
     "preflight",
     ("workflow.engines", "workflow.engine_api.protocol", "workflow.methods.*.verl", "workflow.methods.*.verl_adapter",
      "workflow.eval", "workflow.data",
      "workflow.preflight")),
    ("sweep", "the sweep file: its schema (the optuna: block's included), its runs and their ids, its plan",
     ("workflow.sweep",)),
    ("study", "Optuna studies over a sweep's runs", ("workflow.study",)),
    ("design", "seeds on demand: the sequential test (AdaStop), its simulation, the driver of a design's rounds",
     ("workflow.design",)),
    ("report", "the report and its tables", ("workflow.report",)),
    ("commands", "what a user or Snakemake runs: the stage job (launch), the CLI, watch, the reference pages, "
     "smoke, gpu-check", ("workflow.launch", "workflow.cli", "workflow.watch", "workflow.reference", "workflow.smoke",
                          "workflow.gpu_check", "workflow.gpu_check_verl")),
]
UPWARD: dict[tuple[str, str], str] = {}  # (importer, imported) -> why it must run up; at most 4 (issue 62)


def floor_of(module: str, floors=FLOORS) -> int:
    """The index of the module's floor: the pattern that names it most closely (the most dotted parts). A package's
    __init__ that imports nothing of the project stands on the ground: importing a package's module runs it, and it
    runs nothing of ours (workflow/data/ holds modules of two floors)."""
    path = MODULES.get(module)
    if path is not None and path.name == "__init__.py" and not any(
            t.startswith("workflow") for t, _ in imports_of(module)):
        return 0
    best = None
    for i, (_, _, patterns) in enumerate(floors):
        for pattern in patterns:
            parts = pattern.count(".") + 1
            if fnmatch.fnmatchcase(module, pattern) or (
                    fnmatch.fnmatchcase(module, pattern + ".*") and not pattern.endswith("workflow")):
                if best is None or parts > best[0]:
                    best = (parts, i)
    if best is None:
        raise KeyError(f"{module} stands on no floor: add it to FLOORS in {__file__}")
    return best[1]


def upward_imports(floors=FLOORS) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a higher floor's module, lazy and TYPE_CHECKING ones included."""
    return sorted((m, t) for m, targets in edges().items() for t in targets if floor_of(t, floors) > floor_of(m, floors))


def test_every_module_stands_on_a_floor_and_every_pattern_names_one():
    for m in MODULES:
        floor_of(m)
    stale = [p for _, _, patterns in FLOORS for p in patterns
             if not any(fnmatch.fnmatchcase(m, p) or fnmatch.fnmatchcase(m, p + ".*") for m in MODULES)]
    assert not stale, f"FLOORS patterns naming no module: {stale}"


def test_no_import_runs_up_a_floor_unless_listed_with_its_reason():
    found = upward_imports()
    unlisted = [f"{m} ({FLOORS[floor_of(m)][0]}) imports {t} ({FLOORS[floor_of(t)][0]})" for m, t in found
                if (m, t) not in UPWARD]
    assert not unlisted, "imports that run up a floor:\n" + "\n".join(unlisted)
    assert not set(UPWARD) - set(found), f"listed but gone (remove them): {sorted(set(UPWARD) - set(found))}"
    assert len(UPWARD) <= 4 and all(UPWARD.values())


def test_the_floor_test_sees_an_import_that_runs_up(monkeypatch):
    """config.py importing the engines package (as it did before issue 62) is found."""
    real = imports_of

    def fake(name, *args, **kwargs):
        return real(name, *args, **kwargs) + ([("workflow.engines.local", ["LocalEngine"])]
                                              if name == "workflow.config" else [])
    monkeypatch.setattr(sys.modules[__name__], "imports_of", fake)
    assert ("workflow.config", "workflow.engines.local") in upward_imports()
    assert floor_of("workflow.methods.prefix_rft.verl") > floor_of("workflow.methods.prefix_rft") == \
        floor_of("workflow.methods.prefix_rft.algorithm")


# floors sealed tighter still: what each may import of the project (itself, and the modules listed)
SEALED = {"workflow.registry": ("workflow.registry",),
          # the algorithms: one definition for both engines, so nothing of either engine (nor verl)
          "workflow.algos": ("workflow.algos",),
          "workflow.benchmarks": ("workflow.benchmarks", "workflow.hub", "workflow.registry")}


@pytest.mark.parametrize("floor", sorted(SEALED))
def test_low_floors_import_nothing_above_them(floor):
    allowed = SEALED[floor]
    bad = [f"{m} imports {target}" for m in MODULES if m == floor or m.startswith(floor + ".")
           for target, _ in imports_of(m) if target.split(".")[0] in ("verl", "vllm", "ray") or
           (target.startswith("workflow") and not any(target == a or target.startswith(a + ".") for a in allowed))]
    assert not bad, "\n".join(bad)


ENGINE_NAME_TEST = re.compile(r"""engine(\.name|\[["']name["']\]|\.get\(["']name["'].*?\))\s*"""
                              r"""(==|!=|not in|in)\s*[\(\[\{]?\s*["']""")  # compared with a name, or a list of names


def test_only_the_engines_know_engines_by_name():
    """Outside workflow/engines/ an engine is asked (its traits: workflow/engine_api/traits.py), never compared by name:
    a third engine then needs no edit anywhere else."""
    assert ENGINE_NAME_TEST.search('x = cfg.engine.name == "verl"') and ENGINE_NAME_TEST.search(
        "engine.get('name') != 'local'") and ENGINE_NAME_TEST.search("if cfg.engine.name in ('local', 'verl'):")
    assert not ENGINE_NAME_TEST.search("traits(cfg.engine.name).gpus(cfg.engine)")
    assert not ENGINE_NAME_TEST.search("if base.engine.name not in able:")
    bad = [f"{m}:{i}: {line.strip()}" for m, path in MODULES.items() if not m.startswith("workflow.engines")
           for i, line in enumerate(path.read_text().splitlines(), 1) if ENGINE_NAME_TEST.search(line)]
    assert not bad, "\n".join(bad)


# what lists a table's folder or names its files one by one: right only inside results/ (which knows packs) and
# layout.py (which defines the names); a reader elsewhere goes through the catalog or results/rows.py (issue 57)
TABLE_LISTERS = {"table_dir", "train_steps_files", "table_files", "table_layout", "layout_of", "read_layout"}
def table_listings(name: str, source: str) -> list[str]:
    """Every use of a table-listing helper, and every spelled-out path into the tables' folder, in one source."""
    nodes = list(ast.walk(parse(source)))
    bad = [f"{name}:{node.lineno}: {node.id if isinstance(node, ast.Name) else node.attr}" for node in nodes
           if (isinstance(node, ast.Name) and node.id in TABLE_LISTERS)
           or (isinstance(node, ast.Attribute) and node.attr in TABLE_LISTERS)]
    bad += [f"{name}:{node.lineno}: {node.value!r}" for node in nodes  # a path into _store/tables/ spelled out
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.strip("/").split("/")[0] == "tables"]
    bad += [f"{name}: from {target} import {n}" for target, names in imports_of(name, source)
            for n in names if n in TABLE_LISTERS]
    return bad


def test_no_module_outside_results_lists_a_table_folder():
    """Rows that compaction moved into a pack are invisible to a listing by file name: an extension that read its
    donor's steps so lost steps 1-80 (issue 57). Outside workflow/results/ and layout.py, rows are read through the
    catalog (SQL) or results/rows.py, never by listing a table's folder; the stage scripts and the Snakefile too."""
    probe = ("from workflow.layout import table_dir, train_steps_files\n"
             "def f(root):\n    return sorted(table_dir(root, 'runs').glob('*.parquet'))\n"
             "def g(root):\n    return (root / '_store' / 'tables' / 'runs').iterdir()\n")
    assert len(table_listings("workflow.probe", probe)) == 4  # the import (2 names), the call, the spelled-out path
    bad = [line for m, path in MODULES.items() if not (m.startswith("workflow.results") or m == "workflow.layout")
           for line in table_listings(m, path.read_text())]
    for path in [*sorted((REPO / "scripts").glob("*.py")), REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        text = path.read_text()
        bad += [f"{path.relative_to(REPO)}:{i}: {word}" for i, line in enumerate(text.splitlines(), 1)
                for word in TABLE_LISTERS if re.search(rf"\b{word}\b", line)]
    assert not bad, "\n".join(bad)


def private_uses(name: str, source: str | None = None) -> list[str]:
    """`from workflow.x import _name` and `x._name` on an imported workflow module, in module `name`."""
    source = source if source is not None else MODULES[name].read_text()
    found = imports_of(name, source, typing=False)
    bad = [f"{name}: from {target} import {n}" for target, names in found
           if target.startswith("workflow") and target != name for n in names if n.startswith("_")]
    modules = {alias for target, names in found if target.startswith("workflow")
               for alias in names if f"{target}.{alias}" in MODULES}
    for node in _runtime_nodes(parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            bad.append(f"{name}: {node.value.id}.{node.attr}")
    return bad


def test_no_module_imports_another_modules_private_names():
    bad = [line for m in MODULES for line in private_uses(m)]
    assert not bad, "\n".join(bad)


def test_the_walker_sees_lazy_imports_type_checking_blocks_and_private_names():
    source = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from workflow.x import Hidden\nfrom workflow.study import pruning\n"
              "def f():\n    from workflow.sweep.keys import apply, _secret\n    return pruning._Reporter\n")
    found = imports_of("workflow.probe", source)
    assert ("workflow.sweep.keys", ["apply", "_secret"]) in found and ("workflow.x", ["Hidden"]) in found
    assert not any(t == "workflow.x" for t, _ in imports_of("workflow.probe", source, typing=False))
    assert private_uses("workflow.probe", source) == ["workflow.probe: from workflow.sweep.keys import _secret",
                                                      "workflow.probe: pruning._Reporter"]


# ------------------------------------------------------------------------------- paths named in the package's text
# a path in a docstring or a field description (the field descriptions become the generated reference and schema):
# a file name with a code or docs extension, with or without folders
NAMED_PATH = re.compile(r"(?<![\w./<>*-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:py|smk|sql|j2|sh|md|yaml|toml))(?![\w/])")
THIRD_PARTY = ("verl", "vllm", "transformers", "torch", "snakemake", "optuna", "ray")  # paths into these are theirs


def named_texts(tree: ast.AST):
    """(line, text) of every docstring (module, class, function) and every pydantic Field description."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Field":
            yield from ((kw.value.lineno, kw.value.value) for kw in node.keywords if kw.arg == "description"
                        and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str))


@lru_cache(maxsize=1)
def third_party_roots() -> tuple[Path, ...]:
    roots = []
    for top in THIRD_PARTY:
        spec = importlib.util.find_spec(top)
        if spec is not None and spec.submodule_search_locations:
            roots.append(Path(list(spec.submodule_search_locations)[0]))
    return tuple(roots)


@lru_cache(maxsize=1)
def known_file_names() -> frozenset[str]:
    """Every file name in the checkout (tracked folders) and in the third-party packages' trees."""
    names = {p.name for top in ("workflow", "scripts", "tests", "rules", "bench", "docs", "profiles", "sweeps",
                                "references", ".ci") for p in (REPO / top).rglob("*")}
    names |= {p.name for p in REPO.iterdir()} | {p.name for root in third_party_roots() for p in root.rglob("*.py")}
    return frozenset(names)


def path_is_true(path: str, folder: Path) -> bool:
    """A path with folders: under the checkout, the package, the naming module's folder or one above it, or a
    third-party package. A bare file name: a placeholder (SWEEP.yaml), a run's output (report.md), or the name of a
    file that exists in the checkout or those packages."""
    if "/" not in path:
        stem, _, ext = path.partition(".")
        return stem.isupper() or ext in ("md", "yaml", "toml") or path in known_file_names()
    bases = [REPO, PACKAGE, folder, *[a for a in folder.parents if PACKAGE in (a, *a.parents)]]
    bases += [b for root in third_party_roots() for b in (root, root.parent)]
    return any((base / path).exists() for base in bases)


def stale_paths(name: str, source: str, folder: Path) -> list[str]:
    return [f"{name}:{line}: {m.group(1)}" for line, text in named_texts(parse(source))
            for m in NAMED_PATH.finditer(text) if not path_is_true(m.group(1), folder)]


def test_every_path_named_in_a_docstring_or_field_description_exists():
    """A docstring or a field description that names a moved or deleted file sends a reader (and the generated
    configuration reference) to nothing; issue 62 found `workflow/eval/prompts.py` in two field descriptions."""
    probe = ('"""Reads workflow/eval/prompts.py, eval/prompts.py and slow2fast.py; writes SWEEP.yaml and report.md;\n'
             'the templates: workflow/report/templates/report.md.j2, the table: ../layout.py, verl\'s\n'
             'trainer/ppo/core_algos.py."""\nx = Field(1, description="see workflow/nowhere.py")\n')
    found = stale_paths("probe", probe, PACKAGE / "study")
    assert found == ["probe:1: workflow/eval/prompts.py", "probe:1: eval/prompts.py", "probe:1: slow2fast.py",
                     "probe:4: workflow/nowhere.py"] + (["probe:1: trainer/ppo/core_algos.py"]
                                                         if importlib.util.find_spec("verl") is None else []), found
    bad = [line for m, path in MODULES.items() for line in stale_paths(m, path.read_text(), path.parent)]
    assert not bad, "paths that do not exist:\n" + "\n".join(bad)


# ------------------------------------------------------------------------------- the verl wing's contract
VERL = "workflow.engines.verl"
VERL_SIDES = {f"{VERL}.job": "rlsweep's stage job", f"{VERL}.controller": "verl's controller and its trainer",
              f"{VERL}.workers": "verl's FSDP workers", f"{VERL}.rollout": "verl's agent-loop and reward workers",
              f"{VERL}.torchrun": "the torchrun children (SFT, the preflight)",
              f"{VERL}.compat": "the compatibility patches (every process)", "workflow.eval": "the eval backends"}


def verl_side(module: str) -> str | None:
    return next((side for side in VERL_SIDES if module == side or module.startswith(side + ".")), None)


def test_the_verl_wings_sides_meet_only_in_the_contract():
    """The stage job (job/), each kind of verl process (controller/, workers/, rollout/, torchrun/), the patches
    (compat/) and the eval backends share what crosses between them through workflow/engines/verl/contract.py (which
    imports no verl), never by importing one another: each side can change inside without the others following, and
    a module's folder says which process it runs in."""
    crossings = [f"{m} -> {t}" for m in MODULES for t, _ in imports_of(m)
                 if verl_side(m) and t.startswith(VERL) and verl_side(t) not in (None, verl_side(m))]
    assert crossings == []
    sides = {verl_side(m) for m in MODULES if m.startswith(VERL + ".")} - {None}
    assert sides == set(VERL_SIDES) - {"workflow.eval"}, sides  # every module of the wing in a side, or the top
    contract = [t for t, _ in imports_of(f"{VERL}.contract")]
    assert not [t for t in contract if t.split(".")[0] == "verl" or verl_side(t)], contract


# ------------------------------------------------------------------------------- what is loaded by name
@pytest.mark.slow  # imports verl's workers
def test_modules_verl_loads_by_name_import_and_hold_what_is_named():
    pytest.importorskip("verl")
    from workflow.engines.verl import contract
    from workflow.engines.verl.job import translate
    path, fn = contract.REWARD_FN
    assert path.startswith("pkg://")
    assert callable(getattr(importlib.import_module(path[len("pkg://"):]), fn))
    trainer = importlib.import_module(contract.TRAINER_MODULE)
    from workflow.registry import load_object
    assert trainer.RlsweepTrainer and load_object(contract.WORKER_CLASS).actor_worker_cls.__name__ == "RuleTrainingWorker"
    # the task runner the RL process hands verl is defined in the trainer's module, so that Ray imports it (and with
    # it trainer_mode rlsweep) where the runner runs: not listed in VERL_USE_EXTERNAL_MODULES any more
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import get_trainer_cls
    runner = trainer.TASK_RUNNER.__ray_actor_class__
    assert runner.__module__ == contract.TRAINER_MODULE and issubclass(runner, TaskRunnerV1.__ray_actor_class__)
    assert get_trainer_cls("rlsweep") is trainer.RlsweepTrainer
    assert contract.WORKER_CLASS.startswith(contract.WORKER_MODULE + ":")
    sft = importlib.import_module(contract.SFT_TRAINER_MODULE)
    assert callable(sft.main)
    from workflow.engines.verl.adapters import ADAPTERS, VerlAdapter
    from workflow.methods.registry import METHODS
    for name, adapter in ADAPTERS.items():  # a method's verl adapter: its own modules import (Prefix-RFT's loop)
        assert name in METHODS and isinstance(adapter, VerlAdapter), name
        for module in adapter.modules:
            importlib.import_module(module)
    assert ADAPTERS.get("prefix_rft").modules == ("workflow.methods.prefix_rft.verl",)
    assert importlib.import_module("workflow.methods.prefix_rft.verl").PrefixAgentLoop
    from workflow.methods.slow2fast.verl_adapter import SAMPLER
    path, name = SAMPLER  # verl's load_extern_type: a ReplayBuffer subclass
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    assert path.startswith("pkg://") and issubclass(getattr(importlib.import_module(path[6:]), name), ReplayBuffer)
    from workflow.engines.verl.torchrun import preflight  # torchrun runs it by name: python -m MODULE
    assert contract.PREFLIGHT_MODULE == preflight.__name__ and callable(preflight.main)
    # and the translated config names exactly these
    from workflow.config import RunConfig
    out = translate.translate(RunConfig.model_validate({"engine": {"name": "verl", "verl": {"model_path": "m"}},
                                                        "sft": {"enabled": False}}))
    assert out["ray_kwargs.ray_init.runtime_env.env_vars"]["VERL_USE_EXTERNAL_MODULES"] == \
        f"{contract.VLLM_COMPAT_MODULE},{contract.ROLLOUTS_MODULE}"
    importlib.import_module(contract.VLLM_COMPAT_MODULE)
    rollouts = importlib.import_module(contract.ROLLOUTS_MODULE)  # registers the seeded loop the config names
    assert out["actor_rollout_ref.rollout.agent.default_agent_loop"] == contract.SEEDED_AGENT_LOOP
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    assert issubclass(rollouts.SeededAgentLoop, SingleTurnAgentLoop)
    assert (out["reward.custom_reward_function.path"], out["reward.custom_reward_function.name"]) == \
        contract.REWARD_FN
    assert contract.reward_fn() is importlib.import_module(contract.REWARD_FN[0][6:]).compute_score


def test_engines_and_builtin_methods_named_by_string_exist():
    from workflow.engine_api.registry import ENGINES
    from workflow.methods.registry import METHODS
    for name, target in METHODS.builtins.items():
        card = METHODS.get(name)
        folder = target.partition(":")[0]  # workflow.methods.<folder>: the card; its algorithm in the same folder
        assert card.name == name and card.algorithm.startswith(f"{folder}.algorithm:"), (name, card.algorithm)
        algo = card.load()
        assert f"{algo.__module__}:{algo.__qualname__}" == card.algorithm
        if card.role != "part":
            assert algo.name == name
    for name, engine in ENGINES.items():  # traits are light: every engine's loads without its framework
        assert engine.name == name
        module, _, cls = engine.trainer.partition(":")
        if "verl" in module and importlib.util.find_spec("verl") is None:
            continue
        assert getattr(importlib.import_module(module), cls)
    from workflow.registry import load_object
    from workflow.sweep.spec import BLOCK_CHECKS  # the checks a floor above registers for a block of the sweep file
    for block, target in BLOCK_CHECKS.items():
        assert callable(load_object(target)), block
    from workflow.engines.verl.adapters import ADAPTERS  # light (no verl): a method's verl adapter, by its name
    for name, adapter in ADAPTERS.items():
        assert name in METHODS and adapter.name == name and ADAPTERS.builtins[name].startswith(
            f"workflow.methods.{name}.verl_adapter:"), name


def registries() -> dict[str, str]:
    """Entry-point group -> the module defining it, for every module-level `X = Registry(kind, group, ...)`."""
    found = {}
    for m, path in MODULES.items():
        for node in parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Registry"
                    and len(value.args) > 1 and isinstance(value.args[1], ast.Constant)):
                found[value.args[1].value] = m
    return found


def test_every_pluggable_kind_is_one_registry_and_the_readme_lists_its_group():
    """Rules, methods, graders, benchmarks, training sets, engines, samplers, pruners and the verl engine's method
    adapters all sit in the one kind of
    registry (workflow/registry.py), so each takes third-party units the same way, through its entry-point group."""
    groups = registries()
    assert set(groups) == {"methods", "graders", "benchmarks", "datasets", "engines", "samplers", "pruners",
                           "verl_adapters"}, groups
    readme = (REPO / "README.md").read_text()
    assert all(f"`rlsweep.{g}`" in readme for g in groups), [g for g in groups if f"`rlsweep.{g}`" not in readme]


def test_every_stage_of_the_table_names_a_runner_that_exists():
    """The stage table (workflow/stages.py) drives the ids, the typed configs and the launcher: each runner it names
    by string is a function of the launcher."""
    from workflow.stages import STAGES
    from workflow.strict import Strict
    assert list(STAGES) == ["data", "overlap", "pretrain", "sft", "rl", "eval"]
    for stage in STAGES.values():
        module, _, fn = stage.runner.partition(":")
        assert callable(getattr(importlib.import_module(module), fn)) and issubclass(stage.model, Strict)


def test_the_run_configs_method_sections_are_the_cards_settings():
    """rl.<name> is the settings model of the card registered as <name> (and only such sections exist); an update
    rule's or mixed-policy method's constructor takes the section's fields."""
    from workflow.config import RLBase, RLConfig
    from workflow.methods.registry import METHODS
    sections = {*RLConfig.rule_sections(), *RLConfig.mix_sections(), *RLConfig.fast_sections()}
    assert sections == set(RLConfig.model_fields) - set(RLBase.model_fields)
    for name, card in METHODS.items():
        if card.settings is None:
            assert name not in sections, f"{name} has no settings but RLConfig has a section rl.{name}"
            continue
        assert RLConfig.model_fields[name].annotation is card.settings, f"rl.{name} is not {card.settings}"
        if card.role != "part":
            assert set(card.settings.model_fields) <= set(inspect.signature(card.load()).parameters), name


# Where a built-in method is still named outside its folder (workflow/methods/<name>/) in code, not prose.
NAMED_OUTSIDE = {"workflow.config": {"grpo"}}  # RLConfig.method: a mix on the default rule reads "luffy"


def test_a_method_is_named_only_in_its_own_folder():
    """A method is one unit: no package module outside workflow/methods/ reads its section (`rl.<name>`) or compares
    a name with it (`rl.mix == "<name>"`), beyond the list above, so adding a method touches no other module: the
    engines reach parts through their hooks (workflow/algos/part.py), rules and mixes through their interfaces."""
    from workflow.methods.registry import METHODS
    names = set(METHODS.builtins) - {"none"}
    found: dict[str, set[str]] = {}
    for m, path in MODULES.items():
        if m.startswith("workflow.methods"):
            continue
        for node in ast.walk(parse(path.read_text())):
            hits = {node.attr} & names if isinstance(node, ast.Attribute) else {
                c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)} & names \
                if isinstance(node, ast.Compare) else set()
            found.setdefault(m, set()).update(hits)
    assert {m: v for m, v in found.items() if v} == NAMED_OUTSIDE


def test_method_cards_are_light_and_algorithms_know_no_engine():
    """Reading a sweep loads every card (the run config's sections are theirs): a card imports no torch and nothing
    above the registry; an algorithm builds on workflow.algos and nothing of an engine; a method's verl adapter
    (verl_adapter.py: what verl needs of it) imports only the verl engine's adapter type, no verl; its verl half (its
    folder's verl.py: Prefix-RFT's agent loop, Slow2Fast's sampler) meets the verl engine only through its contract,
    and no engine module imports either (the engine looks the adapter up by the method's name, verl loads the half by
    the names the adapter gives)."""
    cards = ("workflow.methods", "workflow.registry", "workflow.strict")
    bad = []
    for m in [m for m in MODULES if m.startswith("workflow.methods")]:
        algorithm, half, adapter = m.endswith(".algorithm"), m.endswith(".verl"), m.endswith(".verl_adapter")
        allowed = ((*cards, "workflow.algos", "workflow.engines.verl.contract") if half
                   else (*cards, "workflow.engines.verl.adapters") if adapter
                   else (*cards, "workflow.algos") if algorithm else cards)
        for target, _ in imports_of(m):
            heavy = target.split(".")[0] in (() if half else ("verl", "vllm", "ray") if algorithm
                                             else ("torch", "verl", "vllm", "ray"))
            above = target.startswith("workflow") and not any(target == a or target.startswith(a + ".") for a in allowed)
            if heavy or above:
                bad.append(f"{m} imports {target}")
    bad += [f"{m} imports {t}" for m in MODULES if m.startswith("workflow.engines") for t, _ in imports_of(m)
            if t.startswith("workflow.methods.") and t.rpartition(".")[2] in ("verl", "verl_adapter")]
    assert not bad, "\n".join(bad)


def test_reading_a_sweep_imports_neither_torch_nor_optuna():
    code = ("import sys; from workflow.sweep.expand import load_sweep; s = load_sweep('sweeps/demo.yaml'); "
            "print(len(s.runs), sorted(m for m in ('torch', 'optuna', 'verl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split(maxsplit=1)[1].strip() == "[]", out.stdout


@pytest.mark.slow  # a fresh interpreter per command
@pytest.mark.parametrize("argv, heavy", [
    # (query loads the method cards, pydantic models: their per-step numbers are train_steps columns; ~0.1 s)
    (["query", "SELECT count(*) FROM runs"], ("torch", "optuna", "verl", "snakemake", "pandas", "transformers")),
    (["status", "sweeps/demo.yaml"], ("torch", "optuna", "verl", "snakemake")),
    (["validate", "sweeps/demo.yaml"], ("torch", "optuna", "verl", "snakemake", "duckdb")),
    # (a design's screen prices its rounds with the plan: DuckDB, never the training stack nor pandas)
    (["validate", "sweeps/seeds_on_demand.yaml"], ("torch", "optuna", "verl", "snakemake", "pandas")),
    (["status", "sweeps/seeds_on_demand.yaml"], ("torch", "optuna", "verl", "snakemake", "pandas")),
    (["plan", "sweeps/demo.yaml"], ("torch", "optuna", "verl", "snakemake")),
    (["report", "sweeps/demo.yaml"], ("torch", "optuna", "verl", "snakemake")),
])
def test_read_side_commands_import_only_what_they_use(tmp_path, argv, heavy):
    """`rlsweep query` answers in well under a second: it loads DuckDB and pyarrow, not the training stack."""
    from workflow.results.writer import write_rows
    from workflow.results.membership import Member, record
    write_rows(tmp_path, "runs", "rl_0000000000a1", [dict(run_id="0000000000a1", sweep="demo", stage="rl", method="grpo")])
    record(tmp_path, "demo", [Member("rl", "0000000000a1")])
    code = ("import runpy, sys\n"
            f"sys.argv = ['rlsweep', '--results', {str(tmp_path)!r}, *{argv!r}]\n"
            "try:\n    runpy.run_module('workflow.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            f"print('LOADED', code, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stderr.splitlines()[-1] == "LOADED 0 []", out.stderr[-2000:]
