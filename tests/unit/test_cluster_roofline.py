"""Roofline formulas against numbers worked out by hand."""

import math

import pytest

from rollarc.cluster import roofline
from rollarc.cluster.catalogue import GpuSpec
from rollarc.cluster.engine_cost import RooflineEngine
from rollarc.cluster.workload import Efficiency, ModelSpec

H800 = GpuSpec(tflops_bf16=989, hbm_TBps=3.35, memory_GB=80, nvlink_GBps=400, network_GBps=50, price_per_hour=2.5)
H20 = GpuSpec(tflops_bf16=148, hbm_TBps=4.0, memory_GB=96, nvlink_GBps=900, network_GBps=50, price_per_hour=1.2)
DENSE_7B = ModelSpec(total_params=7e9, layers=32, hidden_size=4096, kv_heads=8, head_dim=128)
MOE = ModelSpec(total_params=100e9, active_params=10e9, layers=10, hidden_size=1024, kv_heads=2, head_dim=64)


def test_prefill_is_two_flops_per_active_param_per_token():
    # 2 * 7e9 * 1000 / (1 * 989e12 * 0.5) = 1.4e13 / 4.945e14
    assert roofline.prefill_time(H800, 7e9, 1000, tp=1, mfu=0.5) == pytest.approx(0.028311425, rel=1e-6)
    # tp=2 halves it
    assert roofline.prefill_time(H800, 7e9, 1000, tp=2, mfu=0.5) == pytest.approx(0.0141557, rel=1e-5)


def test_kv_bytes_per_token():
    # 2 (K,V) * 32 layers * 8 heads * 128 dim * 2 bytes = 131072
    assert DENSE_7B.kv_bytes_per_token == 131072


def test_decode_small_batch_is_bandwidth_bound_on_weights_plus_kv():
    # batch 1, 1000 tokens of context: (14e9 + 131072e3) bytes / (3.35e12 * 0.7)
    expected = (14e9 + 131072 * 1000) / (3.35e12 * 0.7)
    t = roofline.decode_step_time(H800, DENSE_7B, 1, 1000, tp=1, mfu=0.5, bw_eff=0.7)
    assert t == pytest.approx(expected)
    assert t == pytest.approx(0.0060260, rel=1e-4)


def test_decode_large_batch_becomes_compute_bound():
    # On H20 at batch 512 with no context: compute 2*7e9*512/(148e12*0.5) = 0.096865 s
    # beats memory 14e9/(4e12*0.7) = 0.005 s.
    compute = 2 * 7e9 * 512 / (148e12 * 0.5)
    t = roofline.decode_step_time(H20, DENSE_7B, 512, 0, tp=1, mfu=0.5, bw_eff=0.7)
    assert t == pytest.approx(compute)
    assert t == pytest.approx(0.0968649, rel=1e-5)


def test_moe_decode_reads_active_bytes_at_batch_one_and_all_experts_at_large_batch():
    assert roofline.weight_bytes_read(MOE, 1) == pytest.approx(20e9)  # 10e9 active * 2 bytes
    # batch 2: 1 - 0.9^2 = 0.19 of 200e9 bytes
    assert roofline.weight_bytes_read(MOE, 2) == pytest.approx(0.19 * 200e9)
    assert roofline.weight_bytes_read(MOE, 1000) == pytest.approx(200e9, rel=1e-9)


def test_train_is_six_flops_per_active_param_per_token():
    # 6 * 7e9 * 1e6 / (8 * 989e12 * 0.35) = 4.2e16 / 2.7692e15
    assert roofline.train_time(H800, 7e9, 1e6, devices=8, mfu=0.35) == pytest.approx(15.16684, rel=1e-5)
    # one extra forward pass adds 2 FLOPs per param per token: 8/6 of that
    assert roofline.train_time(H800, 7e9, 1e6, devices=8, mfu=0.35, extra_forward_passes=1) == pytest.approx(
        15.16684 * 8 / 6, rel=1e-5
    )


def test_weight_sync_is_bytes_over_link_per_shard():
    # 14e9 bytes to tp=4 receivers over 50 GB/s links each: 14e9 / (4 * 50e9) = 0.07 s, + 0.5 s latency
    assert roofline.weight_sync_time(14e9, 50e9, receiver_tp=4, latency_s=0.5) == pytest.approx(0.57)


def test_memory_limits():
    # 2 H800 at 0.9: 144e9 bytes; minus 14e9 of weights = 130e9 / 131072 per token
    assert roofline.kv_capacity_tokens(H800, DENSE_7B, 2, 0.9) == pytest.approx(130e9 / 131072)
    # 200 GB of MoE weights: 1 H800 holds 72 GB, ... 4 hold 288 GB, 0.8 of it is 230 >= 200
    assert roofline.min_tensor_parallel(H800, MOE, 0.9) == 4
    # training 100e9 params * 16 bytes = 1.6e12 over 72e9 per device -> 22.2 -> 23
    assert roofline.min_train_devices(H800, MOE, 16, 0.9) == 23
    assert roofline.device_cost_usd(2.5, 8, 1800) == pytest.approx(10.0)


def test_engine_cost_splits_the_roofline_into_iteration_terms():
    eff = Efficiency(decode_mfu=0.5, decode_bw_eff=0.7, iteration_overhead_s=0.001)
    engine = RooflineEngine(H800, DENSE_7B, 1, eff)
    cost = engine.decode_cost(4, 2000)
    assert cost.step(0) == pytest.approx(roofline.decode_step_time(H800, DENSE_7B, 4, 2000, 1, 0.5, 0.7, 0.001))
    # after 10 iterations the 4 sequences hold 40 more tokens of KV
    assert cost.step(10) == pytest.approx(roofline.decode_step_time(H800, DENSE_7B, 4, 2040, 1, 0.5, 0.7, 0.001))


def test_engine_that_cannot_hold_the_model_is_rejected():
    with pytest.raises(ValueError, match="does not fit"):
        RooflineEngine(H800, MOE, 1, Efficiency())
    assert math.isfinite(RooflineEngine(H800, MOE, 4, Efficiency()).kv_capacity_tokens)
