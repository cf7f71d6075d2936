"""Latency without netem: a TCP proxy that holds every chunk for a fixed time before passing it on.

``DelayProxy(listen, target, rtt_ms)`` accepts connections on ``listen`` (host, port) and opens one to ``target``
for each. Each direction is a reader and a writer joined by a queue: the reader stamps every chunk it receives
with its arrival time and queues it at once, the writer sends it ``rtt_ms / 2`` after that arrival, in order. So
each direction adds half of ``rtt_ms`` to every byte and a request-reply exchange gains ``rtt_ms``, as a longer
cable would add, without limiting the bandwidth: chunks keep flowing while earlier ones wait. A closed side
closes the other once what was queued has gone. It runs on its own thread with its own event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time


class DelayProxy:
    def __init__(self, listen: tuple[str, int], target: tuple[str, int], rtt_ms: float):
        self.listen, self.target = listen, target
        self.one_way_s = rtt_ms / 2000.0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> "DelayProxy":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the delay proxy did not start on {self.listen}")
        return self

    def stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, self.listen[0], self.listen[1], reuse_address=True)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        self.connections += 1
        await asyncio.gather(self._pipe(client_r, server_w), self._pipe(server_r, client_w), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                chunk = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.one_way_s, chunk))
                if not chunk:
                    break
            await sender
        except (OSError, asyncio.IncompleteReadError):
            sender.cancel()
        finally:
            try:
                writer.close()
            except OSError:
                pass

    def __enter__(self) -> "DelayProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
