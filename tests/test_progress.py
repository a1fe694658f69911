"""A sweep's estimate of the time left, run by run, against the time its runs then took."""

import random

import pytest

from highwaynet.training.progress import SweepProgress


def depth_sweep(seconds_per_layer: dict[bool, float], noise: float, seed: int):
    """The depth study's plan (``recipes.depth.plan``, at its defaults) and what each run then takes: a
    time in proportion to its layers, highway layers slower than plain ones, each off by up to ``noise``."""
    from highwaynet.config import DepthConfig
    from highwaynet.recipes.depth import plan as depth_plan

    rng = random.Random(seed)
    plan = depth_plan(DepthConfig())
    took = [depth * seconds_per_layer[plain] * (1 + rng.uniform(-noise, noise)) for (plain, depth), _, _ in plan]
    return plan, took


@pytest.mark.parametrize("seed", range(5))
def test_the_estimate_is_within_half_again_of_the_time_then_taken(seed):
    plan, took = depth_sweep({True: 0.05, False: 0.08}, noise=0.15, seed=seed)
    progress = SweepProgress(plan)
    for i, seconds in enumerate(took):
        estimate = progress.seconds_left()
        if estimate is not None:
            truth = sum(took[i:])
            assert truth / 1.5 <= estimate <= truth * 1.5, (i, estimate, truth)
        progress.finished(seconds)
    assert progress.seconds_left() == 0 and progress.line() == f"run {len(plan)} of {len(plan)} " \
                                                                f"({len(plan)} done, 0 to go; about 0 s left)"


def test_a_mean_over_all_runs_so_far_would_be_far_off():
    """What the estimate was before each run was planned with its cost: every run as long as the mean
    so far. After the first 10-layer run it said a tenth of the truth."""
    plan, took = depth_sweep({True: 0.05, False: 0.08}, noise=0.0, seed=0)
    left = len(took) - 1
    assert left * took[0] < sum(took[1:]) / 5


def test_runs_skipped_on_a_resume_take_no_time_and_a_shape_measured_is_its_own_estimate():
    progress = SweepProgress([("a", 1.0), ("a", 1.0), ("a", 1.0), ("b", 10.0), ("b", 10.0)])  # (one family)
    assert progress.line() == "run 1 of 5 (0 done, 5 to go)"
    progress.finished(None)                  # done before: skipped
    progress.finished(2.5, 2.0)              # 2 s of epochs, 0.5 s else (the first run: warming up too)
    assert progress.seconds_left() is None   # one run timed: no estimate yet
    progress.finished(2.1, 2.0)
    assert progress.seconds_left() == pytest.approx(2 * (0.1 + 20.0))  # each b: the fixed part, and a's rate
    progress.finished(30.1, 30.0)
    assert progress.seconds_left() == pytest.approx(30.1)          # b as b took
    assert progress.line() == "run 5 of 5 (4 done, 1 to go; about 30 s left)"
    assert SweepProgress(3).line() == "run 1 of 3 (0 done, 3 to go)"  # runs alike



def test_each_family_runs_at_its_own_rate_on_a_line_through_its_runs():
    """A highway run of a new depth is estimated at the highway runs' rate, not the plain ones'; once a
    family's runs span twice their cost, on the line through them (an epoch's part that does not grow)."""
    progress = SweepProgress([("plain 10", 10, "plain"), ("highway 10", 10, "highway"), ("highway 20", 20, "highway"),
                              ("highway 40", 40, "highway"), ("plain 40", 40, "plain")])
    progress.finished(1.0)
    progress.finished(2.0)
    assert progress.seconds_left() == pytest.approx(4.0 + 8.0 + 4.0)  # highway 0.2 s per unit, plain 0.1
    progress.finished(3.0)  # highway: 2 s at 10, 3 s at 20: 1 s + 0.1 s per unit
    assert progress.seconds_left() == pytest.approx(5.0 + 4.0)


# ``highwaynet reproduce depth --data mnist5k`` (the README's main job) on a 2-core AMD EPYC: each run's
# seconds and its epochs' seconds, in the sweep's order (10, 20, 50, 100 layers; plain, then highway;
# the three rates of the search, then seeds 1 and 2).
MEASURED_DEPTH_SWEEP = [
    (1.83, 0.72), (0.68, 0.65), (0.7, 0.66), (0.71, 0.67), (0.71, 0.67), (0.84, 0.8), (0.83, 0.79), (0.83, 0.79),
    (0.83, 0.79), (0.82, 0.78), (1.1, 1.05), (1.13, 1.07), (1.14, 1.09), (1.15, 1.1), (1.19, 1.13), (1.51, 1.45),
    (1.53, 1.47), (1.41, 1.36), (1.41, 1.36), (1.39, 1.34), (2.39, 2.29), (2.58, 2.33), (2.4, 2.31), (2.43, 2.33),
    (2.52, 2.4), (2.31, 2.19), (2.24, 2.14), (2.27, 2.16), (3.16, 3.04), (3.24, 3.12), (3.63, 3.43), (4.04, 3.87),
    (4.54, 4.36), (4.5, 4.31), (4.46, 4.28), (6.29, 6.06), (6.37, 6.16), (6.43, 6.23), (5.78, 5.57), (6.38, 6.17)]


def test_on_a_measured_depth_sweep_every_estimate_is_within_half_again():
    """The plan ``recipes.depth`` makes for its defaults, replayed with what each run then took."""
    from highwaynet.config import DepthConfig
    from highwaynet.recipes.depth import plan as depth_plan

    plan = depth_plan(DepthConfig())
    assert len(plan) == len(MEASURED_DEPTH_SWEEP)
    progress = SweepProgress(plan)
    estimates = 0
    for i, (seconds, epochs) in enumerate(MEASURED_DEPTH_SWEEP):
        estimate = progress.seconds_left()
        if estimate is not None:
            truth = sum(s for s, _ in MEASURED_DEPTH_SWEEP[i:])
            assert truth / 1.5 <= estimate <= 1.5 * truth, (i, estimate, truth)
            estimates += 1
        progress.finished(seconds, epochs)
    assert estimates == len(plan) - 2  # from the third run on


@pytest.mark.parametrize("pace, change", [
    ([1.0] * 20 + [3.0] * 20, "three times slower from run 21 (other work starts on its cores)"),
    ([1.0] * 12 + [3.0] * 12 + [1.0] * 16, "three times slower for runs 13 to 24, then free again"),
])
def test_the_estimate_follows_the_machines_recent_pace(pace, change):
    """The measured depth sweep on a machine whose pace changes: from the second run after a change on,
    every estimate is within half again of the time left at the pace the machine then runs at. (Without
    the recent pace, the estimates kept the earlier pace: up to 1.9 times off.)"""
    from highwaynet.config import DepthConfig
    from highwaynet.recipes.depth import plan as depth_plan

    took = [(s * f, e * f) for (s, e), f in zip(MEASURED_DEPTH_SWEEP, pace, strict=True)]
    progress = SweepProgress(depth_plan(DepthConfig()))
    changes = [i for i in range(1, len(pace)) if pace[i] != pace[i - 1]]
    for i, (seconds, epochs) in enumerate(took):
        estimate = progress.seconds_left()
        if estimate is not None and not any(0 <= i - c < 2 for c in changes):
            at_this_pace = sum(s * pace[i - 1] for s, _ in MEASURED_DEPTH_SWEEP[i:])
            assert at_this_pace / 1.5 <= estimate <= 1.5 * at_this_pace, (change, i, estimate, at_this_pace)
        progress.finished(seconds, epochs)
