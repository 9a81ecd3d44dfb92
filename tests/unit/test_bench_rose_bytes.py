"""``rollarc.bench.rose_bytes``: the short harvest run's overrides, and the figures read back from metrics rows."""

from __future__ import annotations

import pytest

from rollarc.bench.rose_bytes import CONFIG, bytes_per_step, overrides
from rollarc.config import load_train_config


def test_the_short_run_is_the_harvest_config_at_its_training_lr_without_evaluations(tmp_path):
    cfg = load_train_config(CONFIG, overrides(3, tmp_path, quick=True))
    assert cfg.harvest is not None and cfg.harvest.replicas >= 2  # a sharded, fanned-out site
    assert cfg.sync.method == "delta" and cfg.sync.dtype == "bfloat16"
    t = cfg.train
    assert (t.steps, t.warmup_steps, t.lr_decay, t.lr) == (3, 0, "constant", 2e-4)
    assert (t.eval_every, t.eval_episodes, t.checkpoint_every) == (0, 0, 0)
    assert cfg.run.dir == str(tmp_path) and cfg.sft.checkpoint == str(tmp_path / "sft")
    assert (cfg.sft.steps, cfg.sft.episodes) == (20, 200)
    full = load_train_config(CONFIG, overrides(6, tmp_path, quick=False))
    assert full.train.steps == 6 and full.sft.steps == load_train_config(CONFIG, []).sft.steps


def test_figures_are_medians_over_steps_and_one_full_copy():
    rows = [
        {"cross_site_bytes": 100, "in_site_bytes": 90, "full_copy_bytes": 1000},
        {"cross_site_bytes": 400, "in_site_bytes": 95, "full_copy_bytes": 1000},  # a catch-up: the median ignores it
        {"cross_site_bytes": 120, "in_site_bytes": 110, "full_copy_bytes": 1000},
    ]
    assert bytes_per_step(rows) == {
        "cross_site_bytes_per_step": 120.0,
        "in_site_bytes_per_step": 95.0,
        "full_copy_bytes": 1000.0,
        "steps": 3.0,
    }
    with pytest.raises(ValueError, match="no step finished"):
        bytes_per_step([])
    with pytest.raises(ValueError, match="without `harvest:`"):
        bytes_per_step([{"loss": 0.1}])
