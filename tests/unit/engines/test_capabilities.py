"""What each engine can do, from one source (workflow/engine_api/capabilities.py, issue 61): every capability an engine
lacks carries its reason, docs/engines.md is the table the traits give, and what a trait says it lacks the run
config refuses at its key."""

from __future__ import annotations

import pytest

from workflow.config import RunConfig
from workflow.engine_api.capabilities import CAPABILITIES, lacking, markdown, why_not
from workflow.engine_api.registry import ENGINES
from workflow.engines.local_traits import LocalTraits
from workflow.methods.registry import METHODS
from workflow.reference import ENGINES_PAGE


@pytest.mark.parametrize("name", list(ENGINES.builtins))
def test_every_capability_an_engine_lacks_has_its_reason_and_no_reason_is_left_over(name):
    engine = ENGINES.get(name)
    for cap in CAPABILITIES:
        assert isinstance(getattr(engine, cap.trait), bool), cap.trait
        if lacking(engine, cap):
            assert why_not(engine, cap), f"{name} lacks {cap.title} ({cap.trait}) without a reason in its `lacks`"
    # a reason for something it has (a capability built since, its reason left behind) misleads the table's reader
    stale = [t for t in engine.lacks if not any(c.trait == t and lacking(engine, c) for c in CAPABILITIES)]
    assert stale == [], f"{name}'s `lacks` gives reasons for what it has or for no capability: {stale}"
    assert set(engine.lacks_methods) <= set(METHODS.names()), "lacks_methods names an unknown method"


def test_the_engines_page_is_the_table_the_traits_give():
    text = markdown()
    assert ENGINES_PAGE.read_text() == text, "run `python scripts/docs.py` and commit docs/"
    for cap in CAPABILITIES:
        assert f"| {cap.title} |" in text
    assert "no reason stated" not in text


class _NoLoraTraits(LocalTraits):
    lora = False
    lacks = {**LocalTraits.lacks, "lora": "its toy model has no adapters"}
    lacks_methods = {"luffy": "no demonstrations reach its toy loop"}


def test_what_an_engine_lacks_is_refused_at_its_key_with_its_reason(monkeypatch):
    monkeypatch.setitem(ENGINES.loaded, "toy", _NoLoraTraits())
    with pytest.raises(ValueError, match="model.lora: engine toy has no LoRA: its toy model has no adapters"):
        RunConfig.model_validate({"engine": {"name": "toy"}, "model": {"lora": {"rank": 4}}})
    with pytest.raises(ValueError, match="rl.mix: luffy: engine toy cannot train it: no demonstrations reach its"):
        RunConfig.model_validate({"engine": {"name": "toy"}, "rl": {"mix": "luffy"}})
    RunConfig.model_validate({"engine": {"name": "toy"}, "rl": {"mix": "relift"}})  # what it has still runs
