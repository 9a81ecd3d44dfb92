"""Per-operation cost of one engine replica, one training group and one reward server.

The simulator and the planner talk to these objects, never to raw formulas, so that a calibrated
model (fitted from a real run's timeline) and the roofline model (from the catalogue) are
interchangeable. Roofline versions delegate every number to :mod:`rollarc.cluster.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from rollarc.cluster import roofline
from rollarc.cluster.catalogue import GpuSpec
from rollarc.cluster.decode_span import IterationCost
from rollarc.cluster.workload import Efficiency, ModelSpec


class EngineCost(Protocol):
    """An inference engine replica: its speed and its memory limits."""

    @property
    def devices(self) -> int: ...

    @property
    def kv_capacity_tokens(self) -> float: ...

    @property
    def max_batch(self) -> int: ...

    def prefill_time(self, new_tokens: float) -> float: ...

    def decode_cost(self, batch: int, context_tokens: float) -> IterationCost: ...

    def flops(self, tokens: float) -> float | None:
        """FLOPs of processing ``tokens`` (for utilisation), None when unknown (calibrated)."""
        ...

    def peak_flops(self) -> float | None: ...


class TrainCost(Protocol):
    @property
    def devices(self) -> int: ...

    def time(self, tokens: float) -> float: ...

    def flops(self, tokens: float) -> float | None: ...

    def peak_flops(self) -> float | None: ...


class ServiceCost(Protocol):
    """A reward server (one instance): time to score one trajectory of ``tokens`` tokens."""

    def time(self, tokens: float) -> float: ...


@dataclass(frozen=True)
class RooflineEngine:
    gpu: GpuSpec
    model: ModelSpec
    tp: int
    eff: Efficiency
    # decode terms that depend on the batch size only (floor, weight bytes read, slope): the simulator asks for
    # the cost of every decode span, and the batch takes few values
    _per_batch: dict[int, tuple[float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.kv_capacity_tokens <= 0:
            raise ValueError(
                f"{self.model.name} does not fit in {self.tp} device(s) of {self.gpu.memory_GB:g} GB "
                f"at gpu_memory_utilization={self.eff.gpu_memory_utilization}; use more units per replica"
            )

    @property
    def devices(self) -> int:
        return self.tp

    @cached_property
    def kv_capacity_tokens(self) -> float:
        return roofline.kv_capacity_tokens(self.gpu, self.model, self.tp, self.eff.gpu_memory_utilization)

    @cached_property
    def _bandwidth(self) -> float:
        return self.tp * self.gpu.hbm_bytes_per_s * self.eff.decode_bw_eff

    @cached_property
    def _kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token

    @property
    def max_batch(self) -> int:
        return self.eff.max_batch

    def prefill_time(self, new_tokens: float) -> float:
        return roofline.prefill_time(self.gpu, self.model.n_active, new_tokens, self.tp, self.eff.prefill_mfu)

    def decode_cost(self, batch: int, context_tokens: float) -> IterationCost:
        terms = self._per_batch.get(batch)
        if terms is None:
            terms = self._per_batch[batch] = (
                roofline.decode_compute_time(self.gpu, self.model, batch, self.tp, self.eff.decode_mfu),
                roofline.weight_bytes_read(self.model, batch),
                self._kv_bytes_per_token * batch / self._bandwidth,
            )
        floor, weights, slope = terms
        return IterationCost(
            floor=floor,
            base=roofline.read_time(weights, self._kv_bytes_per_token, context_tokens, self._bandwidth),
            slope=slope,
            overhead=self.eff.iteration_overhead_s,
        )

    def flops(self, tokens: float) -> float:
        return 2.0 * self.model.n_active * tokens

    def peak_flops(self) -> float:
        return self.tp * self.gpu.flops


@dataclass(frozen=True)
class RooflineTrain:
    gpu: GpuSpec
    model: ModelSpec
    devices: int
    eff: Efficiency

    def time(self, tokens: float) -> float:
        return roofline.train_time(
            self.gpu, self.model.n_active, tokens, self.devices, self.eff.train_mfu, self.eff.extra_forward_passes
        )

    def flops(self, tokens: float) -> float:
        return (6.0 + 2.0 * self.eff.extra_forward_passes) * self.model.n_active * tokens

    def peak_flops(self) -> float:
        return self.devices * self.gpu.flops


@dataclass(frozen=True)
class RooflineReward:
    """A dense reward model on one device reading the trajectory once."""

    gpu: GpuSpec
    params: float
    mfu: float

    def time(self, tokens: float) -> float:
        return roofline.prefill_time(self.gpu, self.params, tokens, 1, self.mfu)


@dataclass(frozen=True)
class LinearEngine:
    """A calibrated engine: ``prefill = per_request + per_token · tokens``, decode iteration
    ``= base + per_seq · batch + per_ctx · context``. Fitted, so no FLOP figures."""

    prefill_per_token_s: float
    request_overhead_s: float
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_ctx_token_s: float
    kv_capacity_tokens: float
    max_batch: int
    devices: int = 1

    def prefill_time(self, new_tokens: float) -> float:
        return self.request_overhead_s + self.prefill_per_token_s * new_tokens

    def decode_cost(self, batch: int, context_tokens: float) -> IterationCost:
        base = self.decode_base_s + self.decode_per_seq_s * batch + self.decode_per_ctx_token_s * context_tokens
        return IterationCost(floor=0.0, base=base, slope=self.decode_per_ctx_token_s * batch)

    def flops(self, tokens: float) -> None:
        return None

    def peak_flops(self) -> None:
        return None


@dataclass(frozen=True)
class LinearTrain:
    fixed_s: float
    per_token_s: float
    devices: int = 1

    def time(self, tokens: float) -> float:
        return self.fixed_s + self.per_token_s * tokens

    def flops(self, tokens: float) -> None:
        return None

    def peak_flops(self) -> None:
        return None
