"""The deployment state table (``core/lifecycle.py``) and a walk over it with leases."""

from __future__ import annotations

from berth.core.lifecycle import ACTIVE, FINAL, MAX_ATTEMPTS, TRANSITIONS, can_move, sources
from berth.core.models import DeploymentState
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

Q, R = DeploymentState.QUEUED, DeploymentState.RUNNING
S, F, C, T = (
    DeploymentState.SUCCEEDED,
    DeploymentState.FAILED,
    DeploymentState.CANCELED,
    DeploymentState.TIMED_OUT,
)


class TestTable:
    def test_it_is_design_mds_diagram(self) -> None:
        """queued → running | canceled | timed_out; running → running (takeover) or any end."""
        assert TRANSITIONS[Q] == {R, C, T}
        assert TRANSITIONS[R] == {R, S, F, C, T}

    def test_final_states_have_no_way_out(self) -> None:
        """Nothing leaves succeeded, failed, canceled or timed_out."""
        assert {S, F, C, T} == FINAL
        assert all(TRANSITIONS[state] == frozenset() for state in FINAL)

    def test_every_state_is_in_the_table_and_sources_invert_it(self) -> None:
        """``sources`` is the table read backwards; only active states move."""
        assert set(TRANSITIONS) == set(DeploymentState)
        for target in DeploymentState:
            assert sources(target) == {s for s in DeploymentState if can_move(s, target)}
            assert sources(target) <= ACTIVE

    def test_a_queued_deployment_never_jumps_to_an_outcome(self) -> None:
        """Only a run succeeds or fails: queued → succeeded/failed is refused."""
        assert not can_move(Q, S)
        assert not can_move(Q, F)
        assert sources(S) == sources(F) == {R}


class DeploymentWalk(RuleBasedStateMachine):
    """One deployment driven by claims, lease expiries (takeovers), ends and cancels; every
    move is checked against the table, and attempts stay within ``MAX_ATTEMPTS``."""

    def __init__(self) -> None:
        super().__init__()
        self.state = Q
        self.attempt = 0
        self.history = [Q]

    def _move(self, target: DeploymentState) -> None:
        assert can_move(self.state, target), (self.state, target)
        self.state = target
        self.history.append(target)

    @precondition(lambda self: self.state is Q)
    @rule()
    def claim(self) -> None:
        self.attempt = 1
        self._move(R)

    @precondition(lambda self: self.state is R)
    @rule()
    def lease_expires(self) -> None:
        """Another worker takes over (running → running), until the attempts run out."""
        if self.attempt < MAX_ATTEMPTS:
            self.attempt += 1
            self._move(R)
        else:
            self._move(F)

    @precondition(lambda self: self.state is R)
    @rule(outcome=st.sampled_from([S, F]))
    def run_ends(self, outcome: DeploymentState) -> None:
        self._move(outcome)

    @precondition(lambda self: self.state in ACTIVE)
    @rule(end=st.sampled_from([C, T]))
    def canceled_or_timed_out(self, end: DeploymentState) -> None:
        self._move(end)

    @rule(wanted=st.sampled_from(list(DeploymentState)))
    def nothing_leaves_a_final_state(self, wanted: DeploymentState) -> None:
        """Once final, no move is allowed, whatever is asked."""
        if self.state in FINAL:
            assert not can_move(self.state, wanted)

    @invariant()
    def attempts_are_bounded(self) -> None:
        assert 0 <= self.attempt <= MAX_ATTEMPTS
        assert (self.attempt == 0) == (R not in self.history)

    @invariant()
    def an_outcome_follows_a_run(self) -> None:
        if self.state in (S, F):
            assert R in self.history


TestDeploymentWalk = DeploymentWalk.TestCase
