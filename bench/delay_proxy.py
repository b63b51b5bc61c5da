"""A TCP forwarder that holds every chunk a fixed time in each direction:
a database a network hop away, for the benchmark's latency-bound run.

    python bench/delay_proxy.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT DELAY_MS

It listens on 127.0.0.1:LISTEN_PORT (0: a free port), says which on its
first line of output ("forwarding 127.0.0.1:PORT to ..."), and opens one upstream connection per
client connection. A chunk read at time t is written at t + DELAY_MS,
whatever else is held: chunks keep their order and are held side by side,
so the delay adds latency without capping throughput. Each direction of a
connection holds at most MAX_HELD chunks; beyond that it stops reading, so
a fast sender waits instead of filling memory. When either side closes,
both are closed; SIGTERM or SIGINT closes the listener and every
connection, and the process exits.

It runs on uvloop when that is installed (half asyncio's CPU per chunk;
the bench's own virtualenv .venv-bench has it, with uvicorn), else on
asyncio. Either's timers wake on whole milliseconds, so a chunk is held
from DELAY_MS to about DELAY_MS + 1: run.py measures the round trip it
adds. ``DelayProxyProcess`` runs one from another program.
"""
import asyncio
import contextlib
import re
import selectors
import signal
import subprocess
import sys
import time

CHUNK_BYTES = 65536
MAX_HELD = 64
CLOSE_SECONDS = 5
"""The longest a hang-up waits for the other side."""


async def _read(reader, held, delay):
    """Put each chunk ``reader`` gives in ``held`` with the time it is due;
    None after the end of the stream."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        while chunk := await reader.read(CHUNK_BYTES):
            await held.put((loop.time() + delay, chunk))
    await held.put(None)


async def _release(held, writer):
    """Write each held chunk to ``writer`` once it is due, until None."""
    loop = asyncio.get_running_loop()
    while (item := await held.get()) is not None:
        due, chunk = item
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        writer.write(chunk)
        await writer.drain()


async def _pipe(reader, writer, delay):
    """One direction of a connection, until its end or a write failing."""
    held = asyncio.Queue(MAX_HELD)
    reading = asyncio.create_task(_read(reader, held, delay))
    try:
        await _release(held, writer)
    except OSError:
        pass
    finally:
        reading.cancel()


async def _close(writer):
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), CLOSE_SECONDS)


class DelayProxy:
    """The listener and the connections it forwards."""

    def __init__(self, upstream_host, upstream_port, delay_seconds):
        self.upstream = (upstream_host, upstream_port)
        self.delay = delay_seconds
        self.connections = set()  # the tasks forwarding them
        self.writers = set()  # both ends of each, to hang up at the end

    async def _forward(self, client_reader, client_writer):
        task = asyncio.current_task()
        self.connections.add(task)
        self.writers.add(client_writer)
        upstream_writer = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            self.writers.add(upstream_writer)
            directions = [
                asyncio.create_task(_pipe(client_reader, upstream_writer, self.delay)),
                asyncio.create_task(_pipe(upstream_reader, client_writer, self.delay))]
            try:
                await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for direction in directions:
                    direction.cancel()
        except OSError:
            pass  # upstream refused: the client sees its connection closed
        finally:
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    await _close(writer)
                    self.writers.discard(writer)
            self.connections.discard(task)

    async def serve(self, port):
        """Forward connections to ``port`` until SIGTERM or SIGINT."""
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        server = await asyncio.start_server(self._forward, "127.0.0.1", port, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        print(f"forwarding 127.0.0.1:{port} to {self.upstream[0]}:{self.upstream[1]}, "
              f"{self.delay * 1000:g} ms each way, on {type(loop).__module__.split('.')[0]}",
              flush=True)
        async with server:
            await stopping.wait()
            server.close()
            for writer in list(self.writers):  # every forwarding task then ends
                writer.transport.abort()
            if self.connections:
                await asyncio.wait(self.connections, timeout=CLOSE_SECONDS)


class DelayProxyProcess:
    """This module run by ``python`` as a process of its own (its CPU is not
    the bench's, nor a server's) on a free port; ``event_loop`` says which."""

    def __init__(self, upstream_host, upstream_port, delay_ms, python=sys.executable,
                 seconds=30):
        self.delay_ms = delay_ms
        self.process = subprocess.Popen(
            [str(python), __file__, "0", upstream_host, str(upstream_port), str(delay_ms)],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + seconds
            while not selector.select(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    self.stop()
                    raise RuntimeError(f"the delay proxy did not start in {seconds}s")
        first_line = self.process.stdout.readline()
        match = re.match(r"forwarding 127\.0\.0\.1:(\d+) .* on (\w+)$", first_line.strip())
        if not match:
            self.stop()
            raise RuntimeError(f"the delay proxy did not start: {first_line!r}")
        self.port, self.event_loop = int(match.group(1)), match.group(2)

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    port, host, upstream_port, delay_ms = argv
    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run
    run(DelayProxy(host, int(upstream_port), float(delay_ms) / 1000).serve(int(port)))


if __name__ == "__main__":
    main(sys.argv[1:])
