"""rollarc bench spot's fleet runs: every rate with and without notice; pull loses no job and duplicates none."""

from rollarc.bench.spot import fleet_runs


def test_fleet_runs_cover_every_rate_and_pull_never_loses_or_duplicates():
    runs = fleet_runs(jobs=60, steps=4, slots=4, notice=2, replacement=8, lease=2, seed=0)
    assert list(runs) == ["none", "low_notice", "low_no_notice", "high_notice", "high_no_notice"]
    for r in runs.values():
        assert (r["pull"].lost_jobs, r["pull"].duplicates, r["push"].lost_jobs) == (0, 0, 0)
    assert runs["none"]["pull"].ticks == runs["none"]["push"].ticks == 60  # 15 jobs × 4 steps per slot
    assert runs["high_notice"]["pull"].lost_steps == 0  # the in-flight commit keeps every step
    assert runs["high_notice"]["push"].lost_steps > 0
