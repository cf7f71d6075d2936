"""Trainer: memory backend -> replay -> learner -> data store."""
