"""Roofline cost model: pure formulas for prefill, decode, training, weight sync and memory.

Each formula is the one in REFERENCES.md, written once here and used by both the planner and the
simulator. Times are seconds, sizes bytes, rates per second. ``tp`` is the number of devices one
engine replica (or one training group) spreads the work over; the formulas assume it scales
perfectly, which the efficiencies (MFU, bandwidth efficiency) are there to correct.

MoE decode: ``n_active`` parameters are read per token, but a batch of ``b`` tokens touches the
union of the experts its tokens route to. We model each weight as touched by one token with
probability ``n_active / n_total`` independently, so a batch reads
``weight_bytes · (1 − (1 − n_active/n_total)^b)``: the active bytes at ``b = 1`` and all the
experts for large batches.
"""

from __future__ import annotations

import math

from rollarc.cluster.catalogue import GpuSpec
from rollarc.cluster.workload import ModelSpec


def prefill_time(gpu: GpuSpec, n_active: float, tokens: float, tp: int, mfu: float) -> float:
    """``2 · N_active · tokens / (tp · peak · MFU)``: compute-bound."""
    return 2.0 * n_active * tokens / (tp * gpu.flops * mfu)


def weight_bytes_read(model: ModelSpec, batch: float) -> float:
    """Bytes of weights one decode iteration of ``batch`` sequences reads (MoE expert coverage)."""
    if batch <= 0:
        return 0.0
    touched = 1.0 - (1.0 - model.n_active / model.total_params) ** batch
    return model.weight_bytes * touched


def decode_compute_time(gpu: GpuSpec, model: ModelSpec, batch: float, tp: int, mfu: float) -> float:
    """``2 · N_active · batch / (tp · peak · MFU)``: where a large batch becomes compute-bound."""
    return 2.0 * model.n_active * batch / (tp * gpu.flops * mfu)


def decode_memory_time(
    gpu: GpuSpec, model: ModelSpec, batch: float, context_tokens: float, tp: int, bw_eff: float
) -> float:
    """``(weight_bytes_read + kv_bytes_per_token · context) / (tp · HBM · eff)``: bandwidth-bound."""
    return read_time(
        weight_bytes_read(model, batch), model.kv_bytes_per_token, context_tokens, tp * gpu.hbm_bytes_per_s * bw_eff
    )


def read_time(weight_bytes: float, kv_bytes_per_token: float, context_tokens: float, bandwidth: float) -> float:
    """:func:`decode_memory_time` from its parts, for a caller that keeps the batch-only ones (the simulator)."""
    return (weight_bytes + kv_bytes_per_token * context_tokens) / bandwidth


def decode_step_time(
    gpu: GpuSpec,
    model: ModelSpec,
    batch: float,
    context_tokens: float,
    tp: int,
    mfu: float,
    bw_eff: float,
    overhead_s: float = 0.0,
) -> float:
    """One decode iteration of ``batch`` sequences holding ``context_tokens`` in KV, all together."""
    compute = decode_compute_time(gpu, model, batch, tp, mfu)
    memory = decode_memory_time(gpu, model, batch, context_tokens, tp, bw_eff)
    return max(compute, memory) + overhead_s


def train_time(
    gpu: GpuSpec, n_active: float, tokens: float, devices: int, mfu: float, extra_forward_passes: int = 0
) -> float:
    """``(6 + 2·extra) · N_active · tokens / (devices · peak · MFU)``."""
    return (6.0 + 2.0 * extra_forward_passes) * n_active * tokens / (devices * gpu.flops * mfu)


def weight_sync_time(weight_bytes: float, link_bytes_per_s: float, receiver_tp: int, latency_s: float = 0.0) -> float:
    """Bytes over the link: each receiving device needs its ``1/tp`` shard over its own link, and a
    pipelined broadcast keeps that time independent of the number of receivers."""
    return weight_bytes / (receiver_tp * link_bytes_per_s) + latency_s


def engine_swap_time(gpu: GpuSpec, weight_bytes: float, tp: int) -> float:
    """Copy a received shard into the live weights: read + write of ``weight_bytes / tp`` in HBM."""
    return 2.0 * weight_bytes / (tp * gpu.hbm_bytes_per_s)


def kv_capacity_tokens(gpu: GpuSpec, model: ModelSpec, tp: int, memory_utilization: float) -> float:
    """Tokens of KV cache that fit next to the weights in ``tp`` devices (<= 0: the model does not fit)."""
    return (tp * gpu.memory_bytes * memory_utilization - model.weight_bytes) / model.kv_bytes_per_token


def min_tensor_parallel(
    gpu: GpuSpec, model: ModelSpec, memory_utilization: float, kv_share: float = 0.2, max_tp: int = 64
) -> int:
    """Smallest power-of-two ``tp`` whose memory holds the weights and leaves ``kv_share`` of it for KV."""
    tp = 1
    while tp <= max_tp:
        usable = tp * gpu.memory_bytes * memory_utilization
        if model.weight_bytes <= usable * (1.0 - kv_share):
            return tp
        tp *= 2
    raise ValueError(f"{model.name} ({model.weight_bytes / 1e9:.0f} GB of weights) does not fit in {max_tp} devices")


def min_train_devices(gpu: GpuSpec, model: ModelSpec, bytes_per_param: float, memory_utilization: float) -> int:
    """Devices whose memory holds the sharded training state (weights, grads, optimiser)."""
    return max(1, math.ceil(model.total_params * bytes_per_param / (gpu.memory_bytes * memory_utilization)))


def device_cost_usd(price_per_hour: float, devices: float, seconds: float) -> float:
    return price_per_hour * devices * seconds / 3600.0
