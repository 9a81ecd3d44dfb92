"""`cluster.cores` and `harvest.cores`: one machine as a training cluster beside a serving deployment on its own cores.

The driver is pinned before the local Ray cluster starts, so every role's process inherits its cores; each
co-serving replica pins itself to `harvest.cores`, outside them; the driver is unpinned when Ray stops
(docs/rose.md#pinned-cores). Needs 2 cores: the CI machine and this one have them. It starts a cluster of its own
(not the suite's shared one): pinning applies to the cluster a run starts, whose processes inherit the driver's cores.
"""

from __future__ import annotations

import json
import os

import pytest

from rollarc.rose.pinning import available_cores
from rollarc.runtime.entry import run_training
from tests.integration.test_harvest_slo import HARVEST
from tests.integration.test_runtime import config, only_run

pytestmark = pytest.mark.slow


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not hasattr(os, "sched_setaffinity"), reason="needs 2 cores, Linux")
def test_roles_run_on_cluster_cores_and_the_serving_replica_on_its_own(nano_policy_dir, tmp_path):
    before = available_cores()
    harvest = {**HARVEST, "slo_source": "fixed", "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 200.0}, "cores": [1]}
    sections = {"harvest": harvest, "train": {"groups_per_step": 2, "group_size": 2, "checkpoint_every": 0}}
    cfg = config(nano_policy_dir, tmp_path, **sections)
    cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"cores": [0], "address": None})})
    assert run_training(cfg) == 0
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["driver_cores"] == [0]  # the driver (and the cluster it started) ran on core 0
    (replica,) = summary["harvest"]["replicas"]
    assert replica["pinned"] == [1]  # the serving replica left the inherited core for its own
    assert available_cores() == before  # unpinned when Ray stopped: the next run here is not confined
