"""The pure parts of ``rollarc.runtime.rose_setup`` and ``rose.pinning``: the training config a ROSE set-up runs,
the token-version check of every turn, and pinning every thread of a process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rollarc.engine.types import Completion
from rollarc.rose.config import RoseConfig
from rollarc.runtime.rose_setup import TASK, PolicySpec, RolloutShape, training_config, versions_ok


def completion(tokens: int, versions: list[int], logprobs: int | None = None) -> Completion:
    n = tokens if logprobs is None else logprobs
    return Completion(
        request_id="r",
        prompt_len=4,
        token_ids=[1] * tokens,
        logprobs=[-0.5] * n,
        token_versions=versions,
        version=0,
        finish_reason="length",
    )


def test_the_longest_turn_is_the_last_prompt_plus_its_output() -> None:
    # 48 prompt + 3 x 16 generated + 2 x 8 observed (none after the last turn)
    assert RolloutShape(turns=3, prompt_tokens=48, gen_tokens=16, obs_tokens=8).longest == 112


def test_training_config_carries_the_rose_settings_into_harvest_and_the_engine() -> None:
    rose = RoseConfig.model_validate(
        {"margin": 0.3, "memory_tokens": 2048, "serving_cores": [0, 1], "dedicated_first": False, "lend_after_s": 0.1}
    )
    policy = PolicySpec(max_num_seqs=8, max_model_len=256, prefix_cache_tokens=0)
    cfg = training_config(rose, policy, RolloutShape())
    assert cfg.harvest is not None
    assert (cfg.harvest.replicas, cfg.harvest.margin, cfg.harvest.memory_tokens) == (1, 0.3, 2048)
    assert (cfg.harvest.threads, cfg.harvest.dedicated_first, cfg.harvest.lend_after_s) == (2, False, 0.1)
    assert cfg.harvest.slo == rose.slo and cfg.harvest.serving == rose.serving
    assert (cfg.engine.max_num_seqs, cfg.engine.max_model_len, cfg.engine.prefix_cache_tokens) == (8, 256, 0)
    assert [t.name for t in cfg.tasks] == [TASK] and cfg.tasks[0].agent.context_limit == 112


def test_a_trajectory_longer_than_the_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="over the policy's max_model_len 64"):
        training_config(RoseConfig(), PolicySpec(max_model_len=64), RolloutShape())


def test_versions_ok_wants_one_version_zero_and_one_logprob_per_token_within_the_budget() -> None:
    assert versions_ok(completion(3, [0, 0, 0]), max_tokens=4)
    assert versions_ok(completion(0, []), max_tokens=4)  # a turn that sampled end-of-sequence at once
    assert not versions_ok(completion(3, [0, 0]), max_tokens=4)  # a token without its version
    assert not versions_ok(completion(3, [0, 1, 0]), max_tokens=4)  # a version nobody published
    assert not versions_ok(completion(3, [0, 0, 0], logprobs=2), max_tokens=4)
    assert not versions_ok(completion(5, [0] * 5), max_tokens=4)


PIN_EVERY_THREAD = """
import json, os, threading
from rollarc.rose.pinning import pin
stop = threading.Event()
early = threading.Thread(target=stop.wait)
early.start()  # a thread that exists before pin, as a Ray actor's do
pinned = pin([{core}])
print(json.dumps([pinned, [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]]))
stop.set()
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"), reason="Linux only")
def test_pin_pins_every_thread_of_the_process_not_only_the_caller() -> None:
    import json

    core = max(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-c", PIN_EVERY_THREAD.format(core=core)], capture_output=True, text=True, check=True
    )
    pinned, threads = json.loads(out.stdout.strip().splitlines()[-1])
    assert pinned == [core]
    assert len(threads) >= 2 and all(affinity == [core] for affinity in threads)


PIN_ANOTHER_AND_RESTORE = """
import json, os, subprocess, sys, threading
from rollarc.rose.pinning import pin_process, pinned_here
child = subprocess.Popen([sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"])
import time; time.sleep(1.0)  # its second thread has started
other = pin_process(child.pid, [{core}])
child_threads = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{{child.pid}}/task")]
child.kill()
before = sorted(os.sched_getaffinity(0))
with pinned_here([{core}]) as here:
    inside = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
after = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
print(json.dumps([other, child_threads, here, inside, before, after]))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"), reason="Linux only")
def test_pin_process_pins_another_process_and_pinned_here_restores_the_affinity() -> None:
    """The rollout side's Router (another process) and the driver (for a block) go to the rollout cores."""
    import json

    core = max(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-c", PIN_ANOTHER_AND_RESTORE.format(core=core)], capture_output=True, text=True, check=True
    )
    other, child_threads, here, inside, before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert other == [core] and len(child_threads) >= 2 and all(a == [core] for a in child_threads)
    assert here == [core] and all(a == [core] for a in inside)
    assert all(a == before for a in after)  # every thread back where it was
