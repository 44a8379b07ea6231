"""Unit conversions used across the planner, defined once (issue 27).

Names carry their units: ``SECONDS_PER_HOUR`` converts hours to seconds and ``J_PER_KWH``
kilowatt-hours to joules (1 kWh = 1,000 W × 3,600 s = 3.6e6 J).
"""

from __future__ import annotations

SECONDS_PER_HOUR = 3600.0
J_PER_KWH = 3.6e6
