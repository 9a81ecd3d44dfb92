"""Bursty arrivals, pool sizing and replica-second integration, by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rollarc.envs.latency import LatencyConfig
from rollarc.rewards.arrivals import mean_rate, peak_rate, replicas_for, timeline_arrivals, wave_arrivals
from rollarc.rewards.meter import integrate_steps


def test_waves_of_fixed_latency_arrive_together():
    fixed = LatencyConfig(kind="fixed", fixed_s=0.5)
    times = wave_arrivals(waves=2, trajectories=3, turns=2, period_s=10.0, latency=fixed, generate_s=0.1)
    assert times.tolist() == pytest.approx([1.2, 1.2, 1.2, 11.2, 11.2, 11.2])


def test_failed_env_steps_never_arrive():
    always = LatencyConfig(kind="fixed", fixed_s=0.1, failure_prob=1.0)
    assert len(wave_arrivals(2, 5, 1, 1.0, always)) == 0
    with pytest.raises(ValueError, match="waves"):
        wave_arrivals(0, 5, 1, 1.0, always)


def test_long_tail_waves_are_bursty():
    long_tail = LatencyConfig(kind="lognormal", median_s=0.2, sigma=1.38)
    times = wave_arrivals(3, 100, 4, 20.0, long_tail, seed=1)
    assert len(times) == 300 and np.all(np.diff(times) >= 0)
    assert peak_rate(times, 1.0) > 4 * mean_rate(times)


def test_rates_and_sizing_by_hand():
    times = np.array([0.0, 0.1, 0.2, 5.0])
    assert peak_rate(times, 1.0) == 3.0
    assert peak_rate(times, 0.15) == pytest.approx(2 / 0.15)
    assert mean_rate(times) == pytest.approx(4 / 5)
    assert peak_rate(np.array([]), 1.0) == 0.0
    assert replicas_for(10.0, 4.0) == 3 and replicas_for(8.0, 4.0) == 2 and replicas_for(0.1, 4.0) == 1
    with pytest.raises(ValueError):
        replicas_for(1.0, 0.0)


def test_recorded_timeline_arrivals(tmp_path):
    spans = [
        {"kind": "env_step", "traj": "a", "t0": 100.0, "t1": 101.0},
        {"kind": "env_step", "traj": "a", "t0": 101.0, "t1": 103.5},
        {"kind": "generate", "traj": "a", "t0": 104.0, "t1": 109.0},
        {"kind": "env_step", "traj": "b", "t0": 100.0, "t1": 102.0},
    ]
    path = tmp_path / "timeline.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in spans) + "\n")
    assert timeline_arrivals(path).tolist() == [0.0, 1.5]
    with pytest.raises(FileNotFoundError):
        timeline_arrivals(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"kind": "train", "t0": 1, "t1": 2}\n')
    with pytest.raises(ValueError, match="no env_step spans"):
        timeline_arrivals(tmp_path / "bad.jsonl")


def test_replica_seconds_integrate_the_sampled_counts():
    samples = [(0.0, 1), (1.0, 3), (3.0, 0)]
    assert integrate_steps(samples, 0.5, 4.0) == pytest.approx(0.5 * 1 + 2 * 3 + 1 * 0)
    assert integrate_steps(samples, 2.0, 2.5) == pytest.approx(1.5)
    assert integrate_steps([(1.0, 2)], 0.0, 3.0) == pytest.approx(6.0)  # before the first sample: its value
    assert integrate_steps([], 0.0, 3.0) == 0.0 and integrate_steps(samples, 2.0, 1.0) == 0.0
