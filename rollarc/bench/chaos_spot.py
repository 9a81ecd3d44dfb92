"""``rollarc bench chaos --path spot``: t2i training with exploration on spot workers that loses one actor of each role.

One run of ``configs/t2i_spot.yaml`` (shortened), with its own preemption trace (nodes removed with and without
notice, ``configs/spot_trace.yaml``), during which the chaos killer also kills, with ``ray.kill(handle,
no_restart=False)`` (a crashed process, as Ray sees it), in this order:

- a spot worker whose node stays up (the oldest ``spotN-gM``): the fleet sees it dead, takes its node out and
  starts a replacement ``spot.replacement_s`` later; its job comes back when its lease expires;
- the queue holder (``SpotQueue``: the job queue, leases and weight references, on the head node): Ray restarts
  it empty, and the fleet puts back the last two weight versions and every job not yet collected
  (``rollarc.diffusion.queue_ledger``; a job the old queue had done but not handed over is redone);
- the t2i trainer (``T2ITrainer``): a new one loads the checkpoint of the step it was training from and trains
  that step again on the same samples (``rollarc.diffusion.trainer_loss``; the chaos run checkpoints every step).

Reported: ``lost_jobs`` and ``duplicate_jobs`` (the spot summary's: jobs launched and never handed back, and
done more than once by one queue), the restarts per role, the jobs redone after the queue's loss, the
preemptions, whether the run finished.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import ray

from rollarc.bench import chaos
from rollarc.diffusion.config import load_t2i_config
from rollarc.diffusion.spot_queue import QUEUE_NAME
from rollarc.runtime.t2i_entry import TRAINER_NAME, run_t2i

ROLES = ("spot", "queue", "trainer")  # killed in this order
CONFIG = "configs/t2i_spot.yaml"
QUICK = [  # the config's model (steps long enough for a kill to land inside one), barely pretrained
    "pretrain.checkpoint=artifacts/t2i/bench-chaos-spot-quick-base",
    "pretrain.steps=2",
    "pretrain.batch_size=8",
    "train.steps=12",  # the trace's preemptions slow the first steps; the last kills land in calm ones
    "train.prompts_per_step=2",
    "train.group_size=2",
    "train.eval_steps=3",
    "train.eval_every=8",
    "train.eval_prompts=2",
    "explore.candidates=4",
    "spot.lease_s=3.0",
    "spot.replacement_s=1.0",
    "run.tensorboard=false",
]
FULL = ["train.steps=24"]
CHAOS = ["run.checkpoint_every=1"]  # a lost trainer redoes at most the step it was in


def kill_spot(role: str) -> str:
    """Kill one live actor of ``role`` (``spot``, ``queue`` or ``trainer``) as a crash would; returns its name."""
    if role == "trainer":  # the newest (an older one is dead)
        serial = re.compile(rf"{TRAINER_NAME}-(\d+)$")
        found = [(int(m.group(1)), n) for n in ray.util.list_named_actors() if (m := serial.match(n))]
        names = [max(found)[1]] if found else []
    else:  # the fleet's actors are named "<name>@<fleet tag>": "spotN-gM@…" for workers, "spot-queue@…"
        pattern = re.compile(rf"{QUEUE_NAME}@" if role == "queue" else r"spot\d+-g\d+@")
        names = sorted(n for n in ray.util.list_named_actors() if pattern.match(n))
    if not names:
        raise ValueError(f"no live {role} actor")
    ray.kill(ray.get_actor(names[0]), no_restart=False)
    return names[0]


def report(run: dict[str, Any], kills: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's result from the chaos run's summary.json (its "spot" section: the fleet's counts)."""
    s = run["summary"]
    spot = s.get("spot", {})
    return {
        "path": "spot",
        "crashed": run["crashed"],
        "error": run["error"],
        "steps": s.get("steps"),
        "steps_planned": run["steps_planned"],
        "kills": kills,
        "restarts": {
            "spot": spot.get("crashes", 0),
            "queue": spot.get("queue_restarts", 0),
            "trainer": s.get("trainer_restarts", 0),
        },
        "jobs_submitted": spot.get("submitted"),
        "jobs_completed": spot.get("completed"),
        "lost_jobs": spot.get("lost_jobs"),
        "duplicate_jobs": spot.get("duplicate_jobs"),
        "redone_on_queue_loss": spot.get("redone_on_queue_loss"),
        "preemptions": spot.get("preemptions"),
        "requeued_on_expiry": spot.get("requeued_on_expiry"),
        "committed_on_notice": spot.get("committed_on_notice"),
        "notice_source": spot.get("notice_source"),
        "drain_notices": spot.get("drain_notices"),
        "rl_wall_s": s.get("rl_wall_s"),
    }


def run(config_path: str, overrides: list[str], runs: Path) -> dict[str, Any]:
    """The one chaos run and its report."""
    base = load_t2i_config(config_path, overrides)
    runs.mkdir(parents=True, exist_ok=True)
    killer = chaos.Killer(runs, chaos.kill_schedule(base.train.steps, ROLES), kill_spot)
    result = chaos.run_one(config_path, [*overrides, *CHAOS], "chaos", runs, killer, load_t2i_config, run_t2i)
    return report(result, killer.kills)


def table(result: dict[str, Any]) -> list[list[Any]]:
    return [
        *chaos.kill_rows(result),
        ["preemptions (the trace's)", result["preemptions"]],
        ["jobs redone after the queue's loss", result["redone_on_queue_loss"]],
        [
            "exploration jobs submitted / done / lost / duplicated",
            f"{result['jobs_submitted']} / {result['jobs_completed']} / {result['lost_jobs']} / "
            f"{result['duplicate_jobs']}",
        ],
    ]
