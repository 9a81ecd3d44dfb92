"""The SLO a harvest site's guards keep, settled before any replica is lent (``harvest.slo_source``).

``fixed``: ``harvest.slo``. ``file``: ``harvest.slo_file``. ``calibrate``: the run directory's own recording when
there is one (a resumed run: the same numbers, not a second calibration), else a calibration: each replica's first
``calibration_s`` of serving, under the run's own load with nothing lent, is its serving-alone sample, and the SLO is
``slo_alone_factor`` x the p99s of every sample's requests pooled (``rollarc.rose.calibration``). Apart from the
:class:`~rollarc.runtime.harvest_pool.HarvestPool` because it is its own concept (what the guards keep), with its own
state (the samples under way, their deadline); the pool hands it its replicas and its way of replacing a dead one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from rollarc.config.harvest import HarvestConfig, SLOConfig
from rollarc.config.io import ConfigError
from rollarc.rayproc.deadline import Deadlines, hung
from rollarc.report.durable import write_text_durably
from rollarc.rose.calibration import (
    CALIBRATION_FILE,
    Calibration,
    calibration_key,
    read_calibration,
    slo_record,
    too_few,
)

Replicas = dict[str, Any]  # replica name -> its actor handle


class SiteSLO:
    """The site's SLO: settled at once when given or recorded, else once every replica's sample is in."""

    def __init__(self, harvest: HarvestConfig, deadlines: Deadlines, run_dir: Path | None, device: str) -> None:
        self.harvest, self.deadlines, self.run_dir = harvest, deadlines, run_dir
        self.slo: SLOConfig | None = None  # the SLO every replica's guard keeps, once settled
        self.record: dict[str, Any] = {}  # summary.json's harvest_slo
        self.calibrating: dict[str, Any] = {}  # replica name -> its serve_alone ref, while the calibration runs
        self.due = 0.0  # monotonic time by which every sample must be in
        self.started = time.monotonic()
        self.key = self._recorded(device)  # None: settled without measuring

    def _recorded(self, device: str) -> dict[str, Any] | None:
        """Settle the SLO without measuring where one is given or recorded; else the key to calibrate it under."""
        harvest = self.harvest
        if harvest.slo_source == "fixed":
            assert harvest.slo is not None  # the config requires it
            self.settle(harvest.slo, "fixed", None, {})
            return None
        key = calibration_key(harvest, device)
        if harvest.slo_source == "file":
            assert harvest.slo_file is not None  # the config requires it
            path = Path(harvest.slo_file)
            recorded = read_calibration(path)
            recorded.check(key, f"harvest.slo_file {path}")
            self.settle(recorded.slo(harvest.slo_alone_factor), "file", recorded, {}, file=str(path), reused=True)
            return None
        path_in_run = self.run_dir / CALIBRATION_FILE if self.run_dir is not None else None
        if path_in_run is None or not path_in_run.is_file():
            return key
        recorded = read_calibration(path_in_run)
        recorded.check(key, f"the run's recorded calibration {path_in_run}")
        factor = harvest.slo_alone_factor
        self.settle(recorded.slo(factor), "calibrate", recorded, {}, file=str(path_in_run), reused=True)
        return None

    @property
    def sampling(self) -> bool:
        """Whether replicas started now must serve their first ``calibration_s`` as the sample."""
        return self.key is not None and self.slo is None

    def sample(self, replicas: Replicas) -> None:
        """Start every replica's serving-alone sample (a calibration under way starts over with these replicas)."""
        self.calibrating = {name: handle.serve_alone.remote() for name, handle in replicas.items()}
        # the sample's requests arrive within calibration_s; the last ones finish within a control call's deadline
        self.due = time.monotonic() + self.harvest.calibration_s + self.deadlines.call_s

    def tick(self, replicas: Replicas, on_death: Callable[[str], None]) -> None:
        """Settle the SLO once every replica's sample is in (the run trains meanwhile; nothing is lent before)."""
        if not self.calibrating:
            return
        refs = list(self.calibrating.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if len(ready) == len(refs):
            self._calibrate(replicas, on_death)
        elif time.monotonic() > self.due:
            late = ", ".join(name for name, ref in self.calibrating.items() if ref not in ready)
            budget = self.harvest.calibration_s + self.deadlines.call_s
            raise hung(late, "serve_alone (the SLO's calibration)", budget, self.deadlines.key("call"))

    def finish(self, replicas: Replicas, on_death: Callable[[str], None]) -> None:
        """At the run's end (a run shorter than the calibration): wait for the samples until they are due, so that
        the summary states the SLO serving was scored against; a sample still missing leaves it unsettled."""
        if not self.calibrating:
            return
        refs = list(self.calibrating.values())
        left = max(0.0, self.due - time.monotonic())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
        if len(ready) == len(refs):
            self._calibrate(replicas, on_death)

    def _calibrate(self, replicas: Replicas, on_death: Callable[[str], None]) -> None:
        """The SLO is ``slo_alone_factor`` x the p99s of the samples' requests pooled (every one is in), recorded in
        the run directory and pushed to all. A replica that died meanwhile is replaced (``on_death``); the
        survivors' samples count (too few requests then stop the run in one line)."""
        harvest, key = self.harvest, self.key
        assert key is not None
        refs, self.calibrating = self.calibrating, {}
        samples = []
        for name, ref in refs.items():
            try:
                samples.append(self.deadlines.get("call", ref, name, "serve_alone (the SLO's calibration)"))  # ready
            except RayActorError:
                on_death(name)
        requests = tuple((float(ttft), tpot) for sample in samples for ttft, tpot in sample)
        problem = too_few(len(requests), harvest.calibration_min_requests, harvest.calibration_s, len(refs))
        if problem is not None:
            raise ConfigError(problem)
        calibration = Calibration(key, requests, harvest.calibration_s, tuple(refs))
        # seconds from the site's start to the SLO: the run trained meanwhile and lent nothing
        where: dict[str, Any] = {"reused": False, "settled_after_s": round(time.monotonic() - self.started, 3)}
        if self.run_dir is not None:
            path = self.run_dir / CALIBRATION_FILE
            write_text_durably(path, json.dumps(calibration.to_json(), indent=1))
            where["file"] = str(path)
        self.settle(calibration.slo(harvest.slo_alone_factor), "calibrate", calibration, replicas, **where)

    def settle(
        self, slo: SLOConfig, source: str, calibration: Calibration | None, replicas: Replicas, **where: Any
    ) -> None:
        """The run's SLO from now on: pushed to every replica (replacements get it when they join)."""
        factor = None if source == "fixed" else self.harvest.slo_alone_factor
        self.slo, self.record = slo, slo_record(slo, source, factor, calibration, **where)
        for name, handle in replicas.items():
            self.push(name, handle)

    def push(self, name: str, handle: Any) -> None:
        """Set the run's SLO in a replica's guard and wait until it holds it (its ``stats`` report it)."""
        assert self.slo is not None
        self.deadlines.get("call", handle.set_slo.remote(self.slo.ttft_p99_ms, self.slo.tpot_p99_ms), name, "set_slo")
