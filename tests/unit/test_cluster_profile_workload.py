"""Measured task profiles to workload distributions: means and quantiles kept, hand-computed ends."""

from dataclasses import replace

import numpy as np
import pytest

from rollarc.cluster.distributions import Constant, Empirical
from rollarc.cluster.profile_workload import distribution_from_summary, uncached_share, workload_from_profiles
from rollarc.cluster.workload import Efficiency, ModelSpec
from rollarc.config.io import ConfigError
from rollarc.report.run_dir import QuantileSummary, TaskProfile, TaskProfiles, from_dict

MODEL = ModelSpec(total_params=1e9, layers=8, hidden_size=1024, kv_heads=8, head_dim=128)


def summary(mean, p50, p90, p99, n=100):
    return QuantileSummary(mean=mean, p50=p50, p90=p90, p99=p99, n=n)


def test_equal_quantiles_make_a_constant():
    assert distribution_from_summary(summary(7, 7, 7, 7)) == Constant(value=7)
    assert distribution_from_summary(QuantileSummary(n=0)) == Constant(value=0)  # nothing measured


def test_mean_is_matched_by_the_low_end():
    # Quantile function through (0, lo) (.5, 10) (.9, 20) (.99, 30) (1, 30): its mean is
    # 0.25·(lo + 10) + 0.4·15 + 0.09·25 + 0.01·30 = 0.25·lo + 11.05, so a mean of 12 needs lo = 3.8.
    dist = distribution_from_summary(summary(12, 10, 20, 30))
    assert isinstance(dist, Empirical)
    values = np.array(dist.values)
    assert values.mean() == pytest.approx(12.0)
    assert values[0] == pytest.approx(3.8 + 6.2 * 0.0025 / 0.5)  # first grid point, q = 0.0025
    assert values.max() == pytest.approx(30.0)
    assert dist.quantile(0.5) == pytest.approx(10, abs=0.1) and dist.quantile(0.9) == pytest.approx(20, abs=0.1)


def test_a_heavy_tail_raises_the_high_end():
    # lo = p50 = 10: 0.25·20 + 6 + 2.25 + 0.005·(30 + hi) = 100  ->  hi = 17,320.
    values = np.array(distribution_from_summary(summary(100, 10, 20, 30)).values)
    assert values.mean() == pytest.approx(100.0)
    assert values.min() == pytest.approx(10.0)
    assert values.max() == pytest.approx(30 + 0.75 * (17_320 - 30))  # last grid point, q = 0.9975


def test_bad_summaries_are_named():
    with pytest.raises(ConfigError, match=r"tasks\.a\.turns"):
        distribution_from_summary(summary(3, 5, 4, 6), "tasks.a.turns")
    with pytest.raises(ConfigError, match="finite"):
        distribution_from_summary(QuantileSummary(mean=1, n=3), "x")  # quantiles missing


def profile(prompt=100.0, cached=150.0, turns=2.0, new=10.0):
    return TaskProfile(
        turns=summary(turns, turns, turns, turns),
        prompt_tokens_per_turn=summary(prompt, prompt, prompt, prompt),
        new_tokens_per_turn=summary(new, new, new, new),
        cached_tokens=summary(cached, cached, cached, cached),
        env_step_s=summary(0.01, 0.01, 0.01, 0.01),
        reward_s=QuantileSummary(n=0),
    )


def test_workload_from_profiles_prefills_only_uncached_tokens():
    profiles = TaskProfiles(
        tasks={"a": profile(), "b": profile(prompt=40, cached=0, turns=1, new=300)},
        groups_per_step=6,
        group_size=4,
        max_staleness=2,
        weights={"a": 2.0, "b": 1.0},
    )
    assert uncached_share(profiles.tasks["a"]) == pytest.approx(0.25)  # 1 - 150 / (100 · 2)
    wl = workload_from_profiles(profiles, MODEL, Efficiency())
    a, b = wl.task("a"), wl.task("b")
    assert a.prompt_tokens.mean() == pytest.approx(25.0) and b.prompt_tokens.mean() == pytest.approx(40.0)
    assert a.turns.mean() == 2 and b.response_tokens.mean() == 300
    assert a.reward.latency_s.mean() == 0 and a.env_latency_s.mean() == pytest.approx(0.01)
    assert wl.groups_per_task() == {"a": 4, "b": 2}
    assert (wl.batch.group_size, wl.batch.max_staleness) == (4, 2)
    assert workload_from_profiles(profiles, MODEL, Efficiency(), groups_per_step=60).batch.groups_per_step == 60


def test_unprofiled_tasks_are_errors():
    profiles = TaskProfiles(
        tasks={"a": profile()}, groups_per_step=2, group_size=2, max_staleness=0, weights={"a": 1.0, "b": 1.0}
    )
    with pytest.raises(ConfigError, match="b have a weight but no profile"):
        workload_from_profiles(profiles, MODEL, Efficiency())
    empty = replace(profile(), turns=QuantileSummary(n=0))
    with pytest.raises(ConfigError, match=r"tasks\.a has no completed trajectory"):
        workload_from_profiles(replace(profiles, tasks={"a": empty}, weights={"a": 1.0}), MODEL, Efficiency())


def test_a_profile_missing_a_measured_field_is_named_on_read():
    data = {
        "tasks": {"a": {"turns": {"n": 0}}},
        "groups_per_step": 2,
        "group_size": 2,
        "max_staleness": 0,
        "weights": {},
    }
    with pytest.raises(ConfigError, match=r"task_profiles\.json: tasks\.a: missing key 'prompt_tokens_per_turn'"):
        from_dict(TaskProfiles, data, "task_profiles.json")
