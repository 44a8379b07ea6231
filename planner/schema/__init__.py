"""Pydantic schemas: hardware, LLM, workload, instance (and the capacity-table contract)."""
