"""A TCP proxy that holds each request: network latency without `netem`.

    python -m dsanalyze.remote.delayproxy --listen 10.231.0.2:0 --upstream 127.0.0.1:5000

It prints `ready <port>` once listening, then reads commands on its standard
input, one a line, and exits at end-of-file (its parent is gone):

- `delay <seconds>`: hold every request that long from now on;
- `stats`: print one JSON line `{"connections", "requests", "bytes_up", "bytes_down",
  "held_s"}`, counted since the start; `held_s` is the time requests were actually held
  (the event loop wakes late on a busy machine: more than requests × delay);
- `window <start_unix_s> <end_unix_s>`: print one JSON line `{"requests", "held_s",
  "bytes_down", "complete"}`: the requests that began in that wall-clock span and the time
  they were held, and the response bytes that crossed in it (each response's bytes spread
  evenly from its first byte to its last: a response under way at an edge counts its share,
  as the link carried it); `complete` is false when the log (the last `LOG_REQUESTS`
  requests, each its start, its first and last response byte's time, its bytes and time
  held) no longer reaches back to it.

A request is what the client sends after the server last spoke (or after it
connected): HTTP/1.1 is turn by turn, so each request on a kept-alive
connection, and the first on a new one, waits `delay` seconds before the
proxy forwards it. The time to the first byte of every response is thus one
`delay` longer; bytes already flowing are not delayed. The TCP handshake with
the proxy itself is not delayed (the kernel completes it), so a new
connection costs one delay where a real network costs about two round trips.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass

CHUNK_BYTES = 256 << 10
LOG_REQUESTS = 1 << 17  # about 13 MiB of log, many runs' worth
LISTEN_BACKLOG = 1024  # connections queued before the proxy accepts them (asyncio: 100)


@dataclass
class Request:
    """One request in the log: when it began and when its response's first and last bytes
    came (wall clock), its response's bytes, its hold."""

    start_unix_s: float
    bytes_down: int = 0
    held_s: float = 0.0
    first_byte_unix_s: float = 0.0
    last_byte_unix_s: float = 0.0

    def bytes_in(self, start_unix_s: float, end_unix_s: float) -> float:
        """Its response's bytes that crossed in [start, end), spread evenly over the time from
        its first byte to its last (a response in one read: whole, where that read fell)."""
        first, last = self.first_byte_unix_s, self.last_byte_unix_s
        if not self.bytes_down:
            return 0.0
        if last <= first:
            return float(self.bytes_down) if start_unix_s <= first < end_unix_s else 0.0
        overlap_s = min(last, end_unix_s) - max(first, start_unix_s)
        return self.bytes_down * max(0.0, overlap_s) / (last - first)


@dataclass
class Turn:
    """Whose turn it is on one connection, and the request its response bytes belong to."""

    server_spoke: bool = True  # the client's first bytes are a request
    current: Request | None = None


@dataclass
class Counts:
    connections: int = 0
    requests: int = 0
    bytes_up: int = 0  # client to server
    bytes_down: int = 0  # server to client
    held_s: float = 0.0  # summed over requests: how long each was actually held


class DelayProxy:
    """The proxy's state: the delay now in force and what went through."""

    def __init__(self, upstream: tuple[str, int], delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.counts = Counts()
        self.log: deque[Request] = deque(maxlen=LOG_REQUESTS)

    async def handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.counts.connections += 1
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.close()
            return
        turn = Turn()
        up = asyncio.create_task(self._pump_up(c_reader, s_writer, turn))
        down = asyncio.create_task(self._pump_down(s_reader, c_writer, turn))
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for writer in (c_writer, s_writer):
            writer.close()

    async def _pump_up(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       turn: Turn) -> None:
        while data := await reader.read(CHUNK_BYTES):
            if turn.server_spoke:
                turn.server_spoke = False
                self.counts.requests += 1
                turn.current = Request(time.time())
                self.log.append(turn.current)
                if self.delay_s > 0:
                    t0 = time.perf_counter()
                    await asyncio.sleep(self.delay_s)
                    turn.current.held_s = time.perf_counter() - t0
                    self.counts.held_s += turn.current.held_s
            self.counts.bytes_up += len(data)
            writer.write(data)
            await writer.drain()

    async def _pump_down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         turn: Turn) -> None:
        while data := await reader.read(CHUNK_BYTES):
            turn.server_spoke = True
            self.counts.bytes_down += len(data)
            if (current := turn.current) is not None:
                now = time.time()
                current.first_byte_unix_s = current.first_byte_unix_s or now
                current.last_byte_unix_s = now
                current.bytes_down += len(data)
            writer.write(data)
            await writer.drain()

    def command(self, line: str) -> str | None:
        """Apply one control line; the reply to print, if any."""
        word, _, value = line.strip().partition(" ")
        if word == "delay":
            self.delay_s = max(0.0, float(value))
        elif word == "stats":
            return json.dumps(asdict(self.counts))
        elif word == "window":
            start, end = (float(v) for v in value.split())
            return json.dumps(self.window(start, end))
        return None

    def window(self, start_unix_s: float, end_unix_s: float) -> dict[str, float | int | bool]:
        """The logged requests that began in [start, end) (their count and hold) and the
        response bytes that crossed in it (`Request.bytes_in`)."""
        inside = [r for r in self.log if start_unix_s <= r.start_unix_s < end_unix_s]
        reaches = len(self.log) < LOG_REQUESTS or self.log[0].start_unix_s < start_unix_s
        crossed = sum(r.bytes_in(start_unix_s, end_unix_s) for r in self.log)
        return {"requests": len(inside), "held_s": sum(r.held_s for r in inside),
                "bytes_down": round(crossed), "complete": reaches}


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve(listen: tuple[str, int], proxy: DelayProxy) -> None:
    server = await asyncio.start_server(proxy.handle, *listen, backlog=LISTEN_BACKLOG)
    port = server.sockets[0].getsockname()[1]
    print(f"ready {port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    async with server:
        while line := await stdin.readline():
            reply = proxy.command(line.decode())
            if reply is not None:
                print(reply, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help="HOST:PORT (port 0: any free port)")
    p.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    p.add_argument("--delay-s", type=float, default=0.0)
    args = p.parse_args(argv)
    asyncio.run(serve(_addr(args.listen), DelayProxy(_addr(args.upstream), args.delay_s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
