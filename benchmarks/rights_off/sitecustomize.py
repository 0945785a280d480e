"""Benchmark only (``api_bench.py --rights``): berth with its authorization checks removed.

On ``PYTHONPATH``, Python imports this at start-up. It makes the bus admit every command
without looking at the actor's rights and never move an actor into another team: what
``berth serve`` costs *without* the check that teams and scoped tokens added, so
``api_bench`` can compare it with the real one on the same data. Never used by berth.
"""

from typing import Any

from berth.core.bus import MessageBus


def _admit(self: MessageBus, kind: Any, actor: Any) -> None:
    return None


async def _in_team(self: MessageBus, command: Any, actor: Any) -> Any:
    return actor


MessageBus._admit = _admit  # type: ignore[method-assign]
MessageBus._in_team = _in_team  # type: ignore[method-assign]
