"""Performance model: roofline step times, memory fit, TP communication, operating points per
role, closed-loop benchmark semantics and calibration (DESIGN §3). See README.md here."""

from planner.perf.calibration import Calibration, EngineCalibration, load_calibration
from planner.perf.points import operating_point

__all__ = ["Calibration", "EngineCalibration", "load_calibration", "operating_point"]
