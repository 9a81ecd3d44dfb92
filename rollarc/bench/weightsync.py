"""``rollarc bench weightsync``: lossless sparse bf16 deltas vs full weight copies, and relay vs direct sends.

Three measurements in one run, single-threaded (``torch.set_num_threads(1)``):

1. **Real updates.** The ``tiny`` policy keeps fp32 master weights and takes real AdamW steps
   (betas 0.9/0.999, weight decay 0.01) on the next-character loss of arithmetic lines
   (``"37+58=95"``), at lr 1e-6 and at lr 1e-5. After a few warm-up steps (Adam's first steps move
   every weight by the full lr), each step's bf16 copy is delta-encoded against the previous one and
   applied to a copy of it. Reported: changed fraction, full-copy bytes / delta bytes, bit-exactness.
2. **Synthetic updates at scale.** A set of 1e9 bf16 parameters (quick: 2e7) in tensors of
   4096x4096, generated and processed in chunks of 64M elements so that memory stays bounded. Each
   chunk takes one simulated AdamW step at lr 1e-6 from a warm optimiser state: fp32 master weights
   ~ N(0, 0.02^2); per-element gradient scales log-normal; first moment at its noise steady state;
   a fresh gradient. Reported: changed fraction, bytes, and encode / decode throughput in GB of
   model (bf16) bytes per second of wall time and of process CPU time (the machine is shared);
   the same for the full-copy baseline.
3. **Relay.** 4 sites x 8 receivers (quick: 2 x 2) as Ray actors receive the same bf16 versions of
   the tiny policy, once relayed (one copy per site, then a binary tree inside) and once sent
   directly to every receiver. Reported: bytes that cross sites each way, and their ratio.

The last line is the JSON result.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import resource
import time
from dataclasses import dataclass

import torch

from rollarc.bench.report_file import add_docs_flag, emit_json, markdown_table, publish
from rollarc.ray_local_start import init_local_ray
from rollarc.sync.codec import apply_delta, encode_delta, encode_full, full_nbytes
from rollarc.sync.config import RelayConfig

TENSOR_SIDE = 4096
CHUNK_ELEMENTS = 64 << 20


@dataclass(frozen=True)
class RealResult:
    lr: float
    steps: int
    changed_fraction: float
    full_bytes: int
    delta_bytes: int
    bit_exact: bool
    versions: list[dict[str, torch.Tensor]]

    @property
    def bytes_ratio(self) -> float:
        return self.full_bytes / self.delta_bytes


@dataclass(frozen=True)
class SyntheticResult:
    params: int
    changed_fraction: float
    full_bytes: int
    delta_bytes: int
    encode_s: float
    decode_s: float
    encode_cpu_s: float
    decode_cpu_s: float
    full_encode_s: float
    full_decode_s: float
    bit_exact: bool

    @property
    def model_bytes(self) -> int:
        return self.params * 2


@dataclass(frozen=True)
class RelayResult:
    sites: int
    per_site: int
    versions: int
    relay_cross_bytes: int
    relay_intra_bytes: int
    direct_cross_bytes: int
    identical: bool

    @property
    def cross_site_ratio(self) -> float:
        return self.direct_cross_bytes / self.relay_cross_bytes


# --- 1. real optimiser steps of the tiny policy ---------------------------------------------------------------


def arithmetic_text(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        a, b = rng.randrange(100), rng.randrange(100)
        op = rng.choice("+-*")
        out.append(f"{a}{op}{b}={apply_op(a, op, b)}")
    return "\n".join(out)


def apply_op(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def real_updates(lr: float, warmup: int, steps: int, seed: int = 0) -> RealResult:
    from rollarc.models import new_policy  # deferred: transformers is heavy

    model, tokenizer = new_policy("tiny", seed=seed)
    model.train()
    ids = torch.tensor(tokenizer(arithmetic_text(4000, seed), verbose=False)["input_ids"])
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)

    def step() -> None:
        starts = torch.randint(0, len(ids) - 129, (8,), generator=gen)
        batch = torch.stack([ids[s : s + 128] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    def bf16() -> dict[str, torch.Tensor]:
        return {name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}

    for _ in range(warmup):
        step()
    versions = [bf16()]
    changed = elements = full = delta = 0
    exact = True
    for _ in range(steps):
        step()
        old, new = versions[-1], bf16()
        versions.append(new)
        buckets = list(encode_delta(old, new))
        state = {name: t.clone() for name, t in old.items()}
        apply_delta(state, buckets)
        exact &= all(torch.equal(state[n].view(torch.int16), new[n].view(torch.int16)) for n in new)
        changed += sum(b.changed for b in buckets)
        elements += sum(b.elements for b in buckets)
        full += full_nbytes(new)
        delta += sum(b.nbytes for b in buckets)
    return RealResult(lr, steps, changed / elements, full, delta, exact, versions)


# --- 2. a simulated AdamW step on 1e9 bf16 parameters, chunk by chunk ------------------------------------------


def adam_chunk(elements: int, lr: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 weights before and after one AdamW step from a warm optimiser state (see the module docstring)."""
    beta1, beta2, weight_decay, eps = 0.9, 0.999, 0.01, 1e-8
    gen = torch.Generator().manual_seed(seed)
    master = torch.randn(elements, generator=gen).mul_(0.02)
    scale = torch.randn(elements, generator=gen).exp_().mul_(1e-3)
    grad = torch.randn(elements, generator=gen).mul_(scale)
    moment1 = torch.randn(elements, generator=gen).mul_(scale).mul_(math.sqrt((1 - beta1) / (1 + beta1)))
    moment1.mul_(beta1).add_(grad, alpha=1 - beta1)
    moment2 = scale.square_().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    del grad, scale
    before = master.to(torch.bfloat16)
    update = moment1.div_(moment2.sqrt_().add_(eps)).add_(master, alpha=weight_decay)
    del moment2
    master.sub_(update, alpha=lr)
    return before, master.to(torch.bfloat16)


def as_tensors(flat: torch.Tensor, prefix: str) -> dict[str, torch.Tensor]:
    side = TENSOR_SIDE * TENSOR_SIDE
    return {
        f"{prefix}.{i}": flat[i * side : (i + 1) * side].view(TENSOR_SIDE, -1)
        if flat.numel() >= (i + 1) * side
        else flat[i * side :]
        for i in range(math.ceil(flat.numel() / side))
    }


def synthetic_updates(params: int, lr: float, chunk: int = CHUNK_ELEMENTS, progress: bool = True) -> SyntheticResult:
    changed = full = delta = 0
    timings = dict.fromkeys(["enc", "dec", "enc_cpu", "dec_cpu", "full_enc", "full_dec"], 0.0)
    exact = True
    done = 0
    for index, start in enumerate(range(0, params, chunk)):
        size = min(chunk, params - start)
        old_flat, new_flat = adam_chunk(size, lr, seed=index)
        old, new = as_tensors(old_flat, f"chunk{index}"), as_tensors(new_flat, f"chunk{index}")
        wall, cpu = time.perf_counter(), time.process_time()
        buckets = list(encode_delta(old, new))
        timings["enc"] += time.perf_counter() - wall
        timings["enc_cpu"] += time.process_time() - cpu
        state = {name: t.clone() for name, t in old.items()}
        wall, cpu = time.perf_counter(), time.process_time()
        apply_delta(state, buckets)
        timings["dec"] += time.perf_counter() - wall
        timings["dec_cpu"] += time.process_time() - cpu
        exact &= torch.equal(
            torch.cat([t.reshape(-1) for t in state.values()]).view(torch.int16), new_flat.view(torch.int16)
        )
        changed += sum(b.changed for b in buckets)
        delta += sum(b.nbytes for b in buckets)
        full += full_nbytes(new)
        wall = time.perf_counter()
        copies = list(encode_full(new))
        timings["full_enc"] += time.perf_counter() - wall
        wall = time.perf_counter()
        apply_delta(state, copies)
        timings["full_dec"] += time.perf_counter() - wall
        del buckets, copies, state, old, new, old_flat, new_flat
        done += size
        if progress:
            print(
                f"  synthetic: {done / 1e9:.3f}e9 / {params / 1e9:.3f}e9 params, changed {changed / done:.4%}, "
                f"ratio {full / delta:.1f}x",
                flush=True,
            )
    return SyntheticResult(
        params,
        changed / params,
        full,
        delta,
        timings["enc"],
        timings["dec"],
        timings["enc_cpu"],
        timings["dec_cpu"],
        timings["full_enc"],
        timings["full_dec"],
        exact,
    )


# --- 3. relay vs direct sends over Ray -------------------------------------------------------------------------


def relay_bytes(versions: list[dict[str, torch.Tensor]], sites: int, per_site: int) -> RelayResult:
    import ray  # deferred: Ray is heavy; only --relay needs it

    from rollarc.sync.relay import Member, WeightRelay

    started = not ray.is_initialized()
    if started:
        init_local_ray(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    members = [Member(f"site{s}-r{r}", f"site{s}") for s in range(sites) for r in range(per_site)]
    totals: dict[str, tuple[int, int]] = {}
    identical = True
    try:
        for topology in ("tree", "direct"):
            relay = WeightRelay(members, RelayConfig(method="delta", topology=topology, fanout=2))
            try:
                cross = intra = 0
                for state in versions:
                    report = relay.publish(state)
                    cross += report.cross_site_bytes
                    intra += report.intra_site_bytes
                identical &= all(relay.verify().values())
                totals[topology] = (cross, intra)
            finally:
                relay.shutdown()
    finally:
        if started:
            ray.shutdown()
    return RelayResult(
        sites, per_site, len(versions), totals["tree"][0], totals["tree"][1], totals["direct"][0], identical
    )


# --- report ----------------------------------------------------------------------------------------------------


def gb_s(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def docs_body(real: list[RealResult], syn: SyntheticResult, relay: RelayResult, result: dict) -> str:
    rows = [
        [
            f"tiny policy, real AdamW, lr {r.lr:g}",
            f"{r.changed_fraction:.2%}",
            f"{r.full_bytes / r.steps / 1e6:.2f} MB",
            f"{r.delta_bytes / r.steps / 1e6:.3f} MB",
            f"{r.bytes_ratio:.1f}x",
            "yes" if r.bit_exact else "NO",
        ]
        for r in real
    ]
    rows.append(
        [
            f"{syn.params / 1e9:g}e9 params, simulated AdamW, lr 1e-6",
            f"{syn.changed_fraction:.2%}",
            f"{syn.full_bytes / 1e9:.2f} GB",
            f"{syn.delta_bytes / 1e9:.3f} GB",
            f"{syn.full_bytes / syn.delta_bytes:.1f}x",
            "yes" if syn.bit_exact else "NO",
        ]
    )
    sizes = markdown_table(["update", "changed", "full copy", "delta", "full / delta", "bit-exact"], rows)
    speed = markdown_table(
        ["codec (1 thread)", "encode GB/s", "decode GB/s", "encode GB/s (CPU time)", "decode GB/s (CPU time)"],
        [
            [
                "sparse delta",
                f"{result['encode_gb_s']:.2f}",
                f"{result['decode_gb_s']:.2f}",
                f"{result['encode_gb_s_cpu']:.2f}",
                f"{result['decode_gb_s_cpu']:.2f}",
            ],
            [
                "full copy (baseline)",
                f"{gb_s(syn.model_bytes, syn.full_encode_s):.2f}",
                f"{gb_s(syn.model_bytes, syn.full_decode_s):.2f}",
                "",
                "",
            ],
        ],
    )
    fan = markdown_table(
        ["send", "cross-site bytes", "intra-site bytes"],
        [
            [
                f"direct to all {relay.sites * relay.per_site} receivers",
                f"{relay.direct_cross_bytes / 1e6:.2f} MB",
                "0",
            ],
            [
                "relay: 1 per site, binary tree inside",
                f"{relay.relay_cross_bytes / 1e6:.2f} MB",
                f"{relay.relay_intra_bytes / 1e6:.2f} MB",
            ],
        ],
    )
    return (
        f"{sizes}\n\nThroughput in GB of bf16 model bytes per second, over the {syn.params / 1e9:g}e9-parameter "
        f"set; peak RSS {result['peak_rss_gb']:.2f} GB.\n\n{speed}\n\n"
        f"{relay.sites} sites x {relay.per_site} receivers, {relay.versions} versions of the tiny policy "
        f"(a full copy, then deltas at lr 1e-6); every receiver bitwise identical: "
        f"{'yes' if relay.identical else 'NO'}. Cross-site bytes cut {relay.cross_site_ratio:.1f}x.\n\n{fan}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench weightsync", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for smoke tests")
    parser.add_argument("--json", action="store_true", help="accepted; the JSON line is always printed last")
    add_docs_flag(parser)
    parser.add_argument("--params", type=float, default=None, help="synthetic parameters (default 1e9; quick 2e7)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    params = int(args.params or (2e7 if args.quick else 1e9))
    warmup, steps = (3, 2) if args.quick else (10, 5)
    sites, per_site = (2, 2) if args.quick else (4, 8)

    real = []
    for lr in (1e-6, 1e-5):
        print(f"real updates: tiny policy, AdamW lr {lr:g}, {warmup} warm-up + {steps} measured steps", flush=True)
        r = real_updates(lr, warmup, steps)
        print(
            f"  changed {r.changed_fraction:.3%}, full {r.full_bytes / steps / 1e6:.2f} MB vs delta "
            f"{r.delta_bytes / steps / 1e6:.3f} MB per version: {r.bytes_ratio:.1f}x, bit-exact {r.bit_exact}",
            flush=True,
        )
        real.append(r)
    print(f"synthetic updates: {params / 1e9:g}e9 bf16 params, chunks of {CHUNK_ELEMENTS >> 20}M elements", flush=True)
    syn = synthetic_updates(params, 1e-6)
    print(f"relay: {sites} sites x {per_site} receivers, tree vs direct", flush=True)
    relay = relay_bytes(real[0].versions[:3], sites, per_site)
    print(
        f"  cross-site bytes: direct {relay.direct_cross_bytes / 1e6:.2f} MB, relay "
        f"{relay.relay_cross_bytes / 1e6:.2f} MB ({relay.cross_site_ratio:.1f}x)",
        flush=True,
    )

    result = {
        "changed_fraction": real[0].changed_fraction,
        "bytes_ratio_lr1e-6": real[0].bytes_ratio,
        "bytes_ratio_lr1e-5": real[1].bytes_ratio,
        "encode_gb_s": gb_s(syn.model_bytes, syn.encode_s),
        "decode_gb_s": gb_s(syn.model_bytes, syn.decode_s),
        "bit_exact": bool(real[0].bit_exact and real[1].bit_exact and syn.bit_exact and relay.identical),
        "cross_site_bytes_ratio": relay.cross_site_ratio,
        "changed_fraction_lr1e-5": real[1].changed_fraction,
        "synthetic_params": params,
        "synthetic_changed_fraction": syn.changed_fraction,
        "synthetic_bytes_ratio": syn.full_bytes / syn.delta_bytes,
        "encode_gb_s_cpu": gb_s(syn.model_bytes, syn.encode_cpu_s),
        "decode_gb_s_cpu": gb_s(syn.model_bytes, syn.decode_cpu_s),
        "codec_gb_s": gb_s(syn.model_bytes, syn.encode_s + syn.decode_s),
        "full_copy_encode_gb_s": gb_s(syn.model_bytes, syn.full_encode_s),
        "full_copy_decode_gb_s": gb_s(syn.model_bytes, syn.full_decode_s),
        "relay_sites": sites,
        "relay_receivers_per_site": per_site,
        "peak_rss_gb": peak_rss_gb(),
    }
    print(
        f"encode {result['encode_gb_s']:.2f} GB/s, decode {result['decode_gb_s']:.2f} GB/s "
        f"(CPU time: {result['encode_gb_s_cpu']:.2f} / {result['decode_gb_s_cpu']:.2f}), "
        f"peak RSS {result['peak_rss_gb']:.2f} GB",
        flush=True,
    )
    publish(
        "weightsync",
        docs_body(real, syn, relay, result),
        result,
        "rollarc bench weightsync --json",
        quick=args.quick,
        no_docs=args.no_docs,
    )
    emit_json(result)
    return 0
