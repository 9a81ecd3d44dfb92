"""Calibration round trip: a run directory produced with known costs is fitted and predicted."""

import itertools
import json

import numpy as np
import pytest

from rollarc.cluster.distributions import LogNormal, Uniform
from rollarc.config.io import ConfigError
from rollarc.sim.calibrate import calibrate, fit_costs, nonnegative_lstsq
from rollarc.sim.run_dir import load_run, write_run
from rollarc.sim.simulator import simulate
from rollarc.sim.toy import toy_setup


def _make_run(tmp_path, k):
    setup = toy_setup(
        groups=4,
        group_size=4,
        steps=6,
        max_staleness=k,
        engines=2,
        max_batch=64,
        prompt=Uniform(low=20, high=200),
        response=LogNormal(mean=80, sigma=0.6, max=400),
        turns=Uniform(low=1, high=3.49),
        env_latency=LogNormal(mean=0.3, sigma=0.5),
        decode_base_s=0.01,
        decode_per_seq_s=0.002,
        prefill_per_token_s=0.0005,
        seed=k,
    )
    result = simulate(setup, record_timeline=True)
    ends = [0.0, *result.step_ends]
    config = {
        "train": {"groups_per_step": 4, "group_size": 4, "steps": 6},
        "async": {"mode": "sync" if k == 0 else "async", "max_staleness": k},
    }
    return write_run(tmp_path / f"run{k}", config, result.timeline, [b - a for a, b in itertools.pairwise(ends)])


def test_nonnegative_lstsq_drops_negative_terms():
    x = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    y = np.array([3.0, 2.0, 1.0])  # slope -1 is not physical: fit the mean instead
    assert nonnegative_lstsq(x, y) == pytest.approx([2.0, 0.0])


def test_fit_recovers_the_generating_costs(tmp_path):
    costs = fit_costs([load_run(_make_run(tmp_path, 0))])
    assert costs.train.per_token_s == pytest.approx(0.001, rel=0.02)
    assert costs.train.fixed_s == pytest.approx(2.0, rel=0.05)
    assert costs.sync_s == pytest.approx(0.3)
    assert costs.engines == 2
    assert costs.engine.decode_base_s > 0  # decode coefficients are collinear here; the prediction test checks them


def test_calibration_predicts_sync_and_async_runs_within_tolerance(tmp_path):
    runs = [load_run(_make_run(tmp_path, 0)), load_run(_make_run(tmp_path, 1))]
    report = calibrate(runs)
    assert [r["mode"] for r in report["runs"]] == ["sync", "async(1)"]
    for run in report["runs"]:
        assert set(run["predicted_step_time_s"]) == {"sync", "async(1)"}
        assert run["error"] < 0.10
    json.dumps(report)  # serialisable as the --json output


def test_bad_run_directory_is_named(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        load_run(tmp_path)
    run = _make_run(tmp_path, 0)
    (run / "timeline.jsonl").write_text('{"kind": "generate", "t0": 0, "t1": 1}\nnot json\n')
    with pytest.raises(ConfigError, match=r"timeline\.jsonl, line 2"):
        load_run(run)


def test_holdout_predicts_each_run_from_the_others_costs(tmp_path):
    """Runs that share costs: a synchronous run's fit predicts the asynchronous run, and back."""
    runs = [load_run(_make_run(tmp_path, 0)), load_run(_make_run(tmp_path, 1))]
    report = calibrate(runs, holdout=True)
    assert report["holdout"] is True
    for run in report["runs"]:
        assert run["error"] < 0.15
        assert "fitted_on_others" in run
    with pytest.raises(ConfigError, match="at least two run directories"):
        calibrate(runs[:1], holdout=True)
