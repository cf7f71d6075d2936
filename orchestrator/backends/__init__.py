"""Backends that run a plan's workloads: local processes (kubernetes follows the same plan)."""
