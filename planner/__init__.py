"""planner: optimization-based capacity planner for LLM inference.

Data flows one way: schema -> workload -> perf -> capacity table -> optimize -> verify -> report.
"""

__version__ = "0.1.0"
