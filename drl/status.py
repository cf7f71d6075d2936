"""A service's status as the control service reports it, from the fields of its telemetry snapshot.

The services answer ``GetStatus`` with it; the orchestrator builds the same message from what it reads without
a live endpoint (a finished process's last status fields, a Kubernetes pod's metrics page), so every status table
shows one meaning per column whichever way the fields came.
"""

from __future__ import annotations

from drl._proto.drl.v1 import control_pb2

TYPED = (
    "role",
    "id",
    "run",
    "policy_version",
    "env_steps",
    "updates",
    "transitions_per_s",
    "backlog",
    "restarts",
    "last_error",
    "state",
    "uptime_s",
)


def _int(value, default: int = 0) -> int:
    """An int64 from a status field's text; ``default`` when it is not a finite number in range."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default
    return number if -(2**63) <= number < 2**63 else default


def _float(value, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def status_message(snapshot: dict, stopping: bool = False) -> control_pb2.ServiceStatus:
    """A telemetry snapshot as ``ServiceStatus``. Roles name their counters differently (a worker's
    ``produced`` is its env steps); the typed fields take the common meaning and ``fields`` keeps every other
    field as text."""
    role = str(snapshot.get("role") or "")
    env_steps = snapshot.get("env_steps", snapshot.get("produced"))
    uptime = _float(snapshot.get("uptime_s"))
    rate = snapshot.get("transitions_per_s")
    if rate in (None, "") and role == "rollout" and uptime > 0:
        rate = _int(env_steps) / uptime
    state = str(snapshot.get("state") or "")
    if state != "finished":
        state = "stopping" if stopping else (state or "running")
    return control_pb2.ServiceStatus(
        role=role,
        id=str(snapshot.get("id") or ""),
        run=str(snapshot.get("run") or ""),
        policy_version=_int(snapshot.get("policy_version"), -1),
        env_steps=_int(env_steps),
        updates=_int(snapshot.get("updates")),
        transitions_per_s=_float(rate),
        backlog=_int(snapshot.get("backlog")),
        restarts=max(0, _int(snapshot.get("restarts"))),
        last_error=str(snapshot.get("last_error") or ""),
        state=state,
        uptime_s=uptime,
        fields={k: ("" if v is None else str(v)) for k, v in snapshot.items() if k not in TYPED},
    )
