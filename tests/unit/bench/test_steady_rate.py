"""``bench.scheduler.Run.steady``: the rate the scheduler bench compares, on the task times
worker processes report. A worker's handler runs a lease's tasks microseconds apart, so
its times come in steps, one a lease."""

from __future__ import annotations

from bench.scheduler import Run


def leased(workers: int, leases: int, size: int, cycle: float, stagger: float) -> list[float]:
    """Each worker leases ``leases`` batches of ``size`` a ``cycle`` apart, worker ``w``
    starting ``w * stagger`` after the first; its handler takes 10 us a task."""
    return [
        w * stagger + n * cycle + k * 10e-6
        for w in range(workers)
        for n in range(leases)
        for k in range(size)
    ]


def test_steps_of_a_batch_read_as_the_queues_rate() -> None:
    # 8 workers, a lease of 10 every 50 ms each: 1,600 tasks/s.
    run = Run(seconds=5.1, done=8_000, times=leased(8, 100, 10, 0.05, 0.05 / 8))
    assert abs(run.steady - 1_600) / 1_600 < 0.01, run.steady


def test_the_start_and_the_end_of_a_run_are_left_out() -> None:
    # 4,000 tasks at 2,000/s, after 2 s of start-up and before 3 s of winding down.
    times = [2 + n / 2_000 for n in range(4_000)]
    run = Run(seconds=7, done=4_000, times=times)
    assert abs(run.steady - 2_000) < 1, run.steady
    assert run.whole < 600


def test_a_run_of_a_few_leases_is_timed_whole() -> None:
    # --quick --batch 50: two workers, one lease each, 5 ms apart, in a run of 0.6 s: the
    # gap between two leases is no rate of the queue's.
    run = Run(seconds=0.6, done=100, times=leased(2, 1, 50, 0.3, 0.005))
    assert run.steady == run.whole
