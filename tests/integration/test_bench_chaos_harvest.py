"""``rollarc bench chaos --path harvest --quick``: a run on borrowed serving capacity that loses an EnvWorker, a
co-serving replica, the router and the trainer still finishes, and loses nothing."""

from __future__ import annotations

import json

import pytest

from rollarc.bench import chaos, chaos_harvest
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def test_quick_harvest_chaos_run_finishes_without_losing_or_duplicating_trajectories(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "docs" / "benchmarks.md"))
    argv = ["--path", "harvest", "--quick", "--json", "--runs", str(tmp_path / "runs"), f"sft.checkpoint={tmp_path}"]
    argv.append(
        f"cluster.address={shared_ray.address()}"
    )  # the suite's shared cluster (tests/integration/shared_ray.py)
    assert chaos.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["path"] == "harvest"
    assert result["crashed"] is False, result["error"]
    assert (result["steps"], result["steps_planned"]) == (8, 8)
    kills = result["kills"]
    assert [k["role"] for k in kills] == list(chaos_harvest.ROLES)
    assert not [k for k in kills if k["actor"].startswith("not killed")], kills
    actors = {k["role"]: k["actor"] for k in kills}
    assert actors["coserving"].startswith("borrowed-") and actors["rollout"].startswith("rollout-")
    assert actors["router"] == "router" and actors["env"].startswith("env-") and actors["train"].startswith("train-")
    # each killed role came back: restarted by Ray, or replaced (the co-serving replica)
    assert all(n >= 1 for n in result["restarts"].values()), result["restarts"]
    assert result["coserving_deaths"] >= 1
    assert result["trajectories_started"] > 0
    assert (result["trajectories_lost"], result["trajectories_duplicated"]) == (0, 0)
    assert result["steps_lost"] <= result["restarts"]["train"]
    # serving requests die with their replica (the trace is replayed inside it): counted, not hidden
    assert result["serving_served"] > 0 and result["serving_lost"] >= 0
    assert not (tmp_path / "docs").exists()  # --quick publishes nothing
