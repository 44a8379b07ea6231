"""Writers for plans: terminal summary, JSON, CSV (costs, pools), Markdown."""

from __future__ import annotations

from planner.report.writers import cost_table, pool_table, summary_text, write_outputs

__all__ = ["cost_table", "pool_table", "summary_text", "write_outputs"]
