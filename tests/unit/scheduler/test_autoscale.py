"""The PID advice on a simulated queue: it settles after a load step without oscillating,
and does not wind up while saturated."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from app.settings import Settings
from scheduler.autoscale import PidController, PidState
from scheduler.service import controller_from

TICK_S = 5.0
PER_WORKER = 5.0  # tasks a worker finishes per second
SERVICE_S = 0.2


def simulate(controller: PidController, loads: list[float], tick_s: float = TICK_S) -> list[int]:
    """A fluid queue: tasks arrive at ``load`` a second, ``workers`` serve ``PER_WORKER``
    each; the observed latency is the backlog's wait plus the service time, and the
    workers busy are all of them while a backlog waits, else as many as the load needs."""
    backlog = 0.0
    state = PidState(controller.min_workers)
    advised = []
    for load in loads:
        workers = state.recommended
        backlog = max(0.0, backlog + (load - PER_WORKER * workers) * tick_s)
        if workers == 0:
            latency, busy = (tick_s if backlog else SERVICE_S), 0.0
        else:
            latency = backlog / (PER_WORKER * workers) + SERVICE_S
            busy = workers if backlog else min(workers, load / PER_WORKER)
        state = controller.step(state, latency, tick_s, busy)
        advised.append(state.recommended)
    return advised


class TestStep:
    def test_a_load_step_settles_on_the_needed_workers_without_oscillating(self) -> None:
        controller = PidController(target_s=2.0, max_step=4)
        advised = simulate(controller, [20.0] * 60 + [60.0] * 60)
        after = advised[60:]
        assert max(after) <= 12 + controller.max_step  # overshoot: one step at most
        assert after[-20:] == [12] * 20  # 60 tasks/s need exactly 12 workers: it stays there
        assert all(abs(b - a) <= 4 for a, b in itertools.pairwise(advised))

    def test_it_does_not_wind_up_while_saturated(self) -> None:
        capped = PidController(target_s=2.0, max_workers=10)
        # More load than ten workers serve for 200 s, then none: 6,000 tasks of backlog,
        # which ten workers drain in 120 s (24 ticks) once the load stops.
        advised = simulate(capped, [80.0] * 40 + [0.0] * 60)
        assert advised[39] == 10
        # As soon as the backlog is gone the advice falls: nothing integrated while it was
        # pinned at the cap holds it up.
        falls = next(i for i in range(40, 100) if advised[i] < 10)
        assert 40 + 20 <= falls <= 40 + 24 + 2
        assert advised[-1] == capped.min_workers

    def test_a_large_step_does_not_wind_up_behind_the_step_limit(self) -> None:
        controller = PidController(target_s=2.0, max_step=4)
        # 20 -> 200 tasks/s: 40 workers needed, reached 4 at a time. The backlog built up
        # meanwhile takes extra workers to drain; nothing integrated behind the step limit
        # adds to that, so the advice stays clear of the cap and settles.
        advised = simulate(controller, [20.0] * 60 + [200.0] * 200)
        after = advised[60:]
        assert max(after) < controller.max_workers
        assert after[-80:] == [40] * 80

    def test_a_quiet_queue_is_advised_the_minimum(self) -> None:
        controller = PidController(target_s=2.0, min_workers=2)
        assert simulate(controller, [0.0] * 10) == [2] * 10

    def test_each_tick_moves_at_most_max_step(self) -> None:
        controller = PidController(target_s=1.0, max_step=2)
        state = controller.step(PidState(3), observed_s=100.0, dt_s=5.0)
        assert state.recommended == 5

    @pytest.mark.parametrize("tick_s", [5.0, 15.0, 30.0])
    @pytest.mark.parametrize("target_s", [0.5, 1.0, 2.0, 5.0, 60.0])
    def test_short_targets_and_long_ticks_settle_within_a_worker(
        self, tick_s: float, target_s: float
    ) -> None:
        """A tick many targets long: one tick short of workers reads as many targets of
        latency. With a 1 s target at the default 15 s interval the advice swung 10, 14,
        10, ... for ever (60 tasks/s need exactly 12 workers)."""
        controller = PidController(target_s=target_s)
        advised = simulate(controller, [20.0] * 60 + [60.0] * 200, tick_s=tick_s)
        assert set(advised[-40:]) <= {11, 12, 13}, advised[-40:]

    def test_a_bound_lowered_since_holds_at_once(self) -> None:
        """The step limit let the advice come down 4 a tick from 13 to a new cap of 5."""
        state = PidController(target_s=1.0, max_workers=5).step(PidState(13), 100.0, 5.0)
        assert state.recommended == 5
        state = PidController(target_s=1.0, min_workers=20).step(PidState(3), 0.0, 5.0)
        assert state.recommended == 20

    @pytest.mark.parametrize("needed", [1.4, 2.0, 2.6, 3.0, 5.0, 12.0])
    @pytest.mark.parametrize("min_workers", [0, 1])
    def test_a_steady_load_is_advised_the_workers_it_needs_with_the_defaults(
        self, needed: float, min_workers: int
    ) -> None:
        """Latency alone reads "just enough" as "too many": a load needing 2 workers was
        advised 1, 5, 1, 5, ... for ever at the defaults (a 5 s target, 15 s steps, steps
        of 4). Never fewer than are busy, it settles on the workers the load needs."""
        defaults = Settings(_env_file=None)
        controller = replace(controller_from(defaults), min_workers=min_workers)
        tick_s = defaults.scheduler_autoscale_interval_s
        advised = simulate(controller, [needed * PER_WORKER] * 200, tick_s=tick_s)
        assert set(advised[-40:]) == {math.ceil(needed)}, advised[-40:]

    def test_the_busy_floor_moves_no_faster_than_a_step(self) -> None:
        state = PidController(target_s=1.0, max_step=2).step(PidState(3), 0.0, 5.0, busy=20)
        assert state.recommended == 5


@pytest.mark.parametrize("stored", [math.inf, -math.inf, math.nan])
def test_a_state_an_overflowed_target_left_starts_over(stored: float) -> None:
    """A target such as 1e-320 (taken before the setting was bounded) overflowed the error
    to infinity, which was stored in the queue's row: stepped from it, every step was NaN
    and failed, and the queue's advice never moved again."""
    controller = PidController(target_s=1.0, min_workers=1, max_workers=10, max_step=2)
    after = controller.step(PidState(10, integral=stored, last_error=stored), 0.0, 15.0)
    assert math.isfinite(after.integral)
    assert math.isfinite(after.last_error)
    assert after.recommended == 8  # no latency: down by max_step, as from a clean state
