"""Train in this process (the run's driver) while a thread kills one named Ray actor once the run has logged a
number of steps: the failure tests' one way to lose an actor mid-run, at a known point."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import ray

from rollarc.config import Config
from rollarc.runtime.entry import run_training


def _kill_when(run_root: Path, steps: int, name: str, killed: list[str], restart: bool) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        rows = list(run_root.glob("*/metrics.jsonl"))
        if rows and len(rows[0].read_text().splitlines()) >= steps:
            ray.kill(ray.get_actor(name), no_restart=not restart)
            killed.append(name)
            return
        time.sleep(0.05)


def train_killing(cfg: Config, run_root: Path, steps: int, name: str, restart: bool = False) -> tuple[int, list[str]]:
    """Run ``cfg`` (its runs under ``run_root``) and kill the actor ``name`` once ``steps`` steps are logged;
    ``restart``: as a crash would, so that Ray restarts an actor that has ``max_restarts``. Returns the run's exit
    code and the names killed (``[name]`` when the kill happened)."""
    killed: list[str] = []
    killer = threading.Thread(target=_kill_when, args=(run_root, steps, name, killed, restart), daemon=True)
    killer.start()
    code = run_training(cfg)
    killer.join(timeout=5)
    return code, killed
