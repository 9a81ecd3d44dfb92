"""``rollarc bench chaos --path harvest``: a run on borrowed serving capacity that loses one actor of every role.

One run of ``configs/harvest.yaml`` (shortened), from its SFT warm start, during which one actor of each role
is killed in turn with ``ray.kill(handle, no_restart=False)`` (a crash or a lost node, as Ray sees it): an
EnvWorker, the dedicated rollout replica, a co-serving replica (the borrowed site: the oldest ``borrowed-N``),
the router, then the trainer. The harvest pool is no actor: it is the driver's object (``HarvestPool``), so
its loss is the driver's, the whole run's, which ``--resume`` covers; there is nothing of it to kill apart.

A co-serving replica replays its serving trace inside itself, so its death takes with it the serving
requests it had been handed and not finished (``harvest.serving_lost``: submitted minus served at its last
headroom report, a lower bound by at most one poll's arrivals); its replacement replays the trace from the
start. No clean run and no held-out evaluation: what is measured is that nothing is lost, not learning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollarc.bench import chaos
from rollarc.runtime.entry import initial_policy

# killed in this order
ROLES = ("env", "rollout", "coserving", "router", "train")
CONFIG = "configs/harvest.yaml"
QUICK = [
    "model.preset=nano",
    "sft.checkpoint=artifacts/sft/bench-chaos-harvest-quick",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=8",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_every=0",
    "train.eval_episodes=4",  # not the config's 200: nothing here reads held-out success
    "tasks.0.env.kwargs.size=4",
    "tasks.0.agent.max_turns=8",
    "harvest.serving.preset=nano",
    "harvest.replay.duration_s=10.0",
    "harvest.calibration_s=5.0",  # a short SLO calibration: the quick run tests recovery, not the SLO
    "harvest.calibration_min_requests=10",
    "async.trajectory_timeout_s=30",
]
FULL = ["train.steps=30", "train.eval_every=0"]
CHAOS = ["train.checkpoint_every=1"]  # a lost trainer redoes at most the step it was in


def duplicated(account: dict[str, Any]) -> int:
    """Trajectories accounted for more than once: the ledger's ends beyond what was started (never below 0)."""
    return max(0, -int(account.get("lost", 0)))


def report(run: dict[str, Any], kills: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's result from the chaos run's summary.json."""
    s = run["summary"]
    account = s.get("trajectories", {})
    harvest = s.get("harvest", {})
    return {
        "path": "harvest",
        "crashed": run["crashed"],
        "error": run["error"],
        "steps": s.get("steps"),
        "steps_planned": run["steps_planned"],
        "kills": kills,
        "harvest_pool": "in the driver (HarvestPool), not an actor: its loss is the run's, covered by --resume",
        "restarts": {
            "env": s.get("env_worker_restarts", 0),
            "rollout": s.get("rollout_restarts", 0),
            "coserving": harvest.get("replacements", 0),
            "router": s.get("router_restarts", 0),
            "train": s.get("trainer_restarts", 0),
        },
        "coserving_deaths": harvest.get("deaths", 0),
        "steps_lost": s.get("steps_lost"),
        **chaos.trajectory_counts(account),
        "trajectories_duplicated": duplicated(account),
        "serving_served": harvest.get("served"),
        "serving_lost": harvest.get("serving_lost"),
        "harvest_lends": harvest.get("lends"),
        "harvest_withdrawals": harvest.get("withdrawals"),
        "rl_wall_s": s.get("rl_wall_s"),
    }


def run(config_path: str, overrides: list[str], runs: Path) -> dict[str, Any]:
    """The one chaos run and its report."""
    base = chaos.load_train_config(config_path, overrides)
    policy, _ = initial_policy(base)  # the config's SFT warm start (cached)
    overrides = [*overrides, f"model.path={policy}"]
    runs.mkdir(parents=True, exist_ok=True)
    killer = chaos.Killer(runs, chaos.kill_schedule(base.train.steps, ROLES))
    result = chaos.run_one(config_path, [*overrides, *CHAOS], "chaos", runs, killer)
    return report(result, killer.kills)


def table(result: dict[str, Any]) -> list[list[Any]]:
    return [
        *chaos.kill_rows(result),
        ["harvest pool", result["harvest_pool"]],
        ["steps lost (redone after trainer losses)", result["steps_lost"]],
        [
            "trajectories started / failed / lost / duplicated",
            f"{result['trajectories_started']} / {result['trajectories_failed']} / {result['trajectories_lost']} / "
            f"{result['trajectories_duplicated']}",
        ],
        [
            "serving requests served / lost with killed replicas",
            f"{result['serving_served']} / {result['serving_lost']}",
        ],
    ]
