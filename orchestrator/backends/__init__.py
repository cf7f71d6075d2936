"""Where a run's processes live: one ``Backend`` protocol (``base``), two implementations.

``BACKENDS`` maps ``--backend`` to its implementation; the command line looks the backend up and calls the verb,
so no verb branches on the backend. Importing this package loads neither the Kubernetes client nor the local
run's process code: each backend imports what a verb needs when it runs.
"""

from __future__ import annotations

from orchestrator.backends.base import Backend, Deployment
from orchestrator.backends.kubernetes import KubernetesBackend
from orchestrator.backends.local import LocalBackend

BACKENDS: dict[str, Backend] = {"local": LocalBackend(), "kubernetes": KubernetesBackend()}

__all__ = ["BACKENDS", "Backend", "Deployment"]
