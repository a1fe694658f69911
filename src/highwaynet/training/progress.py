"""A sweep's progress: runs done and left, and the time left estimated run by run.

A sweep's runs differ in cost: the depth study's 100-layer nets take ten times its 10-layer ones,
and a highway layer takes longer than a plain one. So each run is planned with a *shape* (what makes
runs alike: kind and depth, say), a *cost* (parameters × epochs, or any number proportional to its
work) and a *family* (runs whose time per unit of cost is alike: the kind). A run's time is told in
two parts, its epochs' (which scale with its cost) and the rest (building the model, testing,
writing: about the same for every run). The time left is the sum, over the runs still to go, of

- the mean time of the runs of its shape already trained in this session, where there are some;
- else the runs' fixed part (their median, the first run's left out: it also pays for what warms
  up once), plus its epochs' time as its family's runs so far give
  it (every run's, where its family has not run yet): on the line through their costs and epochs'
  seconds once they span a factor of two, else in proportion to the cost.

That sum is in the machine's time as it was at the start; it is then scaled by the *recent pace*: how
long the latest runs took against what their family's runs said of each before it ran (their seconds
summed over those estimates', the last :data:`RECENT_RUNS`; not against their shape's mean, which would
take a slower machine for a costlier shape). Each run's time is kept divided by the pace it ran at, so
that the estimates stay in the start's time. A machine that becomes busy (other work on its cores) shows
in the time left after a run or two, and one that becomes free again as soon: without the pace, a sweep
that slowed threefold near its end said "34 s left" with three minutes to go.

There is an estimate once two runs have been timed. Finished runs skipped on a resume take no time
and are not counted.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from pathlib import Path

__all__ = ["RECENT_RUNS", "SweepProgress"]

#: How many of the latest timed runs set the recent pace (few: a change of the machine's load shows soon;
#: more than one: one run's noise does not swing the estimate).
RECENT_RUNS = 3

#: A planned run: ``(shape, cost)`` or ``(shape, cost, family)``.
PlannedRun = tuple[Hashable, float] | tuple[Hashable, float, Hashable]


class SweepProgress:
    """The progress of a sweep of planned runs, reported in :meth:`line` before each run.

    Args:
        plan: the runs in the order the sweep runs them, each ``(shape, cost)`` or ``(shape, cost,
            family)``; or their number, for runs alike (one shape, one cost).

    Example::

        progress = SweepProgress([(("plain", 10), 10 * 6, "plain"), (("plain", 100), 100 * 6, "plain")])
        progress.line()          # 'run 1 of 2 (0 done, 2 to go)'
        progress.finished(3.0)   # the first took 3 s
        progress.line()          # 'run 2 of 2 (1 done, 1 to go; about 30 s left)'
    """

    def __init__(self, plan: Sequence[PlannedRun] | int) -> None:
        runs: Sequence[PlannedRun] = [((), 1.0)] * plan if isinstance(plan, int) else plan
        self.plan = [(run[0], float(run[1]), run[2] if len(run) > 2 else None) for run in runs]
        self.total, self.done = len(self.plan), 0
        self.by_shape: dict[Hashable, list[float]] = {}
        self.by_family: dict[Hashable, list[tuple[float, float]]] = {}  # (cost, epochs' seconds) of its runs
        self.fixed: list[float] = []  # each timed run's seconds outside its epochs
        self.paced: list[tuple[float, float]] = []  # of each run estimated: (its seconds, the estimate before it)
        #: The runs left to another process of a split sweep (``run_once``): each run folder, and who holds it
        #: ("process 123 on host"; None where none does now). ``run_dir.look_again`` looks at them again at the
        #: sweep's end; ``run_dir.finish_sweep`` marks a summary without those still unfinished partial.
        self.held: dict[Path, str | None] = {}

    def finished(self, seconds: float | None, epochs_seconds: float | None = None) -> None:
        """The next planned run is done: trained in ``seconds`` (of which ``epochs_seconds`` in its
        epochs; default: all of it), or None where it was skipped (done before)."""
        if self.done < self.total and seconds is not None:
            shape, cost, family = self.plan[self.done]
            if len(self.fixed) >= 2:  # (what its family's runs said of it before it ran, against what it took)
                self.paced.append((seconds, self._estimate(shape, cost, family, of_shape=False)))
            pace = self.pace()  # (its time as the start's pace would have taken it)
            seconds, epochs_seconds = seconds / pace, None if epochs_seconds is None else epochs_seconds / pace
            scaled = seconds if epochs_seconds is None else min(seconds, epochs_seconds)
            self.by_shape.setdefault(shape, []).append(seconds)
            self.by_family.setdefault(family, []).append((cost, scaled))
            self.fixed.append(seconds - scaled)
        self.done += 1

    def _estimate(self, shape: Hashable, cost: float, family: Hashable, of_shape: bool = True) -> float:
        if of_shape and shape in self.by_shape:
            return statistics.fmean(self.by_shape[shape])
        runs = self.by_family.get(family) or [run for family_runs in self.by_family.values() for run in family_runs]
        # (the first run timed also pays for what warms up once, the thread pool and the caches: its
        # fixed part is left out)
        return statistics.median(self.fixed[1:]) + _epochs_seconds(runs, cost)

    def pace(self) -> float:
        """The recent pace: the latest :data:`RECENT_RUNS` runs' seconds over what their families' runs said of
        each before it ran (1, the start's pace, until that many runs were estimated)."""
        recent = self.paced[-RECENT_RUNS:]
        estimated = sum(e for _, e in recent)
        # (fewer runs than that: one run's noise would set it)
        return sum(s for s, _ in recent) / estimated if len(recent) == RECENT_RUNS and estimated > 0 else 1.0

    def seconds_left(self) -> float | None:
        """The estimate of the time the runs still to go take, at the recent pace; None before two runs
        were timed."""
        if len(self.fixed) < 2:
            return None
        return self.pace() * sum(self._estimate(*run) for run in self.plan[self.done:])

    def line(self) -> str:
        """``run 5 of 24 (4 done, 20 to go; about 3 min left)``."""
        left = self.total - self.done
        seconds = self.seconds_left()
        eta = "" if seconds is None else (f"; about {seconds / 60:.0f} min left" if seconds >= 150
                                          else f"; about {seconds:.0f} s left")
        return f"run {min(self.done + 1, self.total)} of {self.total} ({self.done} done, {left} to go{eta})"


def _epochs_seconds(runs: list[tuple[float, float]], cost: float) -> float:
    """The epochs' seconds of a run of ``cost``, from ``runs`` (cost, seconds): on the line through them
    where their costs lie twice apart or more (an epoch also has a part that does not grow with the
    cost: the data, the optimiser's step), else in proportion to the cost."""
    costs = [c for c, _ in runs]
    mean_cost, mean_seconds = statistics.fmean(costs), statistics.fmean(s for _, s in runs)
    if max(costs) >= 2 * min(costs):
        spread = sum((c - mean_cost) ** 2 for c in costs)
        rate = sum((c - mean_cost) * (s - mean_seconds) for c, s in runs) / spread
        if rate > 0 and mean_seconds - rate * mean_cost >= 0:
            return mean_seconds + rate * (cost - mean_cost)
    return cost * mean_seconds / mean_cost if mean_cost > 0 else 0.0
