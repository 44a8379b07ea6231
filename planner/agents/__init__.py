"""Agent services and the tool execution phase (DESIGN §5).

An agent session is a sequence of LLM calls separated by tool calls. While a session waits
on a tool its KV cache is held on the decode device, offloaded to a host-memory tier, or
dropped and recomputed; the optimiser chooses the shares per service and tool class and
sizes a CPU pool (tool orchestration, tokenisation) and the KV tier with the GPU pools.

- :mod:`planner.agents.economics` — break-even maths (pure functions);
- :mod:`planner.agents.tables` — the tool-phase tables built from an instance;
- :mod:`planner.agents.prep` — index sets and coefficients for the MIP block;
- :mod:`planner.agents.report` — text of the tool-phase section;
- :mod:`planner.agents.check` — re-verification of the tool-phase section of a plan.
"""

from planner.agents.economics import breakeven_wait_s, poisson_quantile, tail_factor
from planner.agents.tables import AgentParams, AgentTables

__all__ = ["AgentParams", "AgentTables", "breakeven_wait_s", "poisson_quantile", "tail_factor"]
