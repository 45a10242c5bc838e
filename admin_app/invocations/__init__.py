"""Governed tool invocations: budgets, approvals, journal, signed dispatch, resume."""
