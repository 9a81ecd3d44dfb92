"""W&B (offline) and MLflow (a local file store) receive the same metrics as metrics.jsonl, with the run's config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rollarc.report.metrics import MetricsWriter
from rollarc.report.trackers import MlflowTracker, TrackerMissing, WandbTracker, check_trackers, open_trackers

STEPS = {1: {"reward": 0.25, "loss": 1.5, "per_task": {"arith": {"success": 0.5}}, "note": "text"}, 2: {"reward": 0.75}}
CONFIG = {"name": "tr", "train": {"lr": 0.001, "steps": 2}}


@pytest.fixture
def offline(tmp_path: Path):
    keys = ("WANDB_MODE", "WANDB_DIR", "WANDB_SILENT", "MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(
        {
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(tmp_path),
            "WANDB_SILENT": "true",
            "MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri(),
            "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow 3 keeps the file store behind this switch
        }
    )
    yield tmp_path
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_wandb_offline_and_mlflow_file_store_receive_the_metrics(offline):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    trackers = open_trackers(["wandb", "mlflow"], offline, "tr-run", "rollarc-test", CONFIG)
    wandb_tracker, mlflow_tracker = trackers
    assert isinstance(wandb_tracker, WandbTracker) and isinstance(mlflow_tracker, MlflowTracker)
    writer = MetricsWriter(offline, tensorboard=False, trackers=trackers)
    for step, values in STEPS.items():
        writer.log(step, values)
    assert wandb_tracker.run.name == "tr-run" and wandb_tracker.run.config["train"]["lr"] == 0.001
    writer.close()
    written = [json.loads(line) for line in (offline / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in written] == [0.25, 0.75]

    # The offline run is W&B's binary record log (what `wandb sync` uploads; no Python reader ships with
    # wandb 0.31): every logged name and value is in it, as the key and JSON value of a history item.
    (offline_run,) = offline.glob("wandb/offline-run-*/run-*.wandb")
    data = offline_run.read_bytes()
    for name, value in [("reward", "0.25"), ("loss", "1.5"), ("per_task/arith/success", "0.5"), ("reward", "0.75")]:
        assert name.encode() in data and value.encode() in data, name
    assert b"note" not in data  # text is not a metric

    client = mlflow_tracker.client
    run = client.get_run(mlflow_tracker.run_id)
    assert run.info.run_name == "tr-run" and run.info.status == "FINISHED"
    assert run.data.params["train/lr"] == "0.001"
    rewards = client.get_metric_history(mlflow_tracker.run_id, "reward")
    assert [(m.step, m.value) for m in rewards] == [(1, 0.25), (2, 0.75)]
    assert [m.value for m in client.get_metric_history(mlflow_tracker.run_id, "per_task/arith/success")] == [0.5]
    assert "note" not in run.data.metrics  # text is not a metric


def test_a_tracker_whose_package_is_missing_is_one_line_naming_the_extra():
    with pytest.raises(TrackerMissing) as err:
        check_trackers(["mlflow"], packages={"mlflow": "no_such_tracker_package"})
    assert str(err.value) == (
        "run.trackers names mlflow, but the no_such_tracker_package package is not installed; "
        "install the extra: pip install 'rollarc[mlflow]'"
    )


def test_run_trackers_accepts_only_known_trackers():
    from rollarc.config import RunConfig

    assert RunConfig(trackers=["wandb", "mlflow"]).trackers == ["wandb", "mlflow"]
    with pytest.raises(ValueError, match="wandb"):
        RunConfig(trackers=["neptune"])
