"""Weight sync equality, and the router's failover when rollout replicas die."""

from __future__ import annotations

import time

import pytest
import ray
import torch
from ray.exceptions import RayTaskError
from transformers import AutoModelForCausalLM

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.engine.types import SamplingParams
from rollarc.models import load_tokenizer
from rollarc.policy.routing import NoReplicaError
from rollarc.runtime.env_worker import GroupSpec
from rollarc.runtime.ray_cluster import start_ray, stop_ray
from rollarc.runtime.workers import Workers
from tests.integration.test_runtime import config

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.fixture
def workers(nano_policy_dir, tmp_path):
    def make(**sections):
        cfg = config(nano_policy_dir, tmp_path, **sections)
        start_ray(cfg.cluster)
        return Workers(cfg, str(nano_policy_dir))

    yield make
    stop_ray()


@pytest.mark.parametrize(
    "sync", [{"method": "full"}, {"method": "delta", "dtype": "bfloat16"}], ids=["full-fp32", "delta-bf16"]
)
def test_engine_greedy_after_sync_equals_the_trainer_model(workers, nano_policy_dir, tmp_path, sync):
    w = workers(train={"lr": 0.05}, sync=sync)
    tok = load_tokenizer(nano_policy_dir)
    renderer = ChatRenderer(tok)
    prompt = renderer.prompt_ids([Message("user", "t0..")])
    before = ray.get(w.router.generate.remote(prompt, GREEDY, None))
    group = scripted_group(prompt, renderer)
    for step in range(3):  # a large learning rate, so the greedy reply really changes
        ray.get(w.trainer.train_step.remote([group], step))
    payload = ray.get(w.trainer.publish.remote())
    assert payload.version == 3
    ray.get(w.sync_all(payload))
    after = ray.get(w.router.generate.remote(prompt, GREEDY, None))
    assert after.token_versions == [3] * 12 and before.token_versions == [0] * 12
    ray.get(w.trainer.save_checkpoint.remote(str(tmp_path / "ck"), {}))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ck" / "policy")
    if sync.get("dtype") == "bfloat16":  # the rollout side runs the bf16 wire weights, widened exactly
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    expected = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, min_new_tokens=12)
    assert after.token_ids == expected[0, len(prompt) :].tolist()
    assert after.token_ids != before.token_ids  # the update changed what the engine generates


def test_router_fails_over_when_a_replica_dies_and_errors_when_none_is_left(workers):
    w = workers(
        cluster={"roles": {"rollout": {"pool": "compute", "replicas": 2}, "train": {"pool": "compute", "units": 0}}}
    )
    assert sorted(ray.get(w.router.alive.remote())) == ["rollout-0", "rollout-1"]
    ray.kill(w.rollout["rollout-0"])
    results = ray.get([w.router.generate.remote([3, 40, 5, 4], GREEDY, f"k{i}") for i in range(6)])
    assert all(r.finish_reason == "length" for r in results)
    assert ray.get(w.router.alive.remote()) == ["rollout-1"]
    assert ray.get(w.router.routing_stats.remote())["dead_replicas"] == ["rollout-0"]
    ray.kill(w.rollout["rollout-1"])
    with pytest.raises(RayTaskError) as err:
        ray.get(w.router.generate.remote([3, 40, 5, 4], GREEDY, "last"))
    assert isinstance(err.value, NoReplicaError) or "no rollout replica" in str(err.value)


def test_a_router_killed_mid_batch_is_not_replayed_and_the_env_worker_sends_the_unanswered_turns_again(workers):
    # Regression (CI 2026-12-03): Ray replayed a restarted router's batch stream and skipped the items already read,
    # so turns were left unanswered and their trajectories failed. The batch is held at the suspended router's door,
    # so the kill lands while the stream is open; a replayed stream would answer every turn with no resend.
    w = workers(train={"group_size": 4})
    ray.get(w.router.suspend.remote())
    spec = GroupSpec("g0", 0, "scripted", seed=7, size=4, redundancy=0, sampling_seed=11, step=0)
    ref = w.env[w.alive_env_names()[0]].run_group.remote(spec)
    deadline = time.monotonic() + 120
    while ray.get(w.router.routing_stats.remote())["held_turns"] < 4:
        assert time.monotonic() < deadline, "the group's first turns never reached the router"
        time.sleep(0.05)
    ray.kill(w.router, no_restart=False)
    while not w.heal(0)["router"]:  # the restarted router opens once the replicas are registered again
        assert time.monotonic() < deadline, "the router was not restarted"
        time.sleep(0.05)
    result = ray.get(ref, timeout=120)
    assert [t.failure_reason for t in result.failed] == []
    assert len(result.trajectories) == 4 and all(t.generated_tokens > 0 for t in result.trajectories)
    assert result.router_resends >= 1 and w.router_restarts == 1


def scripted_group(prompt: list[int], renderer: ChatRenderer) -> list[Trajectory]:
    """Four fixed replies to one prompt with rewards 0..3: a group that makes the trainer change the weights."""
    group = []
    for i, action in enumerate(["UU", "D", "LLL", "R"]):
        seg = Segment()
        seg.extend_context(prompt)
        reply = renderer.encode_reply(action)
        seg.extend_generated(reply, [-2.0] * len(reply), [0] * len(reply))
        group.append(Trajectory(traj_id=f"t{i}", task="scripted", seed=0, segments=[seg], reward=float(i)))
    return group
