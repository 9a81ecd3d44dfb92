"""A model of environment-step latency and failures (issue 4), for simulating slow, flaky envs.

Real agentic environments (tool calls, sandboxes, web) take a long-tailed time per step and sometimes
fail. ``LatencyModel.sample(rng)`` draws one step's ``(delay_s, failed)``; the runtime applies the
delay as a non-blocking ``asyncio.sleep`` and fails the trajectory when ``failed``. This module only
models; it never sleeps.

Kinds (``delay`` is then capped at ``max_s`` when set):

* ``none``: 0 s;
* ``fixed``: ``fixed_s``;
* ``lognormal``: ``median_s * exp(sigma * Z)``, Z standard normal; quantile q is
  ``median_s * exp(sigma * Phi^-1(q))``;
* ``pareto``: classic Pareto with minimum ``scale_s`` and shape ``alpha``; quantile q is
  ``scale_s * (1 - q) ** (-1 / alpha)``;
* ``trace``: resample recorded delays, one number (seconds) per line of ``trace_path``; ``#`` starts
  a comment.

Each step independently fails with probability ``failure_prob``. The ``long_tail`` preset has median
0.2 s, p99 5 s (lognormal, ``sigma = ln(25) / Phi^-1(0.99) ~= 1.38``) and 2 % failures.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Literal, TypeVar

import numpy as np
from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel

_T = TypeVar("_T")
LatencyKind = Literal["none", "fixed", "lognormal", "pareto", "trace"]
_REQUIRED: dict[str, tuple[str, ...]] = {
    "none": (),
    "fixed": ("fixed_s",),
    "lognormal": ("median_s", "sigma"),
    "pareto": ("scale_s", "alpha"),
    "trace": ("trace_path",),
}


class LatencyConfig(FrozenModel):
    """Per-step env latency and failure model; only the parameters of ``kind`` may be set."""

    kind: LatencyKind = Field(
        "none",
        description="delay distribution: `none` (0 s), `fixed` (fixed_s), `lognormal` "
        "(median_s, sigma), `pareto` (scale_s, alpha) or `trace` (resample "
        "trace_path)",
    )
    fixed_s: float | None = Field(default=None, ge=0.0, description="`fixed` only: the delay of every step, seconds")
    median_s: float | None = Field(default=None, gt=0.0, description="`lognormal` only: median delay, seconds")
    sigma: float | None = Field(default=None, ge=0.0, description="`lognormal` only: delay = median_s * exp(sigma * Z)")
    scale_s: float | None = Field(default=None, gt=0.0, description="`pareto` only: minimum delay, seconds")
    alpha: float | None = Field(default=None, gt=0.0, description="`pareto` only: shape (smaller: heavier tail)")
    trace_path: Path | None = Field(
        None, description="`trace` only: file of recorded delays, seconds, one per line (`#` starts a comment)"
    )
    max_s: float | None = Field(default=None, gt=0.0, description="cap on a sampled delay")
    failure_prob: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="probability that a step fails before the env applies it (a transient sandbox error); "
        "it fails its trajectory unless failure_retries recovers it",
    )
    failure_retries: int = Field(
        default=0,
        ge=0,
        le=10,
        description="tries again, each after a new delay, before a failed step fails its trajectory; a "
        "transient error leaves the env untouched, so the retry is the same step. Without retries the "
        "kept trajectories are biased toward short ones: a trajectory of n steps fails with "
        "1 - (1 - failure_prob)^n (docs/failures.md)",
    )

    @model_validator(mode="after")
    def _parameters_match_kind(self) -> LatencyConfig:
        required = _REQUIRED[self.kind]
        missing = [name for name in required if getattr(self, name) is None]
        if missing:
            raise ValueError(f"latency kind {self.kind!r} needs {', '.join(missing)}")
        parameters = {name for names in _REQUIRED.values() for name in names}
        stray = sorted(name for name in parameters - set(required) if getattr(self, name) is not None)
        if stray:
            raise ValueError(f"latency kind {self.kind!r} does not use {', '.join(stray)}")
        return self


def _given(value: _T | None) -> _T:
    """A parameter of the configured kind: the validator has checked that it is set."""
    if value is None:
        raise AssertionError("a latency parameter of the configured kind is unset (the validator checks it)")
    return value


LONG_TAIL_SIGMA = math.log(25.0) / NormalDist().inv_cdf(0.99)
PRESETS: dict[str, LatencyConfig] = {
    "long_tail": LatencyConfig(kind="lognormal", median_s=0.2, sigma=LONG_TAIL_SIGMA, failure_prob=0.02),
}


class LatencyModel:
    """Draws per-step delays and failures from a :class:`LatencyConfig`."""

    def __init__(self, config: LatencyConfig) -> None:
        self.config = config
        self._trace: np.ndarray | None = _read_trace(config.trace_path) if config.kind == "trace" else None

    @property
    def inert(self) -> bool:
        """No delay and no failure: a step need not draw from it (nor a trajectory seed a generator for it)."""
        return self.config.kind == "none" and self.config.failure_prob == 0

    def sample(self, rng: np.random.Generator) -> tuple[float, bool]:
        """One step: (delay in seconds, whether the step fails). Draws the delay, then the failure."""
        delay = float(self._delays(rng, 1)[0])
        failed = bool(rng.random() < self.config.failure_prob)
        return delay, failed

    def quantiles(
        self, qs: tuple[float, ...] = (0.5, 0.9, 0.99), n: int = 100_000, seed: int = 0
    ) -> dict[float, float]:
        """Empirical quantiles of ``n`` sampled delays (for tests and docs)."""
        delays = self._delays(np.random.default_rng(seed), n)
        return {q: float(np.quantile(delays, q)) for q in qs}

    def analytic_quantile(self, q: float) -> float:
        """The exact quantile ``q`` of the delay distribution (trace: the empirical one of the trace)."""
        cfg = self.config
        if cfg.kind == "none":
            value = 0.0
        elif cfg.kind == "fixed":
            value = _given(cfg.fixed_s)
        elif cfg.kind == "lognormal":
            value = _given(cfg.median_s) * math.exp(_given(cfg.sigma) * NormalDist().inv_cdf(q))
        elif cfg.kind == "pareto":
            value = _given(cfg.scale_s) * (1.0 - q) ** (-1.0 / _given(cfg.alpha))
        else:
            value = float(np.quantile(_given(self._trace), q))
        return min(value, cfg.max_s) if cfg.max_s is not None else value

    def _delays(self, rng: np.random.Generator, n: int) -> np.ndarray:
        cfg = self.config
        if cfg.kind == "none":
            delays = np.zeros(n)
        elif cfg.kind == "fixed":
            delays = np.full(n, cfg.fixed_s)
        elif cfg.kind == "lognormal":
            delays = _given(cfg.median_s) * np.exp(_given(cfg.sigma) * rng.standard_normal(n))
        elif cfg.kind == "pareto":
            delays = _given(cfg.scale_s) * (1.0 + rng.pareto(_given(cfg.alpha), n))  # numpy's is Lomax
        else:
            delays = rng.choice(_given(self._trace), size=n)
        return np.minimum(delays, cfg.max_s) if cfg.max_s is not None else delays


def _read_trace(path: Path | None) -> np.ndarray:
    assert path is not None
    if not path.is_file():
        raise ValueError(f"latency trace_path {path} does not exist")
    values = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"latency trace {path}, line {number}: {text!r} is not a number of seconds") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"latency trace {path}, line {number}: delay must be finite and >= 0, got {value}")
        values.append(value)
    if not values:
        raise ValueError(f"latency trace {path} holds no delays")
    return np.asarray(values, dtype=float)
