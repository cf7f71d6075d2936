"""Every service's gRPC endpoint: ``drl.v1.Control`` (status, stop) and the standard ``grpc.health.v1.Health``.

The server runs on an asyncio loop in a thread of its own beside the service's loop, so it answers while the
service trains, steps environments or waits on Redis, and sleeps until a request comes (see ``ControlServer``). It reads only ``services.telemetry.TELEMETRY``: the fields the service
last wrote to its status hash, its identity and uptime. ``Stop`` sets ``TELEMETRY.stop``, which the service
loops check next to the run's stop flag, so a stop through this endpoint ends a service the same clean way as
the end of its work (the trainer checkpoints, a worker hands in what it has and waits until it is consumed).

Where it listens: ``DRL_CONTROL_PORT`` (0 or unset: a free port, which is then written to the status hash as
``control_port`` so that ``drl-orchestrate status`` finds it), on 127.0.0.1, or on every interface when
``DRL_CONTROL_HOST`` says so or the process runs in a Kubernetes pod (probes and other pods connect from
outside the container).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from drl._proto.drl.v1 import control_pb2, control_pb2_grpc
from drl.errors import UserError
from drl.status import status_message
from services.telemetry import TELEMETRY, Telemetry

log = logging.getLogger("drl.control")

SERVICE_NAME = "drl.v1.Control"


class ControlServicer(control_pb2_grpc.ControlServicer):
    def __init__(self, telemetry: Telemetry, health_servicer: health.HealthServicer):
        self.telemetry = telemetry
        self.health = health_servicer

    async def GetStatus(self, request, context):
        return status_message(self.telemetry.snapshot(), stopping=self.telemetry.stop.is_set())

    async def Stop(self, request, context):
        accepted = not self.telemetry.stop.is_set()
        if accepted:
            log.info("stop requested through the control endpoint%s", f" ({request.reason})" if request.reason else "")
        self.telemetry.stop.set()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        return control_pb2.StopReply(accepted=accepted, state="stopping")


def listen_address() -> tuple[str, int]:
    """(host, port) from ``DRL_CONTROL_HOST``/``DRL_CONTROL_PORT``; a bad port is a ``UserError``."""
    text = os.environ.get("DRL_CONTROL_PORT", "").strip() or "0"
    try:
        port = int(text)
    except ValueError:
        raise UserError(f"DRL_CONTROL_PORT must be a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise UserError(f"DRL_CONTROL_PORT must be between 0 and 65535, got {port}")
    host = os.environ.get("DRL_CONTROL_HOST", "").strip()
    if not host:
        host = "0.0.0.0" if os.environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"
    return host, port


class _UNPARSABLE:
    """What ``_RejectUnparsable``'s deserializer hands the method instead of a message it cannot parse."""


class _RejectUnparsable(grpc.aio.ServerInterceptor):
    """Answers a unary request that is not a valid message with INVALID_ARGUMENT. Left to itself the asyncio server
    would log the parse error's traceback as the servicer's failure and answer UNKNOWN."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        parse, behaviour = handler.request_deserializer, handler.unary_unary

        def deserialize(raw: bytes):
            try:
                return parse(raw) if parse else raw
            except Exception:
                return _UNPARSABLE

        async def checked(request, context):
            if request is _UNPARSABLE:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request is not a valid message")
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )


class ControlServer:
    """A ``grpc.aio`` server on an event loop in a daemon thread of its own.

    Not ``grpc.server`` with a thread pool: its serving thread takes the GIL five times a second (grpc's poll
    looks for signals every 200 ms), and each time it queues behind the service's main loop, which lets the GIL
    go and takes it back at every numpy or torch call and wakes the waiting thread at each such release, for
    thousands of wake-ups until it wins the lock: an acting loop without I/O (an evaluator's episodes) runs slower
    beside it, and the waiting thread burns the other core besides (bench/README.md, "Measurements behind the
    code"). The asyncio server's loop sleeps until a request comes (``tests/unit/test_quiet_threads.py``)."""

    def __init__(self, telemetry: Telemetry, host: str, port: int):
        self.loop = asyncio.new_event_loop()
        self.server: grpc.aio.Server | None = None
        started: futures.Future = futures.Future()
        self.thread = threading.Thread(
            target=self._run, args=(telemetry, host, port, started), name="control", daemon=True
        )
        self.thread.start()
        self.port: int = started.result()

    def _run(self, telemetry: Telemetry, host: str, port: int, started: futures.Future) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            started.set_result(self.loop.run_until_complete(self._start(telemetry, host, port)))
        except BaseException as exc:  # handed to the constructor, which raises it in the service's thread
            started.set_exception(exc)
        else:
            self.loop.run_forever()
        self.loop.close()

    async def _start(self, telemetry: Telemetry, host: str, port: int) -> int:
        self.server = grpc.aio.server(interceptors=[_RejectUnparsable()], options=[("grpc.so_reuseport", 0)])
        health_servicer = health.aio.HealthServicer()
        control_pb2_grpc.add_ControlServicer_to_server(ControlServicer(telemetry, health_servicer), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, self.server)
        try:
            bound = self.server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            raise UserError(f"control endpoint cannot listen on {host}:{port}: {exc}") from None
        if not bound:
            raise UserError(f"control endpoint cannot listen on {host}:{port} (in use?)")
        telemetry.ports["control_port"] = bound
        await self.server.start()
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        return bound

    def stop(self, grace: float | None = None) -> None:
        """Stops serving (calls in flight get ``grace`` seconds) and ends the loop's thread; idempotent."""
        if not self.thread.is_alive():
            return
        assert self.server is not None  # the thread serves only once _start has made the server
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(grace), self.loop).result((grace or 0) + 5)
        except (futures.TimeoutError, RuntimeError) as exc:
            log.warning("control endpoint did not stop cleanly: %s", exc)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def serve(telemetry: Telemetry = TELEMETRY, host: str = "127.0.0.1", port: int = 0) -> tuple[ControlServer, int]:
    """Starts Control and Health on ``host:port``; returns the server and the bound port, which is also in
    ``telemetry.ports["control_port"]`` (set before the first request can read it)."""
    server = ControlServer(telemetry, host, port)
    return server, server.port


def start_control(ctx) -> int:
    """Starts this process's control endpoint and records its port: in ``TELEMETRY.ports`` (so every later
    status answer and metrics page has it) and at once in the service's status hash, from a short-lived thread
    with its own connection, because the service's first status write may come only after a long start (a
    worker waits for the first policy) and ``drl-orchestrate status`` looks the port up there."""
    host, port = listen_address()
    server, bound = serve(TELEMETRY, host, port)
    atexit.register(server.stop, 0.5)
    log.info("control endpoint (drl.v1.Control, grpc.health.v1.Health) on %s:%d", host, bound)

    def record() -> None:
        try:
            memory = ctx.memory()
            try:
                memory.control().write_status(ctx.name, {"control_port": bound})
            finally:
                memory.close()
        except Exception as exc:  # the service itself reports an unusable memory server
            log.warning("control port %d not recorded in the status hash: %s", bound, exc)

    threading.Thread(target=record, name="control-port", daemon=True).start()
    return bound
