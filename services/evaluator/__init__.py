"""Evaluator: follows published policy versions and scores them with deterministic episodes."""
