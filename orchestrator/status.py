"""The status table every backend prints, and the gRPC calls that reach a service's control endpoint.

``drl-orchestrate status`` shows one ``Row`` per process (a local run) or pod (a Kubernetes run) in the same
columns, whichever way the backend learned the values; ``get_status`` and ``stop_service`` are the client side
of ``drl.v1.Control`` (``services.control``), used by the local backend to ask and stop its services.
"""

from __future__ import annotations

from dataclasses import dataclass

RPC_TIMEOUT_S = 2.0
COLUMNS = ("NAME", "ROLE", "STATE", "POLICY", "ENV STEPS", "RATE/S", "RESTARTS", "LAST ERROR")
ERROR_WIDTH = 60


def _channel(port: int, host: str = "127.0.0.1"):
    import grpc

    return grpc.insecure_channel(f"{host}:{port}")


def get_status(port: int, timeout: float = RPC_TIMEOUT_S):
    """The service's ``ServiceStatus``, or None when nothing answers on the port."""
    import grpc

    from drl._proto.drl.v1 import control_pb2, control_pb2_grpc

    with _channel(port) as channel:
        try:
            return control_pb2_grpc.ControlStub(channel).GetStatus(control_pb2.StatusRequest(), timeout=timeout)
        except grpc.RpcError:
            return None


def stop_service(port: int, reason: str = "", timeout: float = RPC_TIMEOUT_S) -> bool:
    """Asks the service on ``port`` to stop cleanly; False when it did not answer."""
    import grpc

    from drl._proto.drl.v1 import control_pb2, control_pb2_grpc

    with _channel(port) as channel:
        try:
            control_pb2_grpc.ControlStub(channel).Stop(control_pb2.StopRequest(reason=reason), timeout=timeout)
            return True
        except grpc.RpcError:
            return False


@dataclass
class Row:
    name: str
    role: str
    state: str
    policy_version: int | None = None
    env_steps: int | None = None
    rate: float | None = None
    restarts: int | None = None
    last_error: str = ""
    policy_lag: str = ""
    """The trainer's policy-lag histogram in words (``lag_line``), for learners that measure it."""


def row_from_status(name: str, status) -> Row:
    return Row(
        name,
        status.role,
        status.state,
        status.policy_version,
        status.env_steps,
        status.transitions_per_s if status.transitions_per_s > 0 else None,
        status.restarts,
        status.last_error,
        lag_line(dict(status.fields)),
    )


def lag_line(fields: dict) -> str:
    """ "policy lag (versions): 0: 12%, 1: 61%, 2: 27% | mean 1.15, max 2 | dropped 0" from a trainer's
    status fields (``drl.training.learning.QueueLearning.report``); empty without them or before anything was trained.
    Buckets are named by their range and shown when they hold anything."""
    from drl.tensorboard import parse_buckets

    try:
        pairs = parse_buckets(str(fields.get("policy_lag") or ""))
    except ValueError:
        return ""
    total = sum(count for _, count in pairs)
    if not total:
        return ""
    parts, low = [], 0
    for bound, count in pairs:
        name = f"{low}" if bound == low else (f"{low}+" if bound == float("inf") else f"{low}-{int(bound)}")
        if count:
            share = 100 * count / total
            parts.append(f"{name}: {share:.0f}%" if share >= 1 else f"{name}: <1%")
        low = int(bound) + 1 if bound != float("inf") else low
    return (
        f"policy lag (versions): {', '.join(parts)} | mean {fields.get('policy_lag_mean', '')}, max {fields.get('policy_lag_max', '')} | "
        f"dropped {fields.get('lag_dropped', 0)} transitions"
    )


def format_lags(rows: list[Row]) -> str:
    """The policy-lag lines of the rows that have one, under the table."""
    return "\n".join(f"{r.name}: {r.policy_lag}" for r in rows if r.policy_lag)


def format_table(rows: list[Row]) -> str:
    """Rows as aligned columns; unknown values as ``-``, long errors cut to one short line."""

    def cell(value) -> str:
        if value is None or value == "":
            return "-"
        if isinstance(value, float):
            return f"{value:,.1f}"
        if isinstance(value, int):
            return f"{value:,}" if value >= 0 else "-"
        text = " ".join(str(value).split())
        return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 3] + "..."

    table = [list(COLUMNS)] + [
        [
            cell(r.name),
            cell(r.role),
            cell(r.state),
            cell(r.policy_version),
            cell(r.env_steps),
            cell(r.rate),
            cell(r.restarts),
            cell(r.last_error),
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    numeric = {3, 4, 5, 6}
    out = []
    for line in table:
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)
