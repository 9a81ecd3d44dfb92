"""Resuming an LLM run: the shared resume check (:func:`rollarc.runtime.run_dir.resume_point`) plus its own.

A new run writes ``config.yaml`` (the resolved config) and ``fingerprint.json`` (its SHA-256). A resume
compares its config with the run's latest one (``config.yaml``, or the last ``config.resume-N.yaml``) and
refuses any change outside :data:`~rollarc.report.config_fingerprint.SAFE_TO_CHANGE`. It never overwrites
``config.yaml``: a resume writes its own resolved config to ``config.resume-N.yaml`` and appends a line to
``config_history.jsonl`` (N, the checkpoint it started from, its fingerprint and the keys it changed).
The LLM path adds one check: a checkpoint without the KL's reference cannot resume with ``algo.kl_coef > 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rollarc.config import Config
from rollarc.config.io import ConfigError
from rollarc.models.checkpoint import REFERENCE_FILE
from rollarc.runtime.run_dir import FINGERPRINT as FINGERPRINT  # re-exported: tests and older imports read it here
from rollarc.runtime.run_dir import HISTORY as HISTORY
from rollarc.runtime.run_dir import ResumePoint as ResumePoint
from rollarc.runtime.run_dir import latest_checkpoint as latest_checkpoint
from rollarc.runtime.run_dir import record_new_run as record_new_run
from rollarc.runtime.run_dir import resume_point


def prepare_resume(cfg: Config, say: Callable[[str], None] | None = None) -> ResumePoint:
    """Check ``cfg`` against the run it resumes and record the resume; a one-line ConfigError if it may not.

    ``say``: where a damaged checkpoint passed over (or an unverified one) is told; stderr by default.
    """

    def reference_kept(run_dir: Path, checkpoint: Path) -> None:
        # with model.lora the reference is the checkpoint's own base (policy/), adapters disabled: no file for it
        if cfg.algo.kl_coef > 0 and cfg.model.lora is None and not (checkpoint / REFERENCE_FILE).is_file():
            raise ConfigError(
                f"resume={run_dir}: {checkpoint.name} holds no {REFERENCE_FILE} (it was written by an older "
                "rollarc), so algo.kl_coef > 0 would regularise towards the resumed weights instead of the "
                "original reference"
            )

    return resume_point(cfg, reference_kept, say)
