"""What a running service knows about itself, in memory, for its control and metrics endpoints.

Every status write (``services.common.StatusWriter``) also lands here, so the gRPC ``Control.GetStatus`` answer,
the Prometheus ``/metrics`` page and the Redis status hash show the same counters. ``stop`` is how an endpoint
asks the service to end cleanly: the service loops check it next to the run's stop flag.
"""

from __future__ import annotations

import threading
import time


class Telemetry:
    def __init__(self) -> None:
        self.role = ""
        self.name = ""
        self.run = ""
        self.started = time.time()
        self.restarts = 0
        self.last_error = ""
        self.ports: dict[str, int] = {}
        self.stop = threading.Event()
        self._fields: dict = {}
        self._lock = threading.Lock()

    def update(self, fields: dict) -> None:
        with self._lock:
            self._fields.update(fields)

    def fields(self) -> dict:
        with self._lock:
            return dict(self._fields)

    def snapshot(self) -> dict:
        """Identity, uptime and the latest status fields."""
        return {
            "role": self.role,
            "id": self.name,
            "run": self.run,
            "uptime_s": time.time() - self.started,
            "restarts": self.restarts,
            "last_error": self.last_error,
            **self.ports,
            **self.fields(),
        }


TELEMETRY = Telemetry()
