"""Serverless reward autoscaling and scenario validation."""

from pathlib import Path

import pytest
import simpy
import yaml

from rollarc.config.io import ConfigError
from rollarc.sim.scenario import load_scenario
from rollarc.sim.serverless import ServerlessPool
from rollarc.sim.setup import build_setup

REPO = Path(__file__).resolve().parents[2]


def test_serverless_cold_start_then_warm_reuse_then_release():
    env = simpy.Environment()
    pool = ServerlessPool(env, cold_start_s=10, keep_alive_s=5, max_instances=4)
    done = []
    pool.request(2).callbacks.append(lambda e: done.append(env.now))  # cold: 10 + 2 = 12

    def later():
        yield env.timeout(13)
        yield pool.request(1)  # warm instance, idle since 12: 13 + 1 = 14
        done.append(env.now)

    env.process(later())
    env.run()
    assert done == [12, 14]
    assert pool.cold_starts == 1
    # released 5 s after its last request (14 + 5 = 19): billed from 0 to 19
    assert pool.billed_seconds(env.now) == pytest.approx(19)
    assert pool.instances == 0


def test_serverless_scales_out_only_when_the_queue_outlasts_a_cold_start():
    env = simpy.Environment()
    pool = ServerlessPool(env, cold_start_s=10, keep_alive_s=100, max_instances=8)
    for _ in range(3):
        pool.request(1)  # 3 s of work queued on 1 starting instance: not worth a second one
    assert pool.instances == 1
    for _ in range(30):
        pool.request(1)  # 33 s of work over 1 instance > 10 s: start more
    assert pool.instances > 1
    env.run()
    assert pool.served == 33


def _scenario(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((REPO / "configs/sim/rollarc_128.yaml").read_text())
    data["catalogue"] = str(REPO / "configs/cluster/hardware.yaml")
    data["workload"] = str(REPO / "configs/cluster/workloads/moe30b_agentic.yaml")
    data.update(changes)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_scenario_errors_name_the_bad_key(tmp_path):
    with pytest.raises(ConfigError, match="stepz: unknown key"):
        load_scenario(_scenario(tmp_path, stepz=3))
    with pytest.raises(ConfigError, match="colocated"):
        load_scenario(_scenario(tmp_path, placement="colocated"))
    path = _scenario(tmp_path)
    with pytest.raises(ConfigError, match="roles use 40 units but the pool has count 32"):
        build_setup(load_scenario(path, ["cluster.roles.train.replicas=24"]))
    with pytest.raises(ConfigError, match="unknown device kind 'b200'"):
        build_setup(load_scenario(path, ["cluster.pools.h20.kind=b200"]))
    with pytest.raises(ConfigError, match=r"task swe can reach .* cap its distributions"):
        build_setup(
            load_scenario(
                path,
                [
                    "cluster.roles.rollout=[{pool: h800, replicas: 16, units: 1}, {pool: h20, replicas: 96}]",
                    "tasks=[{name: swe, rollout_pool: h800}, {name: webqa, rollout_pool: h800}, {name: math, rollout_pool: h20}]",
                ],
            )
        )


def test_equal_cost_baselines_really_are_equal_cost():
    for ours, base in [
        ("rollarc_3072.yaml", "monolithic_h800_3072.yaml"),
        ("rollarc_128.yaml", "monolithic_h800_128.yaml"),
    ]:
        a = build_setup(load_scenario(REPO / "configs/sim" / ours))
        b = build_setup(load_scenario(REPO / "configs/sim" / base))
        assert b.price_per_hour == pytest.approx(a.price_per_hour, rel=0.01)
    big = build_setup(load_scenario(REPO / "configs/sim/rollarc_3072.yaml"))
    assert sum(p.count for p in big.pools.values() if p.kind != "cpu") == 3072
