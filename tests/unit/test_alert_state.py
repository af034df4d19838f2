"""Every transition of the alert state machine (alerts/state_machine.py), including no flapping."""

from __future__ import annotations

import pytest

from alerts.state_machine import AlertState, AlertStateMachine, Transition

BAD, GOOD, UNKNOWN = True, False, None


def run(
    machine: AlertStateMachine, observations: list[bool | None]
) -> list[tuple[AlertState, Transition | None]]:
    return [(machine.state, t) for t in (machine.step(o) for o in observations)]


def test_inactive_bad_goes_pending_when_for_above_one():
    m = AlertStateMachine(for_count=3, keep_firing_count=1)
    assert m.step(BAD) is None
    assert m.state is AlertState.PENDING
    assert m.bad_streak == 1


def test_pending_bad_fires_when_streak_reaches_for():
    m = AlertStateMachine(for_count=3, keep_firing_count=1)
    assert run(m, [BAD, BAD, BAD]) == [
        (AlertState.PENDING, None),
        (AlertState.PENDING, None),
        (AlertState.FIRING, Transition.FIRE),
    ]


def test_pending_good_returns_to_inactive_and_resets_streak():
    m = AlertStateMachine(for_count=3, keep_firing_count=1)
    assert run(m, [BAD, BAD, GOOD]) == [
        (AlertState.PENDING, None),
        (AlertState.PENDING, None),
        (AlertState.INACTIVE, None),
    ]
    # the streak starts over: two more bad ones are not enough
    assert run(m, [BAD, BAD]) == [(AlertState.PENDING, None), (AlertState.PENDING, None)]
    assert m.step(BAD) is Transition.FIRE


def test_inactive_good_stays_inactive():
    m = AlertStateMachine(for_count=2, keep_firing_count=2)
    assert run(m, [GOOD, GOOD]) == [(AlertState.INACTIVE, None)] * 2


def test_for_one_fires_on_first_bad_without_pending():
    m = AlertStateMachine(for_count=1, keep_firing_count=1)
    assert m.step(BAD) is Transition.FIRE
    assert m.state is AlertState.FIRING


def test_firing_bad_is_deduplicated():
    m = AlertStateMachine(for_count=1, keep_firing_count=1)
    assert (
        run(m, [BAD, BAD, BAD, BAD])
        == [(AlertState.FIRING, Transition.FIRE)] + [(AlertState.FIRING, None)] * 3
    )


def test_firing_good_resolves_once_after_keep_firing_count():
    m = AlertStateMachine(for_count=1, keep_firing_count=3)
    assert run(m, [BAD, GOOD, GOOD, GOOD, GOOD, GOOD]) == [
        (AlertState.FIRING, Transition.FIRE),
        (AlertState.FIRING, None),
        (AlertState.FIRING, None),
        (AlertState.RESOLVED, Transition.RESOLVE),
        (AlertState.RESOLVED, None),
        (AlertState.RESOLVED, None),
    ]


def test_firing_bad_resets_good_streak_no_flapping():
    m = AlertStateMachine(for_count=2, keep_firing_count=2)
    # alternating good/bad around the boundary while firing: never resolves, never re-fires
    trace = run(m, [BAD, BAD, GOOD, BAD, GOOD, BAD, GOOD, BAD])
    transitions = [t for _, t in trace if t is not None]
    assert transitions == [Transition.FIRE]
    assert m.state is AlertState.FIRING
    assert m.good_streak == 0


def test_flapping_input_while_inactive_never_fires():
    m = AlertStateMachine(for_count=2, keep_firing_count=2)
    trace = run(m, [BAD, GOOD] * 10)
    assert all(t is None for _, t in trace)
    assert m.state is AlertState.INACTIVE


def test_resolved_bad_starts_a_new_episode_via_pending():
    m = AlertStateMachine(for_count=2, keep_firing_count=1)
    assert run(m, [BAD, BAD, GOOD]) == [
        (AlertState.PENDING, None),
        (AlertState.FIRING, Transition.FIRE),
        (AlertState.RESOLVED, Transition.RESOLVE),
    ]
    assert run(m, [BAD, BAD]) == [(AlertState.PENDING, None), (AlertState.FIRING, Transition.FIRE)]


def test_resolved_bad_fires_directly_with_for_one():
    m = AlertStateMachine(for_count=1, keep_firing_count=1)
    assert [t for _, t in run(m, [BAD, GOOD, BAD])] == [Transition.FIRE, Transition.RESOLVE, Transition.FIRE]


def test_resolved_good_stays_resolved():
    m = AlertStateMachine(for_count=1, keep_firing_count=1)
    run(m, [BAD, GOOD])
    assert run(m, [GOOD, GOOD]) == [(AlertState.RESOLVED, None)] * 2


@pytest.mark.parametrize("prefix", [[], [True], [True, True, True], [True, True, True, False]])
def test_unknown_changes_nothing_in_any_state(prefix):
    m = AlertStateMachine(for_count=3, keep_firing_count=2)
    run(m, prefix)
    before = (m.state, m.bad_streak, m.good_streak)
    assert m.step(UNKNOWN) is None
    assert (m.state, m.bad_streak, m.good_streak) == before


@pytest.mark.parametrize(("for_count", "keep"), [(0, 1), (1, 0), (-1, 2)])
def test_counts_below_one_are_rejected(for_count, keep):
    with pytest.raises(ValueError, match="must be >= 1"):
        AlertStateMachine(for_count=for_count, keep_firing_count=keep)
