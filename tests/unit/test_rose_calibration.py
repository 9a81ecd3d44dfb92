"""The measured SLO (rollarc.rose.calibration): factor x pooled serving-alone p99s, a recorded calibration refused
where it was measured under another trace, window, serving model or device, and the SLO settings of ``harvest:``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rollarc.config.harvest import HarvestConfig, SLOConfig
from rollarc.config.io import ConfigError
from rollarc.rose.calibration import (
    Calibration,
    calibration_key,
    derive_slo,
    read_calibration,
    serving_record,
    slo_record,
    too_few,
)
from rollarc.rose.trace import TraceRequest, write_trace

# 99 requests of TTFT 10 ms and one of 110 ms, in two replicas' samples. Pooled p99 (numpy's linear): rank
# 99 * 0.99 = 98.01, so ordered[98] + 0.01 * (ordered[99] - ordered[98]) = 10 + 0.01 * 100 = 11 ms
FAST = [(10.0, 2.0)] * 50
SLOW = [(10.0, 4.0)] * 49 + [(110.0, None)]


def test_the_slo_is_the_factor_times_the_pooled_p99s() -> None:
    slo = derive_slo(FAST + SLOW, 1.5)
    assert slo.ttft_p99_ms == pytest.approx(1.5 * 11.0)
    # TPOTs: 50 of 2 ms and 49 of 4 ms (the one-token request has none): rank 98 * 0.99 = 97.02 lies among the 4s
    assert slo.tpot_p99_ms == pytest.approx(1.5 * 4.0)
    assert derive_slo([(5.0, None)], 2.0) == SLOConfig(ttft_p99_ms=10.0, tpot_p99_ms=2e-3)  # no TPOT: 1 us floor
    with pytest.raises(ValueError, match="no serving-alone requests"):
        derive_slo([], 1.5)


def test_too_few_requests_for_a_p99_is_one_line_saying_how_many_are_needed() -> None:
    assert too_few(100, 100, 30.0, 2) is None
    line = too_few(99, 100, 30.0, 2)
    assert line is not None and "\n" not in line
    assert "99 serving requests" in line and "first 30 s on 2" in line and "at least 100" in line
    assert "harvest.calibration_s" in line


def test_the_recorded_slo_and_its_alone_attainment(tmp_path: Path) -> None:
    requests = tuple(FAST + SLOW)
    cal = Calibration({"k": 1}, requests, 30.0, ("borrowed-0", "borrowed-1"))
    slo = cal.slo(1.5)  # 16.5 ms TTFT, 6 ms TPOT: only the 110 ms request misses
    record = slo_record(slo, "calibrate", 1.5, cal, file="x.json", reused=False)
    assert record["ttft_p99_ms"] == pytest.approx(16.5) and record["tpot_p99_ms"] == pytest.approx(6.0)
    assert record["source"] == "calibrate" and record["factor"] == 1.5 and record["reused"] is False
    alone = record["alone"]
    assert alone["requests"] == 100 and alone["attainment"] == pytest.approx(0.99)
    assert alone["ttft_p99_ms"] == pytest.approx(11.0) and alone["tpot_p99_ms"] == pytest.approx(4.0)
    assert alone["slo_met"] is True and alone["calibration_s"] == 30.0
    fixed = slo_record(SLOConfig(ttft_p99_ms=7.0, tpot_p99_ms=3.0), "fixed", None, None)
    assert fixed == {"ttft_p99_ms": 7.0, "tpot_p99_ms": 3.0, "source": "fixed", "factor": None, "alone": None}
    # training's serving: 2 of 4 over the TPOT target of 6 ms
    served = serving_record([(1.0, 5.0), (1.0, 7.0), (20.0, None), (2.0, 6.0)], slo)
    assert served["requests"] == 4 and served["attainment"] == pytest.approx(0.5)
    assert served["slo_met"] is False  # p99 TTFT 19.46 ms > 16.5 ms
    assert serving_record([], slo) == {
        "requests": 0,
        "slo_met": None,
        "attainment": None,
        "ttft_p99_ms": None,
        "tpot_p99_ms": None,
    }


def test_a_calibration_file_round_trips_and_a_mismatched_one_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    write_trace(trace, [TraceRequest(float(i), 10, 5) for i in range(20)])
    harvest = HarvestConfig(trace_path=str(trace))
    key = calibration_key(harvest, "cpu")
    path = tmp_path / "harvest_calibration.json"
    path.write_text(json.dumps(Calibration(key, tuple(FAST + SLOW), 30.0, ("borrowed-0",)).to_json()))
    recorded = read_calibration(path)
    assert recorded.requests == tuple(FAST + SLOW) and recorded.replicas == ("borrowed-0",)
    recorded.check(key, "f")  # the same trace, window, model, device: accepted
    assert recorded.slo(1.5) == derive_slo(FAST + SLOW, 1.5)

    other_model = calibration_key(
        harvest.model_copy(update={"serving": harvest.serving.model_copy(update={"seed": 7})}), "cpu"
    )
    with pytest.raises(ConfigError, match=r"^f was calibrated with serving\.seed 1234 there, 7 here: calibrate again"):
        recorded.check(other_model, "f")
    with pytest.raises(ConfigError, match=r"device 'cpu' there, 'cuda' here"):
        recorded.check(calibration_key(harvest, "cuda"), "f")
    write_trace(trace, [TraceRequest(float(i), 11, 5) for i in range(20)])  # same name, other content
    with pytest.raises(ConfigError, match=r"trace\.sha256 "):
        recorded.check(calibration_key(harvest, "cpu"), "f")
    window = harvest.replay.model_copy(update={"offset_s": 5.0})  # the first difference (by key) is named, then a count
    with pytest.raises(ConfigError, match=r"replay\.offset_s 0\.0 there, 5\.0 here \(and 1 more\)"):
        recorded.check(calibration_key(harvest.model_copy(update={"replay": window}), "cpu"), "f")


def test_a_file_that_is_no_calibration_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json, line 1: not valid JSON"):
        read_calibration(bad)
    bad.write_text(json.dumps({"ttft_p99_ms": 3}))
    with pytest.raises(ConfigError, match="is not a harvest calibration"):
        read_calibration(bad)
    bad.write_text(json.dumps({"format": "rollarc harvest calibration 1", "key": {}, "requests": [[1.0]]}))
    with pytest.raises(ConfigError, match="is not a valid harvest calibration"):
        read_calibration(bad)


def test_each_slo_source_needs_its_own_setting_and_no_other(tmp_path: Path) -> None:
    assert HarvestConfig().slo_source == "calibrate" and HarvestConfig().slo is None
    fixed = HarvestConfig(slo_source="fixed", slo=SLOConfig(ttft_p99_ms=100.0, tpot_p99_ms=20.0))
    assert fixed.slo == SLOConfig(ttft_p99_ms=100.0, tpot_p99_ms=20.0)
    with pytest.raises(ValidationError, match=r"harvest\.slo_source=fixed needs harvest.slo"):
        HarvestConfig(slo_source="fixed")
    with pytest.raises(ValidationError, match=r"harvest\.slo is given but harvest.slo_source is calibrate"):
        HarvestConfig(slo=SLOConfig())
    with pytest.raises(ValidationError, match=r"harvest\.slo_source=file needs harvest.slo_file"):
        HarvestConfig(slo_source="file")
    recorded = tmp_path / "cal.json"
    recorded.write_text("{}")
    with pytest.raises(ValidationError, match=r"harvest\.slo_file is read only with harvest.slo_source=file"):
        HarvestConfig(slo_file=str(recorded))
    with pytest.raises(ValidationError, match=r"harvest\.slo_file .* is not a file"):
        HarvestConfig(slo_source="file", slo_file=str(tmp_path / "missing.json"))
    assert HarvestConfig(slo_source="file", slo_file=str(recorded)).slo_file == str(recorded.resolve())
