"""One prepared GPU check of rollarc: engine vs HF on CUDA in bf16, a GRPO step, FSDP2, the delta codec.

Run on one GPU (about 7 minutes on one H200)::

    OUT=/some/dir python scripts/device_check.py            # or scripts/device_check.sh

It writes ``$OUT/device_check.json`` (and prints it). Sections, each in its own try-block with its own
time budget, so one failure or overrun does not lose the others:

- ``agreement``: greedy tokens of rollarc's engine vs HF ``generate`` on the same bf16 CUDA model (the
  ``small`` preset at its random init, built in-process: no download, no SFT); the fraction of
  positions that agree (once a row diverges, its later positions usually differ too).
- ``throughput``: generated tokens/s of the engine (continuous batching) vs HF ``generate`` (one static
  batch, padded, run until its longest request ends) on a long-tailed batch: 256 requests with
  lognormal output lengths, on a ~210 M-parameter Llama built on the fly (big enough that a decode
  step is not pure kernel-launch overhead). Both count only the tokens each request asked for.
- ``grpo_step``: ``PolicyTrainer.train_step`` on CUDA (fp32 master weights, bf16 autocast) on a synthetic
  batch of GRPO groups: loss finiteness and time of two steps (the first includes warm-up).
- ``fsdp2``: if ``scripts/device_check_fsdp.py`` exists, its ``main()``'s dict; else "not available".
- ``codec``: the delta codec (``rollarc.sync.codec``) on the bf16 weights of that model after a small
  update. The codec works on CPU tensors only, so what is timed is the real path: GPU->CPU copy then
  encode on the sender, decode on the CPU then CPU->GPU copy on the receiver; each part is reported.
- ``vllm``: vLLM (``rollout.backend: vllm``'s engine) on the throughput section's model and requests, its
  ratios against that section's engine and HF ``generate``, and one full-copy weight update loaded in place
  (``scripts/device_check_vllm.py``); "not available" without vLLM, skipped on the CPU dry run. It runs
  over the 7 minutes of the others: ``--only throughput vllm`` runs it with its baseline alone.
- ``coserve``: ROSE's co-serving on the device (``scripts/device_check_coserve.py``): serving alone, then the
  same serving requests beside harvested rollout turns under the SLO guard, at 1.5x alone's p99 as the SLO;
  attainment of each, the guard's actions, harvested vs dedicated rollout tokens/s (about 3 minutes).
- ``t2i``: the text-to-image path on the device (``scripts/device_check_t2i.py``, in a process of its own since it
  imports Ray and diffusers): one Flow-GRPO step of the DiT, and one elastic SP regroup (two member actors
  sharing the GPU, degree 2 -> 1) with each forward compared to the single-process velocity (under a minute). On
  the CPU dry run its process starts with the first section and runs beside the others (mostly waiting on Ray's
  start), so the dry run grows by less than the section alone takes; on a GPU it runs alone, after the others.
  "not available" without diffusers; its SP part is "not available" without Ray.

Exit status: 0 when every section succeeded, 1 when any recorded an error (listed in ``sections_failed``;
the JSON is written either way). ``--only SECTION ...`` reruns some sections. Without a GPU it exits 2
with one line, unless ``--allow-cpu`` (a dry run of every section on the CPU;
``--tiny`` shrinks every size so that the dry run takes a minute or two).

Packages it needs: torch, transformers, tokenizers (comes with transformers), safetensors, numpy, pyyaml,
xxhash, psutil, pydantic (with pydantic-core, annotated-types, typing-inspection). It imports neither
ray, gymnasium nor simpy (the JSON lists any that got imported under ``forbidden_imports``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PYTHONUNBUFFERED", "1")
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.algo.config import LossConfig
from rollarc.engine import EngineConfig, LLMEngine, SamplingParams
from rollarc.models import count_parameters, new_policy
from rollarc.sync.codec import apply_delta, encode_delta, state_checksums
from rollarc.train.policy_trainer import PolicyTrainer

FSDP_HOOK = REPO / "scripts" / "device_check_fsdp.py"
T2I_SCRIPT = REPO / "scripts" / "device_check_t2i.py"
FORBIDDEN = ("ray", "gymnasium", "simpy")


class SectionTimeout(Exception):
    """A section ran past its time budget (raised from SIGALRM between Python bytecodes)."""


# What a section may fail with and still let the others run; anything else is a bug in this script.
EXPECTED_ERRORS = (
    RuntimeError,
    ValueError,
    TypeError,
    KeyError,
    AssertionError,
    ImportError,
    OSError,
    FloatingPointError,
    SectionTimeout,
)


@dataclass(frozen=True)
class Sizes:
    """Workload sizes: the GPU run, or the tiny CPU dry run."""

    agreement_preset: str
    agreement_prompts: int
    agreement_tokens: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    requests: int
    prompt_len: tuple[int, int]
    out_median: float
    out_sigma: float
    out_max: int
    grpo_groups: int
    grpo_group_size: int
    grpo_prompt: int
    grpo_reply: int
    budgets_s: dict[str, int]


GPU = Sizes(
    agreement_preset="small",
    agreement_prompts=32,
    agreement_tokens=32,
    hidden=1024,
    layers=16,
    heads=16,
    kv_heads=4,
    intermediate=2816,
    vocab=32000,
    requests=256,
    prompt_len=(32, 256),
    out_median=128.0,
    out_sigma=1.0,
    out_max=1024,
    grpo_groups=8,
    grpo_group_size=8,
    grpo_prompt=128,
    grpo_reply=256,
    budgets_s={
        "agreement": 45,
        "throughput": 200,
        "grpo_step": 60,
        "fsdp2": 60,
        "codec": 60,
        "vllm": 300,
        "coserve": 240,
        "t2i": 120,
    },
)
TINY = Sizes(
    agreement_preset="nano",
    agreement_prompts=8,
    agreement_tokens=12,
    hidden=128,
    layers=2,
    heads=4,
    kv_heads=2,
    intermediate=256,
    vocab=512,
    requests=16,
    prompt_len=(8, 32),
    out_median=12.0,
    out_sigma=1.0,
    out_max=48,
    grpo_groups=2,
    grpo_group_size=4,
    grpo_prompt=16,
    grpo_reply=16,
    budgets_s={
        "agreement": 60,
        "throughput": 90,
        "grpo_step": 60,
        "fsdp2": 60,
        "codec": 60,
        "vllm": 60,
        "coserve": 60,
        "t2i": 90,
    },
)


@contextlib.contextmanager
def time_budget(seconds: int) -> Iterator[None]:
    """Raise :class:`SectionTimeout` in this thread after ``seconds`` (POSIX only; elsewhere no limit)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise SectionTimeout(f"over its time budget of {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def throughput_model(sizes: Sizes, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised Llama of the given sizes (no EOS: every request runs to its own length)."""
    config = LlamaConfig(
        vocab_size=sizes.vocab,
        hidden_size=sizes.hidden,
        intermediate_size=sizes.intermediate,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.to(device=device, dtype=dtype).eval()


def hf_greedy(model: torch.nn.Module, prompt: list[int], new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


# ---- sections ----------------------------------------------------------------------------------------------
def section_agreement(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    model, tokenizer = new_policy(sizes.agreement_preset, max_position_embeddings=512, seed=0)
    model = model.to(device=device, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(4, 40, (sizes.agreement_prompts,), generator=generator).tolist()
    prompts = [torch.randint(3, len(tokenizer), (n,), generator=generator).tolist() for n in lengths]
    engine = LLMEngine(
        model,
        EngineConfig(
            max_num_seqs=sizes.agreement_prompts, max_model_len=512, dtype="bfloat16", kv_cache_gb=1.0, num_threads=None
        ),
    )
    params = SamplingParams(temperature=0.0, max_tokens=sizes.agreement_tokens, ignore_eos=True)
    ours = [c.token_ids for c in engine.generate(prompts, params)]
    with torch.inference_mode():
        theirs = [hf_greedy(model, p, sizes.agreement_tokens) for p in prompts]
    total = sum(len(t) for t in theirs)
    agree = sum(a == b for o, t in zip(ours, theirs, strict=True) for a, b in zip(o, t, strict=False))
    first = sum(o[:1] == t[:1] for o, t in zip(ours, theirs, strict=True))
    return {
        "model": f"preset {sizes.agreement_preset}, random init, bf16",
        "params": count_parameters(model),
        "prompts": len(prompts),
        "tokens_per_prompt": sizes.agreement_tokens,
        "token_agreement": agree / total,
        "first_token_agreement": first / len(prompts),
        "identical_rows": sum(o == t for o, t in zip(ours, theirs, strict=True)),
        "distinct_outputs": len({tuple(o) for o in ours}),
    }


def longtail_workload(sizes: Sizes, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    generator = torch.Generator().manual_seed(seed)
    low, high = sizes.prompt_len
    prompt_lens = torch.randint(low, high + 1, (sizes.requests,), generator=generator).tolist()
    prompts = [torch.randint(1, sizes.vocab, (n,), generator=generator).tolist() for n in prompt_lens]
    normal = torch.randn(sizes.requests, generator=generator)
    outputs = [max(1, min(sizes.out_max, int(sizes.out_median * math.exp(sizes.out_sigma * float(z))))) for z in normal]
    return prompts, outputs


def section_throughput(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    model = throughput_model(sizes, device, torch.bfloat16)
    prompts, outputs = longtail_workload(sizes)
    useful = sum(outputs)
    max_len = max(len(p) for p in prompts) + max(outputs)
    engine = LLMEngine(
        model,
        EngineConfig(
            max_num_seqs=sizes.requests,
            max_model_len=max_len,
            dtype="bfloat16",
            prefill_token_budget=8192,
            prefix_cache_tokens=0,
            num_threads=None,
        ),
    )
    engine.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    done = engine.generate(prompts, [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in outputs])
    sync(device)
    engine_s = time.perf_counter() - t0
    assert [c.num_tokens for c in done] == outputs, "the engine did not generate the lengths asked for"

    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):  # left padding, as HF generate wants for decoder-only models
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    with torch.inference_mode():
        model.generate(
            input_ids=ids[:4], attention_mask=mask[:4], max_new_tokens=4, do_sample=False, pad_token_id=0
        )  # warm-up
        sync(device)
        t0 = time.perf_counter()
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max(outputs),
            min_new_tokens=max(outputs),
            do_sample=False,
            pad_token_id=0,
        )
        sync(device)
    hf_s = time.perf_counter() - t0
    return {
        "model": f"Llama {sizes.layers}x{sizes.hidden}, {sizes.heads} heads / {sizes.kv_heads} KV heads, "
        f"vocab {sizes.vocab}, bf16, random init",
        "params": count_parameters(model),
        "requests": len(prompts),
        "useful_tokens": useful,
        "output_len_median": sorted(outputs)[len(outputs) // 2],
        "output_len_max": max(outputs),
        "engine_s": engine_s,
        "hf_generate_s": hf_s,
        "engine_tokens_per_s": useful / engine_s,
        "hf_generate_tokens_per_s": useful / hf_s,
        "engine_over_hf": hf_s / engine_s,
        "engine_steps": engine.counters["steps"],
        "hf_generate_note": "one static batch padded to the longest prompt, decoding max(output_len) steps "
        "for every row; tokens/s counts only the tokens each request asked for",
    }


def grpo_groups(sizes: Sizes, generator: torch.Generator) -> list[list[Trajectory]]:
    groups = []
    for g in range(sizes.grpo_groups):
        prompt = torch.randint(1, sizes.vocab, (sizes.grpo_prompt,), generator=generator).tolist()
        group = []
        for i in range(sizes.grpo_group_size):
            reply = torch.randint(1, sizes.vocab, (sizes.grpo_reply,), generator=generator).tolist()
            segment = Segment()
            segment.extend_context(prompt)
            segment.extend_generated(reply, [-math.log(sizes.vocab)] * len(reply), [0] * len(reply))
            group.append(
                Trajectory(
                    traj_id=f"g{g}-{i}",
                    task="synthetic",
                    seed=g,
                    segments=[segment],
                    reward=float(torch.rand((), generator=generator)),
                )
            )
        groups.append(group)
    return groups


def section_grpo_step(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    model = throughput_model(sizes, torch.device("cpu"), torch.float32, seed=1)
    trainer = PolicyTrainer(model, LossConfig(), lr=1e-5, pad_id=0, device=device, autocast_dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(2)
    steps = []
    for _ in range(2):
        groups = grpo_groups(sizes, generator)
        sync(device)
        t0 = time.perf_counter()
        stats = trainer.train_step(groups)
        sync(device)
        steps.append(
            {
                "seconds": time.perf_counter() - t0,
                "loss": stats["loss"],
                "grad_norm": stats["grad_norm"],
                "tokens": stats["tokens"],
            }
        )
    finite = all(math.isfinite(s["loss"]) and math.isfinite(s["grad_norm"]) for s in steps)
    master = {str(p.dtype) for p in model.parameters()}
    return {
        "params": count_parameters(model),
        "rows": sizes.grpo_groups * sizes.grpo_group_size,
        "tokens_per_row": sizes.grpo_prompt + sizes.grpo_reply,
        "precision": "fp32 master weights, bf16 autocast",
        "master_dtypes": sorted(master),
        "loss_finite": finite,
        "steps": steps,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
    }


def section_fsdp2(sizes: Sizes, device: torch.device) -> dict[str, Any] | str:
    if not FSDP_HOOK.is_file():
        return "not available"
    spec = importlib.util.spec_from_file_location("device_check_fsdp", FSDP_HOOK)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {FSDP_HOOK}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main()
    if not isinstance(result, dict):
        raise TypeError(f"{FSDP_HOOK.name}: main() returned {type(result).__name__}, not a dict")
    return result


def section_codec(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    model = throughput_model(sizes, device, torch.bfloat16, seed=3)
    old_gpu = {k: v.detach().clone() for k, v in model.state_dict().items()}
    generator = torch.Generator(device=device).manual_seed(4)
    new_gpu = {}
    for name, tensor in old_gpu.items():  # an Adam-like step of lr 1e-5: most bf16 elements do not move
        step = torch.randn(tensor.shape, generator=generator, device=device).sign() * 1e-5
        new_gpu[name] = (tensor.float() + step).to(tensor.dtype)
    old_cpu = {k: v.cpu() for k, v in old_gpu.items()}  # the publisher keeps the previous version on the CPU
    model_bytes = sum(v.numel() * v.element_size() for v in new_gpu.values())
    sync(device)
    t0 = time.perf_counter()
    new_cpu = {k: v.cpu() for k, v in new_gpu.items()}
    t1 = time.perf_counter()
    buckets = list(encode_delta(old_cpu, new_cpu))
    t2 = time.perf_counter()
    state = {k: v.clone() for k, v in old_cpu.items()}
    t3 = time.perf_counter()
    apply_delta(state, buckets)
    t4 = time.perf_counter()
    on_device = {k: v.to(device, non_blocking=False) for k, v in state.items()}
    sync(device)
    t5 = time.perf_counter()
    exact = state_checksums(state) == state_checksums(new_cpu) and all(
        torch.equal(on_device[k], new_gpu[k]) for k in new_gpu
    )
    changed = sum(b.changed for b in buckets)
    gb = model_bytes / 1e9
    return {
        "tensors_on": str(device),
        "codec_runs_on": "cpu (numpy over CPU tensor storage)",
        "model_gb": gb,
        "changed_fraction": changed / sum(b.elements for b in buckets),
        "bitwise_exact": exact,
        "delta_gb": sum(b.nbytes for b in buckets) / 1e9,
        "encode": {
            "gpu_to_cpu_s": t1 - t0,
            "encode_s": t2 - t1,
            "gb_per_s_total": gb / (t2 - t0),
            "gb_per_s_encode_only": gb / (t2 - t1),
        },
        "decode": {
            "apply_s": t4 - t3,
            "cpu_to_gpu_s": t5 - t4,
            "gb_per_s_total": gb / (t5 - t3),
            "gb_per_s_apply_only": gb / (t4 - t3),
        },
    }


def section_vllm(sizes: Sizes, device: torch.device) -> dict[str, Any] | str:
    """vLLM (``rollout.backend: vllm``'s engine) on the throughput section's model and long-tailed requests, and
    the latency of one full-copy weight update loaded in place the way a rollout replica loads it."""
    if importlib.util.find_spec("vllm") is None:
        return "not available (vLLM is not installed: pip install -e '.[vllm]')"
    if device.type != "cuda":
        return "skipped on the CPU dry run (tests/integration/test_vllm_backend.py runs vLLM's CPU build)"
    from device_check_vllm import run_vllm_section  # a sibling script: vLLM's imports stay out of the others

    return run_vllm_section(throughput_model(sizes, device, torch.bfloat16), *longtail_workload(sizes))


def section_coserve(sizes: Sizes, device: torch.device) -> dict[str, Any]:
    """ROSE's co-serving on the device: serving alone vs serving + harvested rollout turns under the guard, the
    throughput section's model as both S and R (``scripts/device_check_coserve.py``)."""
    from device_check_coserve import run_coserve_section  # a sibling script, as the vllm section's

    tiny = sizes is TINY
    return run_coserve_section(
        throughput_model(sizes, device, torch.bfloat16, seed=1),
        throughput_model(sizes, device, torch.bfloat16, seed=0),
        vocab=sizes.vocab,
        duration_s=4.0 if tiny else 60.0,
        rate_per_s=4.0 if tiny else 8.0,
        max_prompt=sizes.prompt_len[1],
        max_output=sizes.out_max // 4,
        turns=4 if tiny else 32,
        turn_tokens=16 if tiny else 256,
        memory_tokens=2048 if tiny else 64 * (sizes.prompt_len[1] + 256),
        sync=lambda: sync(device),
    )


class T2IProcess:
    """The ``t2i`` section's process (``scripts/device_check_t2i.py``): started by :meth:`start`, read by
    :meth:`result`, killed by :meth:`stop` if it is still running (its Ray cluster's reaper then stops Ray)."""

    def __init__(self, sizes: Sizes, device: torch.device):
        self.out = Path(tempfile.mkdtemp(prefix="device-check-t2i-")) / "t2i.json"
        args = ["--device", device.type, "--out", str(self.out)] + (["--tiny"] if sizes is TINY else [])
        self.proc = subprocess.Popen(
            [sys.executable, str(T2I_SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def result(self) -> dict[str, Any]:
        try:
            _, err = self.proc.communicate()
        finally:
            self.stop()
        if self.proc.returncode != 0:
            lines = [line for line in err.splitlines() if line.strip()]
            raise RuntimeError(f"{T2I_SCRIPT.name} exited {self.proc.returncode}: {lines[-1] if lines else ''}")
        result: dict[str, Any] = json.loads(self.out.read_text())
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_early: dict[str, T2IProcess] = {}  # the t2i process of a CPU dry run, started with the first section


def section_t2i(sizes: Sizes, device: torch.device) -> dict[str, Any] | str:
    """One Flow-GRPO step and one SP regroup of the DiT on the device (``scripts/device_check_t2i.py``)."""
    if importlib.util.find_spec("diffusers") is None:
        return "not available (diffusers is not installed: the DiT is diffusers' PixArtTransformer2DModel)"
    started = _early.pop("t2i", None) or T2IProcess(sizes, device)
    return started.result()


SECTIONS: dict[str, Callable[[Sizes, torch.device], Any]] = {
    "agreement": section_agreement,
    "throughput": section_throughput,
    "grpo_step": section_grpo_step,
    "fsdp2": section_fsdp2,
    "codec": section_codec,
    "vllm": section_vllm,
    "coserve": section_coserve,
    "t2i": section_t2i,
}


def run(sizes: Sizes, device: torch.device, only: list[str] | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "sizes": "tiny" if sizes is TINY else "full",
        "sections_failed": [],
    }
    wants_t2i = "t2i" in SECTIONS and (not only or "t2i" in only) and importlib.util.find_spec("diffusers") is not None
    if device.type == "cpu" and wants_t2i:
        _early["t2i"] = T2IProcess(sizes, device)  # beside the others: on a GPU it would skew their times
    try:
        _run_sections(report, sizes, device, only)
    finally:
        for early in _early.values():
            early.stop()
        _early.clear()
    vllm, throughput = report.get("vllm"), report.get("throughput")
    if isinstance(vllm, dict) and "tokens_per_s" in vllm and isinstance(throughput, dict) and "engine_s" in throughput:
        vllm["vllm_over_engine"] = vllm["tokens_per_s"] / throughput["engine_tokens_per_s"]
        vllm["vllm_over_hf_generate"] = vllm["tokens_per_s"] / throughput["hf_generate_tokens_per_s"]
    report["forbidden_imports"] = [m for m in FORBIDDEN if m in sys.modules]
    return report


def _run_sections(report: dict[str, Any], sizes: Sizes, device: torch.device, only: list[str] | None) -> None:
    for name, section in SECTIONS.items():
        if only and name not in only:
            continue
        print(f"device_check: {name} ...", file=sys.stderr)
        t0 = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            with time_budget(sizes.budgets_s[name]):
                report[name] = section(sizes, device)
        except EXPECTED_ERRORS as err:
            report[name] = {"error": f"{type(err).__name__}: {err}"}
            report["sections_failed"].append(name)
        if isinstance(report[name], dict):
            report[name]["section_s"] = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-cpu", action="store_true", help="dry run on the CPU when no GPU is present")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (for the CPU dry run)")
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument(
        "--out", default=os.environ.get("OUT", "."), help="directory for device_check.json (default: $OUT, else .)"
    )
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        device = torch.device("cuda:0")
    elif args.allow_cpu:
        device = torch.device("cpu")
    else:
        print(
            "device_check: no CUDA device (torch.cuda.is_available() is False); run on a GPU machine, "
            "or pass --allow-cpu for a dry run",
            file=sys.stderr,
        )
        return 2
    report = run(TINY if args.tiny else GPU, device, args.only)
    text = json.dumps(report, indent=1, default=str)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_check.json").write_text(text + "\n")
    print(text)
    return 1 if report["sections_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
