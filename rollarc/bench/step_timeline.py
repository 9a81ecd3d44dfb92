"""The critical path of a synchronous step, from a run's ``timeline.jsonl`` (the wall-time breakdown in docs/performance.md).

A CPU profile (``step_profile``) says where the processes spend their CPU; it does not say what the step waits
for. In synchronous mode a step is a chain: the new weights reach the rollout replica, the next groups are
admitted and their first turns reach the engine, the engine generates, the completions travel back and the env
steps score them, the groups reach the controller and the trainer, it trains, publishes, and the replica
swaps the weights in. The spans every worker writes mark each link, so the median of each link over the steps
is the breakdown::

    python -m rollarc.bench.step_timeline RUN_DIR

Links (median seconds per step; ``step_s`` is from one weight swap to the next):

- ``admit_s``: the previous swap's end → the first turn of the step entering the engine;
- ``stagger_s``: the first → the last turn entering the engine (turns that reach it in several batches);
- ``generate_s``: the first turn entering the engine → the last turn finishing there;
- ``return_s``: the last turn finishing in the engine → the last env step ending on the EnvWorker;
- ``to_train_s``: the last env step → the trainer starting the step;
- ``train_s``, ``publish_s`` (the trainer publishing the weights), ``sync_s`` (publish end → swap end).

Single-replica synchronous runs only; held-out evaluation episodes are left out. The first step is left out
(it starts from the run's start, not from a swap).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median
from typing import Any

LINKS = ("admit_s", "stagger_s", "generate_s", "return_s", "to_train_s", "train_s", "publish_s", "sync_s", "step_s")


def _training(span: dict[str, Any]) -> bool:
    return not str(span.get("traj") or "").startswith("eval-")


def step_links(spans: list[dict[str, Any]]) -> list[dict[str, float]]:
    """The links of every step that has a swap before it and after it, in step order."""
    trains = sorted((s for s in spans if s["role"] == "train" and s["kind"] == "train"), key=lambda s: s["t0"])
    swaps = sorted(s["t1"] for s in spans if s["role"] == "rollout" and s["kind"] == "sync")
    publishes = sorted((s for s in spans if s["role"] == "train" and s["kind"] == "sync"), key=lambda s: s["t0"])
    generates = [s for s in spans if s["role"] == "rollout" and s["kind"] == "generate" and _training(s)]
    env_steps = [s for s in spans if s["role"] == "env" and "step_reward" in s and _training(s)]
    steps = []
    for train in trains:
        before = [t for t in swaps if t < train["t0"]]
        after = [t for t in swaps if t > train["t1"]]
        published = [p for p in publishes if p["t0"] >= train["t1"]]
        turns = [g for g in generates if g.get("step") == train.get("step")]
        if not before or not after or not published or not turns:
            continue
        start, swapped, publish = before[-1], after[0], published[0]
        scored = [e["t1"] for e in env_steps if start < e["t0"] < train["t0"]]
        entered = [g["t0"] for g in turns]
        finished = max(g["t1"] for g in turns)
        last_env = max(scored) if scored else finished
        steps.append(
            {
                "admit_s": min(entered) - start,
                "stagger_s": max(entered) - min(entered),
                "generate_s": finished - min(entered),
                "return_s": last_env - finished,
                "to_train_s": train["t0"] - last_env,
                "train_s": train["t1"] - train["t0"],
                "publish_s": publish["t1"] - train["t1"],
                "sync_s": swapped - publish["t1"],
                "step_s": swapped - start,
            }
        )
    return steps


def critical_path(spans: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds per step of each link (empty when no step has a swap on both sides)."""
    steps = step_links(spans)
    return {link: median(s[link] for s in steps) for link in LINKS} if steps else {}


def read_spans(run_dir: Path) -> list[dict[str, Any]]:
    """Every span of a run directory's ``timeline.jsonl`` (empty when the run wrote none)."""
    path = run_dir / "timeline.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rollarc.bench.step_timeline", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory (it holds timeline.jsonl)")
    args = parser.parse_args(argv)
    path = Path(args.run_dir) / "timeline.jsonl"
    if not path.is_file():
        parser.error(f"{path} does not exist; pass a run directory of `rollarc train` (run.dir/NAME-DATE)")
    print(json.dumps({link: round(value, 4) for link, value in critical_path(read_spans(Path(args.run_dir))).items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
