"""The draft of ``method: draft_model`` is looked up by one typed function,
:func:`planner.perf.speculative.find_draft` (catalog models, instance models, file), which both solve
(:func:`planner.perf.speculative.draft_profile`, on a resolved instance) and check-instance
(:func:`planner.instance._draft_problems`) use; check-instance no longer hands a ``SimpleNamespace``
standing in for a resolved instance."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import planner.instance
from planner.errors import InputError
from planner.instance import _draft_problems, load_instance
from planner.perf.speculative import draft_profile, find_draft
from planner.schema.speculative import SpeculativeDecoding

CHAT = Path(__file__).resolve().parent.parent / "instances" / "enterprise-chat.yaml"


def _spec(draft: str | None, method: str = "draft_model") -> SpeculativeDecoding:
    return SpeculativeDecoding.model_validate({"method": method, "num_speculative_tokens": 3, "acceptance": 0.7,
                                               **({"draft_model": draft} if draft else {})})


def test_instance_module_builds_no_simple_namespace() -> None:
    tree = ast.parse(inspect.getsource(planner.instance))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "SimpleNamespace" not in names


@pytest.mark.parametrize("draft", ["llama-3.1-8b", "qwen3-0.6b", "llama-3.1-405b"])
def test_find_draft_is_draft_profile(draft: str) -> None:
    r = load_instance(CHAT)
    spec = _spec(draft)
    got = find_draft(r.catalog.models, r.models, str(r.path), "chat", spec)
    assert got is not None and got == draft_profile(r, "chat", spec) == r.catalog.models[draft]


def test_find_draft_falls_back_to_the_instance_models() -> None:
    r = load_instance(CHAT)
    (model_id, model), *_ = r.models.items()
    assert find_draft({}, r.models, str(r.path), "chat", _spec(model_id)) is model


def test_other_methods_have_no_draft() -> None:
    r = load_instance(CHAT)
    assert find_draft(r.catalog.models, r.models, str(r.path), "chat", _spec(None, "ngram")) is None
    assert draft_profile(r, "chat", _spec(None, "ngram")) is None


def test_an_unknown_draft_is_the_same_error_from_both() -> None:
    r = load_instance(CHAT)
    spec = _spec("llama-9-tiny")
    with pytest.raises(InputError) as typed:
        find_draft(r.catalog.models, r.models, str(r.path), "chat", spec)
    with pytest.raises(InputError) as resolved:
        draft_profile(r, "chat", spec)
    assert typed.value.problems == resolved.value.problems
    (p,) = typed.value.problems
    assert (p.file, p.path) == (str(r.path), "services.chat.speculative.draft_model")
    assert "unknown draft model 'llama-9-tiny'" in p.message


@pytest.mark.parametrize(("draft", "words"), [("llama-9-tiny", "unknown draft model"), ("qwen3-0.6b", "same tokenizer"),
                                              ("llama-3.1-405b", "not smaller"), ("llama-3.1-8b", None)])
def test_draft_problems_unchanged(draft: str, words: str | None) -> None:
    r = load_instance(CHAT)
    name, svc = next(iter(r.instance.services.items()))
    svc = svc.model_copy(update={"speculative": _spec(draft)})
    model = r.models[svc.model]
    problems = _draft_problems(f"services.{name}.speculative", name, svc, model, r.catalog, r.models, r.path)
    if words is None:
        assert problems == []
    else:
        (p,) = problems
        assert words in p.message and p.file == str(r.path)
