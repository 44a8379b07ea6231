"""Workload from request logs: readers (one per format), characterisation, buckets, tools, profiles.

Public API:

- :func:`service_profile` (``resolved, service_name -> WorkloadProfile``): what the optimiser calls;
- :func:`peak_rate_per_s` (``profile, window -> float``);
- :func:`characterize_file` (cached) / :func:`characterize_log`: per-service :class:`Characterization`;
- :func:`read_trace` / :func:`detect_format`: the readers;
- :func:`write_profile` / :func:`read_profile`: profile YAML files.
"""

from planner.workload.characterize import (
    Characterization,
    characterize_file,
    characterize_log,
    characterize_path,
)
from planner.workload.profile import (
    peak_rate_per_s,
    read_profile,
    scale_profile,
    service_profile,
    write_profile,
)
from planner.workload.readers import FORMATS, detect_format, read_trace

__all__ = [
    "FORMATS",
    "Characterization",
    "characterize_file",
    "characterize_log",
    "characterize_path",
    "detect_format",
    "peak_rate_per_s",
    "read_profile",
    "read_trace",
    "scale_profile",
    "service_profile",
    "write_profile",
]
