"""Discrete-event simulation of a serving plan (DESIGN §6 "verify").

Inputs are plain typed values (:mod:`planner.simulate.spec`) and a request stream
(:mod:`planner.simulate.arrivals`); :func:`simulate` returns a :class:`SimResult`.
"""

from planner.simulate.arrivals import (
    RequestChunk,
    merge_streams,
    replay_requests,
    synthetic_requests,
)
from planner.simulate.engine import simulate
from planner.simulate.results import PoolResult, ServiceResult, SimResult
from planner.simulate.spec import Outage, PoolSpec, ServiceRoute, SimConfig
from planner.simulate.stats import LogHistogram, Summary

__all__ = [
    "LogHistogram", "Outage", "PoolResult", "PoolSpec", "RequestChunk", "ServiceResult",
    "ServiceRoute", "SimConfig", "SimResult", "Summary", "merge_streams", "replay_requests",
    "simulate", "synthetic_requests",
]
