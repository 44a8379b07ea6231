"""Field documentation in the JSON Schema (issue 27, start-up): :class:`planner.schema.common.StrictModel` no
longer has pydantic parse every model's source at class creation (``use_attribute_docstrings``);
:func:`planner.schema.common.json_schema` adds the attribute docstrings when a schema is asked for. It must
give the schema pydantic gives with ``use_attribute_docstrings=True``, exactly."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.schema.common import StrictModel, json_schema


def _models(base: type[BaseModel]) -> type[BaseModel]:
    """A small family of models on ``base``: nesting, an optional nested model, a list of them, an
    inherited field, a re-annotated field with and without its own docstring, an explicit description."""

    class Leaf(base):  # type: ignore[misc, valid-type]
        size_gb: float = 1.0
        """Size of the leaf, GB."""
        name: str = "x"

    class Parent(base):  # type: ignore[misc, valid-type]
        rate_per_s: float = 0.0
        """Arrivals per second."""
        label: str = ""
        """A label."""
        kept: int = Field(default=0, description="explicit wins")
        """not this one"""

    class Child(Parent):
        label: str = "child"  # re-annotated, no docstring of its own
        leaf: Leaf = Leaf()
        """The leaf."""
        maybe: Leaf | None = None
        """Perhaps a leaf."""
        leaves: list[Leaf] = []

    class Other(Parent):
        rate_per_s: float = 1.0
        """Arrivals per second of the other."""

    class Root(base):  # type: ignore[misc, valid-type]
        child: Child
        """The child."""
        other: Other | None = None
        depth: int = 2
        """How deep.

        Second paragraph."""

    return Root


class _Pydantic(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, validate_default=True)


def test_json_schema_equals_pydantics_attribute_docstrings() -> None:
    want: dict[str, Any] = _models(_Pydantic).model_json_schema()
    got = json_schema(_models(StrictModel))
    assert json.dumps(got, indent=2) == json.dumps(want, indent=2)
    assert got["properties"]["depth"]["description"].startswith("How deep.")
    assert got["$defs"]["Child"]["properties"]["rate_per_s"]["description"] == "Arrivals per second."
    assert "description" not in got["$defs"]["Child"]["properties"]["label"]
    assert got["$defs"]["Other"]["properties"]["rate_per_s"]["description"] == "Arrivals per second of the other."
    assert got["$defs"]["Child"]["properties"]["kept"]["description"] == "explicit wins"


def test_instance_schema_carries_the_field_docs() -> None:
    from planner.schema.instance import Instance

    bare = json.dumps(Instance.model_json_schema())
    text = json.dumps(json_schema(Instance))
    assert text.count('"description"') > bare.count('"description"') + 100
