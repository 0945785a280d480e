"""The docker adapter's log pump (``follow_logs``): lines from a blocking Docker stream,
through a bounded buffer, ended by the stream or by the reader."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator

from berth.adapters.docker.runtime import FOLLOW_BUFFER, MAX_LINE, _LogPump


class BlockingStream:
    """Chunks as Docker's ``CancellableStream`` gives them; ``close`` ends a blocked read."""

    _END = b""

    def __init__(self, chunks: list[bytes], *, then_block: bool = False) -> None:
        self._queue: queue.Queue[bytes] = queue.Queue()
        for chunk in chunks:
            self._queue.put(chunk)
        if not then_block:
            self._queue.put(self._END)
        self.closed = threading.Event()
        self.handed = 0

    def __iter__(self) -> Iterator[bytes]:
        while (chunk := self._queue.get()) != self._END:
            self.handed += 1
            yield chunk

    def close(self) -> None:
        self.closed.set()
        self._queue.put(self._END)


async def drain(pump: _LogPump) -> list[str]:
    lines = []
    while (line := await pump.next()) is not None:
        lines.append(line)
    return lines


class TestLogPump:
    async def test_chunks_become_lines(self) -> None:
        """Chunks cut anywhere become whole lines; a last line without newline is kept."""
        stream = BlockingStream([b"ab", b"c\nde\r\n", b"\n", b"f\xff"])
        pump = _LogPump(stream, asyncio.get_running_loop())
        assert await asyncio.wait_for(drain(pump), 5) == ["abc", "de", "", "f\ufffd"]

    async def test_long_lines_are_cut(self) -> None:
        """A line over MAX_LINE bytes arrives in pieces of at most MAX_LINE."""
        stream = BlockingStream([b"x" * (MAX_LINE * 2 + 5) + b"\n"])
        pump = _LogPump(stream, asyncio.get_running_loop())
        lines = await asyncio.wait_for(drain(pump), 5)
        assert [len(line) for line in lines] == [MAX_LINE, MAX_LINE, 5]

    async def test_a_slow_reader_bounds_the_buffer_and_stop_ends_the_thread(self) -> None:
        """Nobody reading: at most FOLLOW_BUFFER lines wait; ``stop`` closes the stream
        and the reading thread ends."""
        stream = BlockingStream([b"line\n"] * (FOLLOW_BUFFER * 4), then_block=True)
        pump = _LogPump(stream, asyncio.get_running_loop())
        await asyncio.sleep(0.3)
        assert pump._queue.qsize() <= FOLLOW_BUFFER
        assert stream.handed < FOLLOW_BUFFER * 4
        pump.stop()
        await asyncio.to_thread(pump._thread.join, 3)
        assert stream.closed.is_set()
        assert not pump._thread.is_alive()

    async def test_a_reader_closing_mid_way_closes_the_stream(self) -> None:
        """A stream that blocks (the container is quiet) ends once the reader stops."""
        stream = BlockingStream([b"one\n"], then_block=True)
        pump = _LogPump(stream, asyncio.get_running_loop())
        assert await asyncio.wait_for(pump.next(), 5) == "one"
        pump.stop()
        assert await asyncio.wait_for(pump.next(), 5) is None
        assert stream.closed.is_set()
