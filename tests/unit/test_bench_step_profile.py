"""The profile breakdown of ``rollarc bench step``'s docs: each sampled stack goes to the phase its innermost frame names."""

from __future__ import annotations

import pytest

from rollarc.bench.step_profile import breakdown, phase_of

ROOT = 'process 1:"python rollarc train"'
RAY = "Worker.main_loop (ray/_private/worker.py:1069)"
TORCH = "Linear.forward (torch/nn/modules/linear.py:134)"


@pytest.mark.parametrize(
    ("frames", "phase"),
    [
        # Ray workers report rollarc's files bare (relative to their cwd); the driver with the package path.
        (
            [
                ROOT,
                RAY,
                "TrainWorker.train_step (train_worker.py:55)",
                "PolicyTrainer.train_step (policy_trainer.py:151)",
                TORCH,
            ],
            "training",
        ),
        (
            [
                ROOT,
                "_run (rollarc/engine/async_engine.py:170)",
                "step (rollarc/engine/engine.py:200)",
                "decode (rollarc/engine/model_runner.py:158)",
                TORCH,
            ],
            "forward passes",
        ),
        ([ROOT, "step (engine.py:200)", "_sample (engine.py:360)", "sample (sampling.py:90)"], "sampling"),
        ([ROOT, "step (engine.py:200)", "schedule (scheduler.py:40)"], "engine scheduling"),
        (
            [ROOT, RAY, "Router.generate (router.py:149)", "ActorHandle._actor_method_call (ray/actor.py:2578)"],
            "Ray calls",
        ),
        (
            [ROOT, "run (runner.py:120)", "prompt_ids (chat.py:40)", "render (jinja2/environment.py:1)"],
            "tokenisation and chat templating",
        ),
        ([ROOT, "run (runner.py:120)", "step (reverse_word_env.py:50)"], "env steps"),
        ([ROOT, "publish (train_worker.py:74)", "latest_payload (train_worker.py:125)"], "sync"),
        ([ROOT, RAY], "idle"),
        (
            [ROOT, "<module> (rollarc/cli/__init__.py:1)", "_find_and_load (<frozen importlib._bootstrap>:1)"],
            "start-up",
        ),
        ([ROOT, "mystery (somewhere.py:1)"], "other"),
    ],
)
def test_each_stack_goes_to_the_phase_its_innermost_named_frame_gives(frames, phase):
    assert phase_of(frames) == phase


def test_breakdown_leaves_idle_and_start_up_out_and_sums_to_one():
    lines = [
        f"{ROOT};PolicyTrainer.train_step (policy_trainer.py:151);{TORCH} 6\n",
        f"{ROOT};decode (model_runner.py:158);{TORCH} 2\n",
        f"{ROOT};{RAY} 50\n",  # idle: a Ray worker waiting for a task
        f"{ROOT};_find_and_load (<frozen importlib._bootstrap>:1) 30\n",
        "not a profile line\n",
    ]
    assert breakdown(lines) == {"training": 0.75, "forward passes": 0.25}
