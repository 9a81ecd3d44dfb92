"""Simulator cases with an answer known in advance."""

import numpy as np
import pytest
import simpy

from rollarc.cluster.distributions import Constant, LogNormal
from rollarc.cluster.engine_cost import LinearEngine
from rollarc.sim.engine import SimEngine
from rollarc.sim.servers import FifoServers
from rollarc.sim.simulator import simulate
from rollarc.sim.toy import toy_setup


def test_mm1_queue_mean_sojourn_matches_theory():
    # M/M/1 with lambda = 0.8, mu = 1: mean time in system 1 / (mu - lambda) = 5 s.
    env = simpy.Environment()
    servers = FifoServers(env, 1, "m/m/1")
    rng = np.random.default_rng(0)
    n = 60_000
    arrivals = np.cumsum(rng.exponential(1 / 0.8, n))
    services = rng.exponential(1.0, n)
    sojourn = []

    def customer(at, service):
        yield env.timeout(at - env.now)
        start = env.now
        yield servers.request(service)
        sojourn.append(env.now - start)

    def source():
        for at, service in zip(arrivals, services, strict=True):
            yield env.timeout(at - env.now)
            env.process(customer(at, service))

    env.process(source())
    env.run()
    assert np.mean(sojourn[5000:]) == pytest.approx(5.0, rel=0.08)


def test_engine_with_batch_one_is_a_deterministic_fifo_queue():
    # max_batch 1: three 100-token turns submitted at t=0 each take 10*0.001 prefill + 100*0.01 decode = 1.01 s.
    env = simpy.Environment()
    engine = SimEngine(env, LinearEngine(0.001, 0.0, 0.01, 0.0, 0.0, float("inf"), max_batch=1), "e")
    done = []
    for _ in range(3):
        engine.submit(10, 0, 100).callbacks.append(lambda e: done.append(env.now))
    env.run()
    assert done == pytest.approx([1.01, 2.02, 3.03])


def test_engine_batches_continuously_and_late_joiner_slows_the_batch():
    # per iteration 0.01 + 0.01*batch. A: 100 tokens from t=0 (no prefill cost).
    # B joins at t=0.5: A has done 0.5/0.02 = 25 iterations; both then run at 0.03 s/iter.
    # A finishes its 75 remaining at 0.5 + 2.25 = 2.75; B has 25 left at 0.02 -> 3.25.
    env = simpy.Environment()
    engine = SimEngine(env, LinearEngine(0.0, 0.0, 0.01, 0.01, 0.0, float("inf"), max_batch=8), "e")
    done = {}
    engine.submit(0, 0, 100).callbacks.append(lambda e: done.setdefault("a", env.now))

    def late():
        yield env.timeout(0.5)
        yield engine.submit(0, 0, 100)
        done["b"] = env.now

    env.process(late())
    env.run()
    assert done["a"] == pytest.approx(2.75)
    assert done["b"] == pytest.approx(3.25)


def test_engine_kv_limit_queues_turns_that_do_not_fit():
    # capacity 250 tokens: two turns of 10+100 fit (220), the third waits for the first to finish.
    env = simpy.Environment()
    engine = SimEngine(env, LinearEngine(0.0, 0.0, 0.01, 0.0, 0.0, 250, max_batch=8), "e")
    done = []
    for _ in range(3):
        engine.submit(10, 0, 100).callbacks.append(lambda e: done.append(env.now))
    env.run()
    assert done == pytest.approx([1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="KV tokens"):
        engine.submit(200, 0, 100)


def test_sync_without_variance_step_time_is_the_sum_of_phases():
    # 2 groups x 2 = 4 trajectories, one engine: prefill 4 x 10 x 0.001 = 0.04, decode 100 x 0.01 = 1.0,
    # env 0.5, reward 0.2, train 2 + 0.001 x 440 = 2.44, sync 0.3  -> 4.48 s per step.
    result = simulate(toy_setup(steps=4))
    assert result.step_time_s == pytest.approx(4.48)
    assert np.diff([0.0, *result.step_ends]) == pytest.approx([4.48] * 4)
    assert result.trajectories == 16 and result.dropped_groups == 0 and result.mean_staleness == 0


def test_async_overlaps_training_and_respects_the_staleness_bound():
    sync = simulate(toy_setup(steps=6, response=LogNormal(mean=100, sigma=0.5, max=400)))
    for k in (1, 2):
        result = simulate(toy_setup(steps=6, max_staleness=k, response=LogNormal(mean=100, sigma=0.5, max=400)))
        assert result.step_time_s < sync.step_time_s
        assert 0 < result.mean_staleness <= k
        assert sum(result.dropped_by_task.values()) == result.dropped_groups
        assert result.trajectories == 6 * 4


def test_multi_turn_trajectory_alternates_generate_and_env():
    # one trajectory of 3 turns: each turn 10 prompt tokens (0.01 s) + 100 decode (1 s), env 0.5 after each:
    # 3 x 1.51 = 4.53, reward 0.2 -> 4.73; train 2 + 0.001 x (3 x 110) = 2.33; sync 0.3 -> 7.36
    result = simulate(toy_setup(groups=1, group_size=1, steps=1, turns=Constant(value=3)))
    assert result.step_time_s == pytest.approx(7.36)
