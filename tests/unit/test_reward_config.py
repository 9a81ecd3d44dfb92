"""The reward section: kinds, stateless rule, autoscaling bounds, placement on the cluster's pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollarc.config import ClusterConfig, load_train_config
from rollarc.config.io import ConfigError, load_config
from rollarc.rewards.config import AutoscalingConfig, RewardConfig, ServiceCostConfig, placement_problems

REPO = Path(__file__).resolve().parents[2]


def test_rule_is_the_default():
    assert RewardConfig().kind == "rule"


def test_serverless_needs_a_stateless_reward():
    with pytest.raises(ConfigError, match="stateless"):
        load_config(RewardConfig, overrides=["kind=serverless", "stateless=false"])
    assert RewardConfig(kind="dedicated", stateless=False).kind == "dedicated"


def test_unknown_kind_and_key_are_named():
    with pytest.raises(ConfigError, match="kind") as err:
        load_config(RewardConfig, overrides=["kind=lambda"])
    assert "serverless" in str(err.value)
    with pytest.raises(ConfigError, match=r"autoscaling.max_replica: unknown key"):
        load_config(RewardConfig, overrides=["autoscaling.max_replica=3"])


def test_autoscaling_bounds():
    with pytest.raises(ValueError, match="max_replicas"):
        AutoscalingConfig(min_replicas=3, max_replicas=2)
    with pytest.raises(ValueError, match="initial_replicas"):
        AutoscalingConfig(min_replicas=0, max_replicas=2, initial_replicas=3)
    options = AutoscalingConfig(min_replicas=0, max_replicas=2, target_ongoing_requests=3).serve_options()
    assert options["min_replicas"] == 0 and options["max_replicas"] == 2 and options["target_ongoing_requests"] == 3
    assert "initial_replicas" not in options  # unset: Serve starts min_replicas


def test_service_cost_is_fixed_plus_per_item():
    assert ServiceCostConfig(fixed_s=0.2, per_item_s=0.05).seconds(4) == pytest.approx(0.4)
    assert ServiceCostConfig().seconds(100) == 0.0


def cluster(reward_role: dict) -> ClusterConfig:
    return ClusterConfig(
        pools={"compute": {"count": 2}, "cpu": {"count": 2}, "reward": {"count": 3}}, roles={"reward": reward_role}
    )


def test_dedicated_pool_needs_replicas():
    problems = placement_problems(RewardConfig(kind="dedicated"), cluster({"pool": "reward", "replicas": 0}))
    assert problems and "cluster.roles.reward.replicas >= 1" in problems[0]
    assert placement_problems(RewardConfig(kind="dedicated"), cluster({"pool": "reward", "replicas": 2})) == []


def test_serverless_sizes_itself_and_must_fit_its_pool():
    reward = RewardConfig(kind="serverless", autoscaling={"max_replicas": 3})
    assert placement_problems(reward, cluster({"pool": "reward", "replicas": 0})) == []
    (problem,) = placement_problems(reward, cluster({"pool": "reward", "replicas": 1}))
    assert "set cluster.roles.reward.replicas to 0" in problem
    too_big = RewardConfig(kind="serverless", autoscaling={"max_replicas": 4})
    (problem,) = placement_problems(too_big, cluster({"pool": "reward", "replicas": 0}))
    assert "does not fit in cluster.pools.reward (count 3" in problem
    # the env role already uses 1 of the 2 cpu units: 2 reward replicas of 1 unit do not fit there
    shared = RewardConfig(kind="serverless", autoscaling={"max_replicas": 2})
    (problem,) = placement_problems(shared, cluster({"pool": "cpu", "replicas": 0}))
    assert "other roles use 1" in problem


def test_shipped_config_is_serverless_and_placeable():
    cfg = load_train_config(REPO / "configs" / "serverless_reward.yaml")
    assert cfg.reward.kind == "serverless" and cfg.reward.autoscaling.min_replicas == 0
    assert cfg.reward.resolved_model_path(cfg.name) == "artifacts/reward/serverless_reward"
    assert placement_problems(cfg.reward, cfg.cluster) == []
