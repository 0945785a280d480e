"""Telling the log about an outage without flooding it.

While the database is down every request fails the same way; a line (let alone a
traceback) per request says nothing more than the first one and fills the disk. A
``ThrottledWarning`` writes its event at most once per interval per process, with
how many occurrences it kept quiet since its last line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["INTERVAL", "ThrottledWarning"]

#: Seconds between two lines of one warning.
INTERVAL = 10.0

log = structlog.get_logger()


class ThrottledWarning:
    """One warning event, written at most once every ``interval`` seconds.

    ``warn(**fields)`` writes ``event`` with ``fields`` and ``suppressed`` (how many
    calls since the last line wrote nothing), or only counts the call. Safe to share
    between threads; one per event per process.
    """

    def __init__(
        self,
        event: str,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._suppressed = 0

    def warn(self, **fields: Any) -> bool:
        """Write the warning now if the interval has passed (``True``), else count it."""
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self._interval:
                self._suppressed += 1
                return False
            self._last = now
            suppressed, self._suppressed = self._suppressed, 0
        log.warning(self.event, suppressed=suppressed, **fields)
        return True
