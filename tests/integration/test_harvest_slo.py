"""`rollarc train` with `harvest:` measures its SLO before lending, every guard holds it, and a resume reuses it.

The co-serving replica serves the first ``calibration_s`` of its trace window with nothing lent, while the run trains
(under its own load); the SLO is
``slo_alone_factor`` x those requests' p99s (docs/rose.md#the-slo-in-training). The run's summary says where it came
from, what the replica's guard held, the guard's decisions by cause, and serving during training against it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rollarc.rose.guard_actions import GUARD_ACTIONS
from rollarc.runtime.entry import run_training
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow

# Light serving load (16 requests/s, no bursts) on a nano serving model: idle gaps in which the guard lends.
HARVEST: dict[str, Any] = {
    "serving": {"preset": "nano", "seed": 99, "max_model_len": 256, "max_num_seqs": 32},
    "slo_source": "calibrate",
    # the run trains meanwhile: its 50 steps (after a start-up evaluation) outlast it, and serving after it is scored
    "calibration_s": 1.0,
    "calibration_min_requests": 5,
    "memory_tokens": 400,
    "synthetic": {"rate_per_s": 16.0, "burst_every_s": 0.0},
    "replay": {"token_scale": 0.25, "duration_s": 10.0, "max_prompt_tokens": 64, "max_output_tokens": 16},
    "lend_after_s": 0.0,
    "withdraw_after_s": 0.2,
    "poll_s": 0.05,
}
SECTIONS: dict[str, Any] = {
    "harvest": HARVEST,
    "train": {"groups_per_step": 2, "group_size": 2, "checkpoint_every": 10},
    "env_kwargs": {"turns": 2},
}


def test_the_slo_is_calibrated_held_by_the_guard_counted_by_cause_and_reused_on_resume(nano_policy_dir, tmp_path):
    assert (
        run_training(config(nano_policy_dir, tmp_path, **{**SECTIONS, "train": {**SECTIONS["train"], "steps": 50}}))
        == 0
    )
    run = only_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    slo = summary["harvest_slo"]
    print("harvest_slo:", json.dumps(slo), "guard actions:", summary["harvest_guard_actions"])
    assert slo["source"] == "calibrate" and slo["factor"] == 1.5 and slo["reused"] is False
    alone = slo["alone"]
    assert alone["requests"] >= 5 and alone["calibration_s"] == 1.0
    assert slo["settled_after_s"] >= 1.0  # the sample's window passed before the SLO (and any lending)
    assert all(math.isfinite(v) and v > 0 for v in (slo["ttft_p99_ms"], slo["tpot_p99_ms"], alone["ttft_p99_ms"]))
    assert slo["ttft_p99_ms"] == pytest.approx(1.5 * alone["ttft_p99_ms"])
    assert slo["tpot_p99_ms"] == pytest.approx(1.5 * max(alone["tpot_p99_ms"], 1e-3))
    assert 0.9 <= alone["attainment"] <= 1.0  # its own sample against 1.5 x its p99s
    # the calibration is recorded in the run directory: every request of the sample, the key it was measured under
    recorded = json.loads((run / "harvest_calibration.json").read_text())
    assert len(recorded["requests"]) == alone["requests"] and recorded["key"]["serving"]["seed"] == 99
    # the value reached the replica: its guard reports holding it, and it served the sample itself
    (replica,) = summary["harvest"]["replicas"]
    assert replica["slo"] == {"ttft_p99_ms": slo["ttft_p99_ms"], "tpot_p99_ms": slo["tpot_p99_ms"]}
    assert replica["calibration_requests"] == alone["requests"]
    # the guard's decisions by cause, cumulative per step and in the summary, and serving during training
    actions = summary["harvest_guard_actions"]
    assert tuple(actions) == GUARD_ACTIONS and all(isinstance(v, int) and v >= 0 for v in actions.values())
    assert actions["withdrawals"] == summary["harvest"]["withdrawals"]
    assert actions["slo_pauses"] + actions["memory_pauses"] + actions["slot_pauses"] == summary["harvest"]["pauses"]
    rows = metrics(run)
    assert all(tuple(row["harvest_guard_actions"]) == GUARD_ACTIONS for row in rows)
    assert rows[-1]["harvest_guard_actions"] == actions
    serving = summary["harvest_serving"]
    assert set(serving) == {"requests", "slo_met", "attainment", "ttft_p99_ms", "tpot_p99_ms"}
    assert serving["requests"] > 0 and 0.0 <= serving["attainment"] <= 1.0

    # a resume reuses the run's recorded calibration: the same numbers, and no replica served a sample again
    sections = {**SECTIONS, "train": {**SECTIONS["train"], "steps": 51}}
    assert run_training(config(nano_policy_dir, tmp_path, resume=str(run), **sections)) == 0
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["steps"] == 51 and resumed["resumes"] == 1
    again = resumed["harvest_slo"]
    assert again["reused"] is True and again["file"] == str(run / "harvest_calibration.json")
    assert {k: again[k] for k in ("ttft_p99_ms", "tpot_p99_ms", "source", "factor", "alone")} == {
        k: slo[k] for k in ("ttft_p99_ms", "tpot_p99_ms", "source", "factor", "alone")
    }
    (replica,) = resumed["harvest"]["replicas"]
    assert replica["calibration_requests"] == 0
    assert replica["slo"] == {"ttft_p99_ms": slo["ttft_p99_ms"], "tpot_p99_ms": slo["tpot_p99_ms"]}

    # another run reads that recorded calibration (slo_source: file): the same SLO, measured by none of its replicas;
    # with lend: false (bench rose --train's baseline) its replica serves and is scored but never lent, gets no weights
    harvest = {**HARVEST, "slo_source": "file", "slo_file": str(run / "harvest_calibration.json"), "lend": False}
    other = {**SECTIONS, "harvest": harvest, "train": {**SECTIONS["train"], "steps": 1, "checkpoint_every": 0}}
    assert run_training(config(nano_policy_dir, tmp_path / "from_file", **other)) == 0
    from_file = json.loads((only_run(tmp_path / "from_file") / "summary.json").read_text())
    read = from_file["harvest_slo"]
    assert read["source"] == "file" and read["reused"] is True and read["alone"] == slo["alone"]
    assert (read["ttft_p99_ms"], read["tpot_p99_ms"]) == (slo["ttft_p99_ms"], slo["tpot_p99_ms"])
    assert from_file["harvest"]["replicas"][0]["calibration_requests"] == 0
    assert from_file["harvest"]["lends"] == 0 and from_file["harvest_serving"] is not None
    (row,) = metrics(only_run(tmp_path / "from_file"))
    assert (row["harvest_turns_done"], row["cross_site_bytes"], row["harvest_lent"]) == (0, 0, 0)
