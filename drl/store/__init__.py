"""Data store for policies and checkpoints: an interface, a local-directory implementation, and the
publication protocol (objects first, manifest last)."""

from drl.store.base import DataStore, open_store, run_store
from drl.store.policy import ManifestError, PolicyStore

__all__ = ["DataStore", "open_store", "run_store", "PolicyStore", "ManifestError"]
