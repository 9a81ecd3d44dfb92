"""An online model of one engine step's latency, fitted from the steps the engine actually ran.

``time = a + b * decodes + c * prefill_tokens + d * context_tokens`` where ``decodes`` is the number of
sequences that decode one token this step, ``prefill_tokens`` the prompt tokens prefilled this step and
``context_tokens`` the KV tokens the decodes attend over. The coefficients are a ridge least-squares fit
over the observed steps with exponential forgetting (``decay`` per observation), so the model follows the
machine when its speed drifts (another process taking the core). Coefficients are clipped at zero: a step
never gets cheaper by adding work. Until ``min_samples`` steps are seen, :meth:`predict` returns the
conservative ``prior_s`` per unit of work, so a cold model admits little (against a tight SLO, nothing: the
co-serving executor therefore calibrates its models before serving starts, ``CoServingExecutor.calibrate``).

Pure: no clock, no torch; the caller times its own steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FEATURES = 4  # bias, decodes, prefill_tokens, context_tokens


@dataclass(frozen=True)
class StepShape:
    decodes: int = 0
    prefill_tokens: int = 0
    context_tokens: int = 0

    def features(self) -> list[float]:
        return [1.0, float(self.decodes), float(self.prefill_tokens), float(self.context_tokens)]

    @property
    def empty(self) -> bool:
        return self.decodes == 0 and self.prefill_tokens == 0


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Solve a small dense linear system by Gaussian elimination with partial pivoting (singular -> zeros)."""
    n = len(rhs)
    a = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-300:
            return [0.0] * n
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            f = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= f * a[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


@dataclass
class StepLatencyModel:
    decay: float = 0.995  # weight of the past per new observation (1.0: never forget)
    ridge: float = 1e-9  # keeps the fit defined before every feature has varied
    min_samples: int = 8
    prior_s: float = 0.05  # seconds per step before the model is fitted (pessimistic on purpose)
    samples: int = 0
    _xtx: list[list[float]] = field(default_factory=lambda: [[0.0] * FEATURES for _ in range(FEATURES)])
    _xty: list[float] = field(default_factory=lambda: [0.0] * FEATURES)
    _coef: list[float] | None = None

    def observe(self, shape: StepShape, seconds: float) -> None:
        """Add one measured step."""
        if shape.empty or not seconds >= 0.0:
            return
        x = shape.features()
        for i in range(FEATURES):
            self._xty[i] = self.decay * self._xty[i] + x[i] * seconds
            for j in range(FEATURES):
                self._xtx[i][j] = self.decay * self._xtx[i][j] + x[i] * x[j]
        self.samples += 1
        self._coef = None

    @property
    def fitted(self) -> bool:
        return self.samples >= self.min_samples

    def coefficients(self) -> list[float]:
        """``[a, b, c, d]`` in seconds (per step, per decode, per prefill token, per context token)."""
        if self._coef is None:
            # ridge relative to each feature's own scale, plus a floor for a feature that never varied
            matrix = [
                [self._xtx[i][j] + (self.ridge * self._xtx[i][i] + 1e-12 if i == j else 0.0) for j in range(FEATURES)]
                for i in range(FEATURES)
            ]
            self._coef = [max(0.0, c) for c in solve(matrix, self._xty)]
        return self._coef

    def predict(self, shape: StepShape) -> float:
        """Predicted seconds of a step of this shape (0 for an empty step)."""
        if shape.empty:
            return 0.0
        if not self.fitted:
            return self.prior_s * (1.0 + shape.decodes / 8.0 + shape.prefill_tokens / 256.0)
        return sum(c * x for c, x in zip(self.coefficients(), shape.features(), strict=True))
