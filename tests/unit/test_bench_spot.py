"""rollarc bench spot's fleet runs: every rate with and without notice; pull loses no job and duplicates none.
And --ray-set: overrides that reach the measured pull vs push run's config."""

from rollarc.bench.spot import _overrides, _parser, fleet_runs, ray_config
from rollarc.diffusion.spot_setup import preemption_schedule, spot_slots


def test_fleet_runs_cover_every_rate_and_pull_never_loses_or_duplicates():
    runs = fleet_runs(jobs=60, steps=4, slots=4, notice=2, replacement=8, lease=2, seed=0)
    assert list(runs) == ["none", "low_notice", "low_no_notice", "high_notice", "high_no_notice"]
    for r in runs.values():
        assert (r["pull"].lost_jobs, r["pull"].duplicates, r["push"].lost_jobs) == (0, 0, 0)
    assert runs["none"]["pull"].ticks == runs["none"]["push"].ticks == 60  # 15 jobs × 4 steps per slot
    assert runs["high_notice"]["pull"].lost_steps == 0  # the in-flight commit keeps every step
    assert runs["high_notice"]["push"].lost_steps > 0


def test_ray_set_overrides_reach_the_measured_runs_config_only():
    sets = ["cluster.pools.spot.count=6", "spot.trace=null", "spot.horizon_s=60", "spot.rate_per_hour=240"]
    argv = [arg for s in sets for arg in ("--ray-set", s)]
    args = _parser().parse_args(argv)
    base, cfg = ray_config(args.config, []), ray_config(args.config, args.ray_set)
    assert spot_slots(base)[1] == 2 and spot_slots(cfg)[1] == 6
    assert base.spot.trace is not None and cfg.spot.trace is None
    # the config's trace: 4 preemptions, all in the first 34 s; the drawn one hits every slot of the 6 in 60 s
    assert [p.at_s for p in preemption_schedule(base)] == [6, 14, 24, 34]
    drawn = preemption_schedule(cfg)
    assert len(drawn) > 4 and {p.slot for p in drawn} == set(range(6)) and all(p.at_s <= 60 for p in drawn)
    assert _overrides({"overrides": args.ray_set}).endswith("spot.horizon_s=60 spot.rate_per_hour=240")
    assert _overrides({"overrides": []}) == ""
