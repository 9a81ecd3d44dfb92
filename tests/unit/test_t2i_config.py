"""The t2i config: `kind: t2i` dispatch, the spot-pool rule for explorers, one-line errors."""

import pytest

from rollarc.cli import main
from rollarc.config.io import ConfigError
from rollarc.diffusion.config import T2IConfig, is_t2i, load_t2i_config


def test_kind_selects_the_t2i_config(tmp_path):
    assert is_t2i("configs/t2i_quickstart.yaml")
    assert not is_t2i("configs/quickstart.yaml")
    cfg = load_t2i_config("configs/t2i_quickstart.yaml", ["train.steps=3"])
    assert cfg.train.steps == 3 and cfg.cluster.pools["spot"].spot


def test_the_explorer_must_run_on_a_spot_pool():
    with pytest.raises(ConfigError, match=r"must be marked spot: true \(cluster.pools.compute.spot\)"):
        load_t2i_config("configs/t2i_quickstart.yaml", ["explore.enabled=true", "cluster.roles.explorer.pool=compute"])
    with pytest.raises(ValueError, match=r"explore\.planner contrast needs explore\.enabled"):
        T2IConfig(kind="t2i", explore={"planner": "contrast"})
    with pytest.raises(ValueError, match="ucb1"):  # the UCB1 bandit was removed (docs/diffusion.md)
        T2IConfig(kind="t2i", explore={"enabled": True, "planner": "ucb1"})
    with pytest.raises(ValueError, match="one replica per role"):
        T2IConfig(kind="t2i", cluster={"roles": {"sampler": {"pool": "compute", "replicas": 2}}})


def test_unknown_keys_and_tasks_fail_in_one_line(capsys):
    assert main(["config", "show", "configs/t2i_quickstart.yaml", "train.stepz=3"]) == 2
    assert "train.stepz: unknown key" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown tasks"):
        load_t2i_config("configs/t2i_quickstart.yaml", ["tasks=[paint]"])


def test_a_planner_needs_room_for_one_chunk_beyond_the_group():
    with pytest.raises(ValueError, match=r"group_size \+ explore\.chunk"):
        T2IConfig(
            kind="t2i",
            train={"group_size": 8},
            explore={"enabled": True, "planner": "contrast", "candidates": 10, "chunk": 4},
        )


def test_the_sp_degree_must_divide_the_heads_and_the_tokens():
    assert T2IConfig(kind="t2i", cluster={"sp_degree": 4}).cluster.sp_degree == 4  # 4 heads, 64 tokens
    with pytest.raises(ValueError, match=r"cluster\.sp_degree 3 must divide model\.heads 4 and the 64 image tokens"):
        T2IConfig(kind="t2i", cluster={"sp_degree": 3})
    with pytest.raises(ValueError, match=r"cluster\.sp_degree 8 must divide model\.heads 4"):
        T2IConfig(kind="t2i", cluster={"sp_degree": 8})


def test_the_drain_poll_must_fall_inside_the_notice():
    with pytest.raises(ValueError, match=r"spot\.drain_poll_s 2 is not below spot\.notice_s 1"):
        T2IConfig(kind="t2i", spot={"notice_s": 1.0, "drain_poll_s": 2.0})
    assert T2IConfig(kind="t2i", spot={"notice_s": 0.0, "drain_poll_s": 2.0}).spot.drain_poll_s == 2.0  # no notice
