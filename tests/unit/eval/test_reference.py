"""Docs from the code (workflow/reference.py): every key of a sweep file carries its help in its model, the
configuration reference and the sweep files' JSON Schema are generated from the models and kept current, and the
schema accepts every shipped sweep and refuses what rlsweep refuses, naming the key."""

from __future__ import annotations

import json

import pytest
import yaml

from helpers import REPO
from workflow import reference
from workflow.config import RunConfig
from workflow.sweep.spec import SweepSpec


def test_every_key_of_a_sweep_file_has_a_description():
    assert reference.undocumented(SweepSpec) == [] and reference.undocumented(RunConfig) == []


def test_the_generated_reference_and_schema_are_current():
    assert reference.stale() == [], "run `python scripts/docs.py` and commit docs/"


def test_the_reference_lists_every_run_config_key_with_its_type_default_and_meaning():
    text = reference.REFERENCE.read_text()
    assert "### `rl.sfpo`" in text and "| `K` | int ≥ 1 | `3` | Fast steps per RL step" in text
    assert "| `gpu_memory_utilization` | float in (0.0, 1.0] | `0.6` |" in text
    for key in reference.run_config_keys():
        parent, _, leaf = key.rpartition(".")
        assert f"| `{leaf}` |" in text.split(f"### `{parent}`")[1 if parent else 0], key


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(reference.SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", sorted((REPO / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_sweep_is_valid_under_the_schema(validator, path):
    assert [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))] == []


@pytest.mark.parametrize("sweep, where", [
    ({"name": "x", "base": {"rl": {"lrr": 1e-4}}}, "base.rl"),  # a typo in a run-config key
    ({"name": "x", "grid": {"rl.lrr": [1e-4]}}, "grid"),  # ... in a dotted key
    ({"name": "x", "base": {"rl": {"group_size": 1}}}, "base.rl.group_size"),  # below its bound
    ({"name": "x", "base": {"eval": {"backend": "tgi"}}}, "base.eval.backend"),  # not one of the choices
    ({"name": "x", "resources": {"rl": {"gpu": 1}}}, "resources.rl"),
    ({"name": "x", "optuna": {"objective": "math_avg_at_k", "n_trials": 2, "space": {"rl.sfpo.k": {"type": "int"}}}},
     "optuna.space"),
    ({"base": {}}, ""),  # no name
])
def test_the_schema_refuses_what_rlsweep_refuses_at_the_key(validator, sweep, where):
    def flat(errors):  # an anyOf's error (an optional section) holds its members' errors
        for e in errors:
            yield e
            yield from flat(e.context or [])
    errors = list(flat(validator.iter_errors(sweep)))
    assert errors and any(".".join(map(str, e.absolute_path)) == where for e in errors), \
        [(list(e.absolute_path), e.message) for e in errors]


def test_the_readme_is_a_short_guide_that_links_every_page_of_the_docs():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 500 and "## Contents" in readme
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if f"](docs/{p})" not in readme] == []


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    import re
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))])
def test_every_relative_link_of_the_docs_leads_somewhere(page):
    """A moved section or a renamed file breaks no link: each relative link names a file that exists, and each
    `#anchor` a heading of its page."""
    import re
    path = REPO / page
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not inside code
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", dest.read_text(), flags=re.S), re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(target)
    assert broken == []
