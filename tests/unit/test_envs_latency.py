"""Env latency model: sampled quantiles against analytic ones, caps, failures, traces, config errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rollarc.config.io import ConfigError, load_config
from rollarc.envs import LATENCY_PRESETS, LatencyConfig, LatencyModel


def test_long_tail_preset_has_the_documented_shape() -> None:
    model = LatencyModel(LATENCY_PRESETS["long_tail"])
    assert model.config.sigma == pytest.approx(math.log(25) / 2.3263478740408408)
    assert model.analytic_quantile(0.5) == pytest.approx(0.2)
    assert model.analytic_quantile(0.99) == pytest.approx(5.0)
    sampled = model.quantiles((0.5, 0.9, 0.99), n=100_000, seed=1)
    for q, value in sampled.items():
        assert value == pytest.approx(model.analytic_quantile(q), rel=0.05), q


def test_pareto_quantiles() -> None:
    model = LatencyModel(LatencyConfig(kind="pareto", scale_s=0.1, alpha=2.0))
    # Pareto(x_m=0.1, alpha=2): Q(q) = 0.1 * (1 - q) ** -0.5
    assert model.analytic_quantile(0.5) == pytest.approx(0.1 * math.sqrt(2))
    assert model.analytic_quantile(0.99) == pytest.approx(1.0)
    sampled = model.quantiles((0.5, 0.9, 0.99), n=100_000, seed=2)
    for q, value in sampled.items():
        assert value == pytest.approx(model.analytic_quantile(q), rel=0.05), q
    assert model.quantiles((0.0,), n=1000)[0.0] >= 0.1  # never below the scale


def test_fixed_none_and_cap() -> None:
    rng = np.random.default_rng(0)
    assert LatencyModel(LatencyConfig(kind="fixed", fixed_s=0.25)).sample(rng) == (0.25, False)
    assert LatencyModel(LatencyConfig()).sample(rng) == (0.0, False)
    capped = LatencyModel(LatencyConfig(kind="lognormal", median_s=0.2, sigma=1.4, max_s=1.0))
    assert capped.analytic_quantile(0.99) == 1.0 and capped.analytic_quantile(0.5) == pytest.approx(0.2)
    assert max(capped.sample(rng)[0] for _ in range(2000)) == 1.0


def test_only_no_delay_and_no_failure_is_inert() -> None:
    """An inert model lets the agent loop skip its per-trajectory generator; any delay or failure needs it."""
    assert LatencyModel(LatencyConfig()).inert
    assert not LatencyModel(LatencyConfig(failure_prob=0.01)).inert
    assert not LatencyModel(LatencyConfig(kind="fixed", fixed_s=0.25)).inert
    assert not LatencyModel(LATENCY_PRESETS["long_tail"]).inert


def test_failure_rate_and_determinism() -> None:
    model = LatencyModel(LATENCY_PRESETS["long_tail"])
    rng = np.random.default_rng(3)
    draws = [model.sample(rng) for _ in range(20_000)]
    rate = sum(failed for _, failed in draws) / len(draws)
    assert rate == pytest.approx(0.02, abs=0.004)  # 4 binomial standard deviations
    again = np.random.default_rng(3)
    assert [model.sample(again) for _ in range(100)] == draws[:100]


def test_trace_resamples_recorded_delays(tmp_path: Path) -> None:
    trace = tmp_path / "delays.txt"
    trace.write_text("# seconds per step\n0.1\n0.2  # slow call\n\n0.3\n")
    model = LatencyModel(LatencyConfig(kind="trace", trace_path=trace))
    rng = np.random.default_rng(0)
    delays = {model.sample(rng)[0] for _ in range(200)}
    assert delays == {0.1, 0.2, 0.3}
    assert model.analytic_quantile(0.5) == pytest.approx(0.2)


def test_bad_traces_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        LatencyModel(LatencyConfig(kind="trace", trace_path=tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("0.1\nfast\n")
    with pytest.raises(ValueError, match="line 2: 'fast' is not a number of seconds"):
        LatencyModel(LatencyConfig(kind="trace", trace_path=bad))
    bad.write_text("0.1\n-2\n")
    with pytest.raises(ValueError, match="line 2: delay must be finite and >= 0"):
        LatencyModel(LatencyConfig(kind="trace", trace_path=bad))
    bad.write_text("# nothing\n")
    with pytest.raises(ValueError, match="holds no delays"):
        LatencyModel(LatencyConfig(kind="trace", trace_path=bad))


def test_config_errors_name_the_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="latency kind 'lognormal' needs sigma"):
        load_config(LatencyConfig, None, ["kind=lognormal", "median_s=0.2"])
    with pytest.raises(ConfigError, match="latency kind 'fixed' does not use median_s"):
        load_config(LatencyConfig, None, ["kind=fixed", "fixed_s=1", "median_s=0.2"])
    with pytest.raises(ConfigError, match="failure_prob: Input should be less than or equal to 1"):
        load_config(LatencyConfig, None, ["failure_prob=2"])
    with pytest.raises(ConfigError, match="kind: Input should be 'none', 'fixed', 'lognormal', 'pareto' or 'trace'"):
        load_config(LatencyConfig, None, ["kind=gamma"])
    path = tmp_path / "latency.yaml"
    path.write_text("kind: pareto\nscale_s: 0.05\nalpha: 1.5\nfailure_prob: 0.01\n")
    assert load_config(LatencyConfig, path).alpha == 1.5
