"""What ``planner check-instance`` checks beyond :func:`planner.instance.load_instance`: the checks ``solve``
makes on the services' workload profiles, so that an instance said to be valid is one ``solve`` accepts.

- requests beyond the model's context (:mod:`planner.workload.context`: an error, or a note the plan
  will carry);
- the encode phase's tokens per request (:func:`planner.capacity_encode.encode_demand`, the check the
  capacity table makes).

A profile is built only for a service that needs one (a log or a profile, or an encode phase), so a
hand-written instance stays light (no pandas: ``tests/test_import_graph.py``)."""

from __future__ import annotations

from typing import Any

from planner.errors import InputError, Problem
from planner.instance import ResolvedInstance


def check_workload(resolved: ResolvedInstance) -> list[str]:
    """The notes ``solve`` would add for the services' traffic; raises :class:`InputError` with what
    ``solve`` would reject (every problem at once)."""
    needing = [name for name, svc in resolved.instance.services.items() if not svc.traffic.lengths or svc.encode is not None]
    if not needing:
        return []
    import pandas as pd

    from planner.capacity_encode import encode_demand
    from planner.workload import service_profile
    from planner.workload.context import context_findings

    profiles: dict[str, Any] = {}
    problems: list[Problem] = []
    for name in needing:
        try:
            profiles[name] = service_profile(resolved, name)
        except InputError as exc:
            problems.extend(exc.problems)
    found, notes = context_findings(resolved, profiles)
    problems.extend(found)
    encoded = [name for name, svc in resolved.instance.services.items() if svc.encode is not None]
    if encoded and all(name in profiles for name in encoded):
        try:
            encode_demand(resolved, pd.DataFrame({"service": []}), profiles)
        except InputError as exc:
            problems.extend(exc.problems)
    if problems:
        raise InputError(problems)
    return notes
