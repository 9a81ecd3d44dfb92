"""Distributions of token counts, turn counts and latencies in a workload profile.

Agent workloads are long-tailed (a few responses are ten times the median), so a profile gives a
distribution, not a number. Each spec knows three things, all needed elsewhere:

- ``mean()``: the expected value *after* clipping to ``[min, max]``, in closed form, for the planner;
- ``quantile(q)``: for the planner's estimate of the slowest trajectory of a batch;
- ``sampler(rng)``: a fast source of samples for the simulator.

Closed forms are written out here (numpy has no clipped-lognormal mean); the normal CDF and its
inverse come from :mod:`statistics` in the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel

_STD_NORMAL = NormalDist()
BLOCK = 4096  # samples drawn per numpy call; the simulator pops them one by one


class _Clipped(FrozenModel):
    min: float = Field(default=0.0, ge=0)
    max: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _bounds(self) -> _Clipped:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    def _clip_scalar(self, x: float) -> float:
        x = max(x, self.min)
        return min(x, self.max) if self.max is not None else x

    def _clip(self, xs: np.ndarray) -> np.ndarray:
        return np.clip(xs, self.min, self.max if self.max is not None else np.inf)

    def _low_part(self) -> float:
        """The contribution ``min * P(X < min)`` of the lower clip to the mean."""
        return self.min * self.cdf(self.min) if self.min > 0 else 0.0

    def upper(self) -> float:
        """Largest value a sample can take (inf when unbounded)."""
        return self.max if self.max is not None else float("inf")

    def cdf(self, x: float) -> float:  # pragma: no cover - each subclass overrides
        raise NotImplementedError


class Constant(_Clipped):
    kind: Literal["constant"] = "constant"
    value: float = Field(ge=0)

    def mean(self) -> float:
        return self._clip_scalar(self.value)

    def upper(self) -> float:
        return self._clip_scalar(self.value)

    def quantile(self, q: float) -> float:
        return self._clip_scalar(self.value)

    def cdf(self, x: float) -> float:
        return 1.0 if x >= self.value else 0.0

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self._clip_scalar(self.value))


class LogNormal(_Clipped):
    """Parameterised by its (unclipped) mean and the sigma of log X, which sets the tail weight."""

    kind: Literal["lognormal"] = "lognormal"
    mean_value: float = Field(gt=0, alias="mean")
    sigma: float = Field(gt=0)

    @property
    def mu(self) -> float:
        return math.log(self.mean_value) - self.sigma**2 / 2

    def cdf(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return _STD_NORMAL.cdf((math.log(x) - self.mu) / self.sigma)

    def _partial_mean_below(self, c: float) -> float:
        """E[X · 1{X < c}] for the unclipped lognormal."""
        if c <= 0:
            return 0.0
        return self.mean_value * _STD_NORMAL.cdf((math.log(c) - self.mu - self.sigma**2) / self.sigma)

    def mean(self) -> float:
        hi = self.max if self.max is not None else math.inf
        below_hi = self._partial_mean_below(hi) if hi != math.inf else self.mean_value
        upper = hi * (1.0 - self.cdf(hi)) if hi != math.inf else 0.0
        return below_hi - self._partial_mean_below(self.min) + self._low_part() + upper

    def quantile(self, q: float) -> float:
        return self._clip_scalar(math.exp(self.mu + self.sigma * _STD_NORMAL.inv_cdf(min(max(q, 1e-12), 1 - 1e-12))))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._clip(rng.lognormal(self.mu, self.sigma, n))


class Exponential(_Clipped):
    kind: Literal["exponential"] = "exponential"
    mean_value: float = Field(gt=0, alias="mean")

    def cdf(self, x: float) -> float:
        return 1.0 - math.exp(-x / self.mean_value) if x > 0 else 0.0

    def _partial_mean_below(self, c: float) -> float:
        m = self.mean_value
        return m - (c + m) * math.exp(-c / m)

    def mean(self) -> float:
        hi_part = (
            self.mean_value
            if self.max is None
            else self._partial_mean_below(self.max) + self.max * (1 - self.cdf(self.max))
        )
        return hi_part - self._partial_mean_below(self.min) + self._low_part()

    def quantile(self, q: float) -> float:
        return self._clip_scalar(-self.mean_value * math.log(max(1.0 - q, 1e-12)))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._clip(rng.exponential(self.mean_value, n))


class Uniform(_Clipped):
    kind: Literal["uniform"] = "uniform"
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self

    def cdf(self, x: float) -> float:
        if self.high == self.low:
            return 1.0 if x >= self.low else 0.0
        return min(max((x - self.low) / (self.high - self.low), 0.0), 1.0)

    def mean(self) -> float:
        if self.high == self.low:
            return self._clip_scalar(self.low)
        # E[clip(U, min, max)]: below a the value is min, above b it is max, in between x itself.
        a = min(max(self.min, self.low), self.high)
        b = self.high if self.max is None else min(max(self.max, self.low), self.high)
        top = self.max if self.max is not None else self.high
        total = self.min * (a - self.low) + (b * b - a * a) / 2.0 + top * (self.high - b)
        return total / (self.high - self.low)

    def quantile(self, q: float) -> float:
        return self._clip_scalar(self.low + q * (self.high - self.low))

    def upper(self) -> float:
        return self._clip_scalar(self.high)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._clip(rng.uniform(self.low, self.high, n))


class Empirical(_Clipped):
    """Observed values, resampled with replacement (what calibration produces from a real run)."""

    kind: Literal["empirical"] = "empirical"
    values: list[float] = Field(min_length=1)

    def _clipped(self) -> np.ndarray:
        return self._clip(np.asarray(self.values, dtype=float))

    def cdf(self, x: float) -> float:
        return float(np.mean(np.asarray(self.values) <= x))

    def mean(self) -> float:
        return float(self._clipped().mean())

    def upper(self) -> float:
        return float(self._clipped().max())

    def quantile(self, q: float) -> float:
        return float(np.quantile(self._clipped(), min(max(q, 0.0), 1.0)))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self._clipped(), size=n, replace=True)


Distribution = Annotated[Constant | LogNormal | Exponential | Uniform | Empirical, Field(discriminator="kind")]


def sampler(
    dist: Constant | LogNormal | Exponential | Uniform | Empirical, rng: np.random.Generator, integer: bool = False
) -> Callable[[], float]:
    """A zero-argument function returning one sample; numpy draws are made ``BLOCK`` at a time.

    ``integer`` rounds to the nearest whole number and never returns less than 1 (token and turn
    counts).
    """
    buffer: list[float] = []

    def refill() -> None:
        xs = dist.draw(rng, BLOCK)
        if integer:
            xs = np.maximum(np.rint(xs), 1.0)
        buffer.extend(xs.tolist())
        buffer.reverse()

    def next_value() -> float:
        if not buffer:
            refill()
        return buffer.pop()

    return next_value
