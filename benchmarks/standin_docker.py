"""A stand-in Docker Engine for the fleet benchmark's simulated servers: what the
monitor asks of a server's Docker, answered cheaply on one unix socket.

In a real fleet each server has a Docker of its own, answering for its own containers
on its own CPU. ``fleet_bench`` has one machine, so the simulated servers it only
watches reach this instead of the machine's dockerd (their sshd sessions are chrooted
to a directory holding this socket as ``/var/run/docker.sock``): each answers with a
container list of its own (none), its version and info, and an event stream that
stays open and quiet. The servers the benchmark deploys to still reach the real dockerd.

Answers (Engine API paths, any ``/v1.xx`` prefix): ``GET /containers/json`` ``[]``,
``GET /version``, ``GET /info``, ``GET /events`` (chunked, held open until the client
goes), anything else 404 with Docker's ``{"message": …}``. HTTP/1.1 with keep-alive,
as the docker SDK and berth's own stream reader speak it.

    python benchmarks/standin_docker.py SOCKET_PATH
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys

VERSION = {
    "Version": "27.0.0-standin",
    "ApiVersion": "1.41",
    "Os": "linux",
    "Arch": "amd64",
}
INFO = {
    "OperatingSystem": "stand-in Docker (fleet_bench)",
    "Architecture": "x86_64",
    "ServerVersion": "27.0.0-standin",
    "NCPU": 2,
    "MemTotal": 2 * 1024**3,
}
_PATH = re.compile(r"^(?:/v[0-9.]+)?(/[^?]*)")
_MAX_HEAD = 64 * 1024


def _answer(status: str, body: bytes, *, close: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode("ascii") + body


ANSWERS = {
    "/containers/json": b"[]",
    "/version": json.dumps(VERSION).encode(),
    "/info": json.dumps(INFO).encode(),
}
NOT_FOUND = json.dumps({"message": "not found (stand-in Docker of fleet_bench)"}).encode()


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target = [*lines[0].split(" "), "", ""][:2]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            length = int(headers.get("content-length") or 0)
            if length:
                await reader.readexactly(length)
            close = headers.get("connection", "").lower() == "close"
            found = _PATH.match(target)
            path = found.group(1).rstrip("/") if found else ""
            if method == "GET" and path == "/events":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                await writer.drain()
                await reader.read()  # quiet until the client goes
                return
            body = ANSWERS.get(path) if method == "GET" else None
            if body is None:
                writer.write(_answer("404 Not Found", NOT_FOUND, close=close))
            else:
                writer.write(_answer("200 OK", body, close=close))
            await writer.drain()
            if close:
                return
    except (ConnectionError, OSError):
        return
    finally:
        writer.close()


async def main(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = await asyncio.start_unix_server(serve, path, limit=_MAX_HEAD, backlog=1024)
    os.chmod(path, 0o666)  # noqa: S103 - the sshd sessions run as the berth user
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(main(sys.argv[1]))
