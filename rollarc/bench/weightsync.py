"""``rollarc bench weightsync``: cross-site weight bytes through the training relay, and the delta codec's speed.

Two measurements in one run, single-threaded (``torch.set_num_threads(1)``), no Ray:

1. **Cross-site bytes per step** (``rollarc.bench.weightsync_cases``): for every shipped training config that
   syncs sparse deltas or borrows a site, at its ``train.lr``, sync dtype and AdamW settings, and at a
   fine-tuning lr (1e-6) on a randomly initialised Qwen2 of Qwen2.5-0.5B's shape (quick: a small one). Real
   AdamW steps; each version goes through the trainer's ``WeightPublisher`` and the borrowed site's relay, the
   same functions ``rollarc train`` with ``harvest:`` runs (``rollarc.bench.relay_site``); every member's
   weights are compared bit for bit with the trainer's after each step. Reported per case: parameters, lr,
   dtype, one dense fp32 copy and one dense copy in the sync dtype, the bytes that crossed into the site, ratios.
2. **Codec throughput.** A set of 1e9 bf16 parameters (quick: 2e7) in tensors of 4096x4096, generated and
   processed in chunks of 64M elements so that memory stays bounded. Each chunk takes one simulated AdamW step
   at lr 1e-6 from a warm optimiser state: fp32 master weights ~ N(0, 0.02^2); per-element gradient scales
   log-normal; first moment at its noise steady state; a fresh gradient. Reported: changed fraction, bytes,
   and encode / decode throughput in GB of model (bf16) bytes per second of wall time and of process CPU
   time (the machine is shared); the same for the full-copy baseline.

The last line is the JSON result.
"""

from __future__ import annotations

import math
import random
import resource
import time
from dataclasses import dataclass
from typing import Any

import torch

from rollarc.bench.harness import bench_parser, finish
from rollarc.bench.report_file import REPO_ROOT, markdown_table
from rollarc.bench.weightsync_cases import all_cases, measure
from rollarc.sync.codec import apply_delta, encode_delta, encode_full, full_nbytes

TENSOR_SIDE = 4096
CHUNK_ELEMENTS = 64 << 20
CONFIGS = REPO_ROOT / "configs"
STEPS = {True: (2, 2), False: (5, 3)}  # (warm-up, measured) AdamW steps per case: quick, full


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


# --- codec-only updates of the tiny policy (``rollarc bench rose``'s modelled ratio) ------------------------


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


# --- 2. codec throughput: a simulated AdamW step on 1e9 bf16 parameters, chunk by chunk ----------------------


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


# --- report ----------------------------------------------------------------------------------------------------


def gb_s(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.3f} MB"


def docs_body(cases: list[dict[str, Any]], syn: SyntheticResult, result: dict[str, Any]) -> str:
    rows = [
        [
            c["name"],
            f"{c['model']} ({c['params'] / 1e6:,.1f} M)",
            f"{c['lr']:g}",
            c["dtype"],
            f"{c['changed_fraction']:.2%}",
            mb(c["fp32_copy_bytes"]),
            mb(c["dtype_copy_bytes"]),
            mb(c["cross_site_bytes_per_step"]),
            f"{c['cross_site_over_fp32_copy']:.3f}",
            f"{c['fp32_copy_over_cross_site']:.1f}x",
            f"{c['dtype_copy_over_cross_site']:.1f}x",
            "yes" if c["bit_exact"] else "NO",
        ]
        for c in cases
    ]
    relay = markdown_table(
        [
            "case",
            "model (params)",
            "lr",
            "sync dtype",
            "changed",
            "fp32 copy",
            "dtype copy",
            "cross-site / step",
            "cross-site / fp32 copy",
            "fp32 copy / cross-site",
            "dtype copy / cross-site",
            "bitwise equal",
        ],
        rows,
    )
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
    return (
        "Cross-site bytes per step (median over the measured steps) through the borrowed site's relay, the "
        "functions `rollarc train` with `harvest:` runs; each case's site has `site_members` members "
        "(the JSON), and every member's weights were compared bit for bit with the trainer's after every step."
        f"\n\n{relay}\n\nCodec throughput in GB of bf16 model bytes per second, over the {syn.params / 1e9:g}e9-"
        f"parameter simulated set ({syn.changed_fraction:.2%} changed at lr 1e-6, "
        f"{syn.full_bytes / syn.delta_bytes:.1f}x fewer bytes than a full bf16 copy, bit-exact "
        f"{'yes' if syn.bit_exact else 'NO'}); peak RSS of the whole run {result['peak_rss_gb']:.2f} GB. Timings "
        f"count only on a quiet machine (the load above).\n\n{speed}"
    )


def main(argv: list[str]) -> int:
    parser = bench_parser("bench weightsync", __doc__, quick="small sizes, for smoke tests")
    parser.add_argument("--params", type=float, default=None, help="synthetic parameters (default 1e9; quick 2e7)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    params = int(args.params or (2e7 if args.quick else 1e9))
    warmup, steps = STEPS[args.quick]

    cases = []
    for case in all_cases(CONFIGS, args.quick):
        print(
            f"relay: {case.name}: {case.model}, AdamW lr {case.lr:g}, {case.sync.dtype} deltas, "
            f"{case.members} members (fanout {case.fanout}), {warmup} warm-up + {steps} measured steps",
            flush=True,
        )
        c = measure(case, warmup, steps)
        print(
            f"  cross-site {mb(c['cross_site_bytes_per_step'])} per step: {c['cross_site_over_fp32_copy']:.3f} of an "
            f"fp32 copy, {c['dtype_copy_over_cross_site']:.1f}x fewer than a {c['dtype']} copy",
            flush=True,
        )
        cases.append(c)
    print(f"codec: {params / 1e9:g}e9 bf16 params, chunks of {CHUNK_ELEMENTS >> 20}M elements", flush=True)
    syn = synthetic_updates(params, 1e-6)

    result = {
        "cases": cases,
        "bit_exact": bool(all(c["bit_exact"] for c in cases) and syn.bit_exact),
        "encode_gb_s": gb_s(syn.model_bytes, syn.encode_s),
        "decode_gb_s": gb_s(syn.model_bytes, syn.decode_s),
        "encode_gb_s_cpu": gb_s(syn.model_bytes, syn.encode_cpu_s),
        "decode_gb_s_cpu": gb_s(syn.model_bytes, syn.decode_cpu_s),
        "codec_gb_s": gb_s(syn.model_bytes, syn.encode_s + syn.decode_s),
        "full_copy_encode_gb_s": gb_s(syn.model_bytes, syn.full_encode_s),
        "full_copy_decode_gb_s": gb_s(syn.model_bytes, syn.full_decode_s),
        "synthetic_params": params,
        "synthetic_changed_fraction": syn.changed_fraction,
        "synthetic_bytes_ratio": syn.full_bytes / syn.delta_bytes,
        "peak_rss_gb": peak_rss_gb(),
    }
    print(
        f"encode {result['encode_gb_s']:.2f} GB/s, decode {result['decode_gb_s']:.2f} GB/s "
        f"(CPU time: {result['encode_gb_s_cpu']:.2f} / {result['decode_gb_s_cpu']:.2f}), "
        f"peak RSS {result['peak_rss_gb']:.2f} GB",
        flush=True,
    )
    return finish("weightsync", docs_body(cases, syn, result), result, "rollarc bench weightsync --json", args)
