"""The deployment state machine, as a table: the one statement of which moves are legal.

```
queued ──> running ──> succeeded
   │        │  ▲ └───> failed
   │        │  └─ lease expired: taken over (running → running, attempt n+1)
   │        └────────> canceled | timed_out
   └─────────────────> canceled | timed_out
```

The SQL store builds its ``WHERE state IN (…)`` conditions from ``sources`` and
the in-memory fakes check ``can_move``, so the two cannot disagree; a Hypothesis
state machine (``tests/unit/test_lifecycle.py``) walks the table.
"""

from __future__ import annotations

from collections.abc import Mapping

from .models import DeploymentState

__all__ = ["ACTIVE", "FINAL", "MAX_ATTEMPTS", "TRANSITIONS", "can_move", "sources"]

Q, R = DeploymentState.QUEUED, DeploymentState.RUNNING
S, F = DeploymentState.SUCCEEDED, DeploymentState.FAILED
C, T = DeploymentState.CANCELED, DeploymentState.TIMED_OUT

#: Where a deployment may go from each state; final states go nowhere.
TRANSITIONS: Mapping[DeploymentState, frozenset[DeploymentState]] = {
    Q: frozenset({R, C, T}),
    R: frozenset({R, S, F, C, T}),
    S: frozenset(),
    F: frozenset(),
    C: frozenset(),
    T: frozenset(),
}

ACTIVE = frozenset({Q, R})
FINAL = frozenset(state for state in DeploymentState if state.is_final)
#: Runs of one deployment (the first, and takeovers of an expired lease) at most.
MAX_ATTEMPTS = 3


def can_move(source: DeploymentState, target: DeploymentState) -> bool:
    """Whether a deployment in ``source`` may move to ``target``."""
    return target in TRANSITIONS[source]


def sources(target: DeploymentState) -> frozenset[DeploymentState]:
    """The states from which a deployment may move to ``target``."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)
