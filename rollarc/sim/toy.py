"""A small simulation setup with linear costs, for tests and for reasoning by hand.

Every cost is a plain number (no catalogue, no roofline), so expected times can be worked out on
paper: a turn of ``p`` prompt and ``r`` new tokens alone on an engine takes
``p · prefill_per_token + r · (decode_base + decode_per_seq · batch)``.
"""

from __future__ import annotations

from rollarc.cluster.distributions import Constant, Distribution
from rollarc.cluster.engine_cost import LinearEngine, LinearTrain
from rollarc.sim.setup import PoolBilling, RewardSetup, RolloutPoolSetup, SimSetup, TaskSetup


def toy_setup(
    *,
    groups: int = 2,
    group_size: int = 2,
    steps: int = 3,
    max_staleness: int = 0,
    engines: int = 1,
    max_batch: int = 64,
    prompt: Distribution | None = None,
    response: Distribution | None = None,
    turns: Distribution | None = None,
    env_latency: Distribution | None = None,
    reward_latency: Distribution | None = None,
    prefill_per_token_s: float = 0.001,
    decode_base_s: float = 0.01,
    decode_per_seq_s: float = 0.0,
    train_fixed_s: float = 2.0,
    train_per_token_s: float = 0.001,
    sync_s: float = 0.3,
    env_slots: int = 64,
    seed: int = 0,
) -> SimSetup:
    task = TaskSetup(
        name="toy",
        groups_per_step=groups,
        rollout_pool="rollout",
        first_prompt=prompt or Constant(value=10),
        prompt=prompt or Constant(value=10),
        response=response or Constant(value=100),
        turns=turns or Constant(value=1),
        env_latency=env_latency or Constant(value=0.5),
        reward_latency=reward_latency or Constant(value=0.2),
        reward_service=None,
    )
    engine = LinearEngine(
        prefill_per_token_s=prefill_per_token_s,
        request_overhead_s=0.0,
        decode_base_s=decode_base_s,
        decode_per_seq_s=decode_per_seq_s,
        decode_per_ctx_token_s=0.0,
        kv_capacity_tokens=float("inf"),
        max_batch=max_batch,
    )
    return SimSetup(
        name="toy",
        tasks=[task],
        rollout=[RolloutPoolSetup("rollout", engines, engine)],
        env_pool="env",
        env_slots=env_slots,
        train_pool="train",
        train=LinearTrain(train_fixed_s, train_per_token_s),
        reward=RewardSetup("dedicated", "reward", 0),
        sync_s=sync_s,
        swap_s=0.0,
        max_staleness=max_staleness,
        groups_per_step=groups,
        group_size=group_size,
        steps=steps,
        seed=seed,
        pools={name: PoolBilling(name, name, 1, 1.0) for name in ("rollout", "env", "train", "reward")},
    )
