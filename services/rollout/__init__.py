"""Rollout worker: steps environments with the newest policy and streams transitions to the memory backend."""
