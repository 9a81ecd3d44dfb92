"""``train.eval_temperature``: held-out evaluation is greedy at 0 and samples, with fixed seeds, above 0."""

from __future__ import annotations

import asyncio

from rollarc.agent.local_eval import heldout_specs
from rollarc.agent.loop import turn_seed
from rollarc.agent.runner import EpisodeRunner
from rollarc.config import SamplingConfig
from tests.unit.test_agent_loop import RENDERER, ScriptedEngine, task


def test_zero_is_greedy_and_above_zero_samples_with_the_same_seeds_in_every_evaluation():
    cfg = task(turns=1)
    greedy = heldout_specs([cfg], 2, seed_base=100)
    sampled = heldout_specs([cfg], 2, seed_base=100, prefix="eval", temperature=0.7)
    assert [(s.greedy, s.temperature, s.sampling_seed) for s in greedy] == [(True, None, None)] * 2
    assert [(s.greedy, s.temperature, s.sampling_seed) for s in sampled] == [(False, 0.7, 100), (False, 0.7, 101)]
    assert heldout_specs([cfg], 2, seed_base=100, prefix="eval", temperature=0.7) == sampled
    engine = ScriptedEngine()

    async def go():
        runner = EpisodeRunner({cfg.name: cfg}, RENDERER, engine, SamplingConfig(temperature=1.0, top_k=5), 2)
        for spec in [*greedy[:1], *sampled[:1]]:
            await runner.run(spec)
        runner.close()

    asyncio.run(go())
    greedy_params, sampled_params = engine.params
    assert (greedy_params.temperature, greedy_params.top_k) == (0.0, 0)
    assert (sampled_params.temperature, sampled_params.top_k) == (0.7, 5)  # the rollout's top_k, eval's temperature
    assert sampled_params.seed == turn_seed(100, "eval-0", 0)
