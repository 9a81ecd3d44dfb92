"""``rollarc bench chaos --quick``: a run that loses one actor of every role still finishes, and loses nothing.

(The kill schedule, the latency trace and the chaos overrides, pure, are in ``tests/unit/test_bench_chaos_paths.py``.)"""

from __future__ import annotations

import json

import pytest

from rollarc.bench import chaos
from tests.integration import shared_ray

pytestmark = pytest.mark.slow


def test_quick_chaos_run_finishes_without_losing_trajectories(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROLLARC_BENCH_DOCS", str(tmp_path / "docs" / "benchmarks.md"))
    code = chaos.main(
        [
            "--quick",
            "--json",
            "--runs",
            str(tmp_path / "runs"),
            f"sft.checkpoint={tmp_path / 'sft'}",
            f"cluster.address={shared_ray.address()}",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["crashed"] is False, result["error"]
    assert result["seeds"] == [0]
    kills = result["per_seed"][0]["kills"]
    assert [k["role"] for k in kills] == ["env", "rollout", "router", "train"]
    assert not [k for k in kills if k["actor"].startswith("not killed")], kills
    assert all(n >= 1 for n in result["restarts"].values()), result["restarts"]
    assert result["trainer_losses"] >= 1 and result["steps_lost"] <= result["trainer_losses"]
    assert result["trajectories_lost"] == 0
    assert result["trajectories_started"] > 0 and result["steps"] == 6
    # --quick runs the chaos run alone (compare() is unit-tested on given runs): the clean side is null, not made up
    assert (result["heldout_success_clean"], result["clean_crashed"], result["success_gap"]) == (None, None, None)
    assert result["per_seed"][0]["rl_wall_s"]["clean"] is None and result["per_seed"][0]["rl_wall_s"]["chaos"] > 0
    assert not (tmp_path / "docs").exists()  # --quick publishes nothing
