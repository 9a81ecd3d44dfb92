"""``rollarc bench engine``: rollarc's engine vs HF ``generate`` (static batches) vs HF continuous batching.

With ``--backend vllm`` a fourth arm runs vLLM's engine on the same requests (``bench/engine_vllm.py``).

One mixed workload, the same requests for all three, in one process with the same torch threads:

- prompts of uniform random length (8–512 tokens; quick: 8–128) of random character ids;
- ``max_tokens`` long-tailed: 90% uniform in 16–64, 10% eight times that (quick: 8–16 / ×8);
- the ``tiny`` preset policy with random weights; greedy decoding; EOS is ignored by all three, so
  every request generates exactly its ``max_tokens`` and the useful work is identical.

Engines:

1. rollarc ``LLMEngine``: every request submitted at once; continuous batching.
2. ``model.generate`` in static batches of ``--hf-batch`` requests in arrival order, left-padded;
   each batch runs to its longest ``max_tokens`` (``max_new_tokens=max(batch)``); only the tokens each
   request asked for count as useful output.
3. transformers' continuous batching: the manager behind ``model.generate_batch`` (its
   ``continuous_batching_context_manager``), fed with ``add_request(..., max_new_tokens=<per request>,
   eos_token_id=-1)``: ``generate_batch`` itself takes one ``max_new_tokens`` for all requests, the
   manager accepts one per request, so it does exactly the useful work. Library defaults otherwise
   (its ``paged|sdpa`` attention: flash kernels do not exist on a CPU and ``paged|eager`` was 3-4x
   slower), except the KV cache size: its CPU attention spans the whole paged cache, so a smaller
   cache is faster. On a 48-request slice of this workload 86 blocks (every request at once) gave
   ~305 tok/s, 32 blocks ~424, 16 ~620, 8 ~585, 6 ~540; the default (sized from free RAM, 700+
   blocks) is slower still and takes seconds to warm up. ``--hf-cb-blocks`` defaults to 16.

Each engine is warmed up on a few requests first; construction and warm-up are not timed. Reported:
useful generated tokens per second (sum of ``max_tokens`` / wall time).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from rollarc.bench.harness import bench_parser, finish, quick_or
from rollarc.bench.report_file import markdown_table
from rollarc.engine import EngineConfig, LLMEngine, SamplingParams

FIRST_CHAR_ID = 6  # ids below are the tokenizer's special tokens


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    max_tokens: list[int]

    @property
    def useful_tokens(self) -> int:
        return sum(self.max_tokens)


def make_workload(
    num_requests: int,
    prompt_range: tuple[int, int],
    short_range: tuple[int, int],
    long_fraction: float,
    long_factor: int,
    vocab_size: int,
    seed: int,
) -> Workload:
    rng = random.Random(seed)
    prompts, max_tokens = [], []
    for _ in range(num_requests):
        length = rng.randint(*prompt_range)
        prompts.append([rng.randrange(FIRST_CHAR_ID, vocab_size) for _ in range(length)])
        tokens = rng.randint(*short_range)
        max_tokens.append(tokens * long_factor if rng.random() < long_fraction else tokens)
    return Workload(prompts, max_tokens)


def run_rollarc(
    model: PreTrainedModel, workload: Workload, max_num_seqs: int, prefill_budget: int, threads: int
) -> float:
    config = EngineConfig(
        max_num_seqs=max_num_seqs, prefill_token_budget=prefill_budget, num_threads=threads, prefix_cache_tokens=0
    )
    engine = LLMEngine(model, config)
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for m in workload.max_tokens]
    engine.generate(workload.prompts[:4], params[:4])  # warm-up
    start = time.perf_counter()
    completions = engine.generate(workload.prompts, params)
    elapsed = time.perf_counter() - start
    produced = sum(c.num_tokens for c in completions)
    if produced != workload.useful_tokens:
        raise RuntimeError(f"rollarc produced {produced} tokens, expected {workload.useful_tokens}")
    return elapsed


def run_hf_generate(model: PreTrainedModel, workload: Workload, batch_size: int) -> float:
    from transformers import GenerationConfig  # deferred: transformers is heavy

    def batch_generate(prompts: list[list[int]], new_tokens: int) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros(len(prompts), width, dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
        out = model.generate(ids, attention_mask=mask, generation_config=config)  # type: ignore[operator]  # a causal LM has generate
        if out.shape[1] != width + new_tokens:
            raise RuntimeError(f"HF generate stopped early: {out.shape[1] - width} of {new_tokens} tokens")

    with torch.inference_mode():
        batch_generate(workload.prompts[:4], 4)  # warm-up
        start = time.perf_counter()
        for first in range(0, len(workload.prompts), batch_size):
            batch_generate(
                workload.prompts[first : first + batch_size], max(workload.max_tokens[first : first + batch_size])
            )
        return time.perf_counter() - start


def run_hf_continuous(model: PreTrainedModel, workload: Workload, num_blocks: int) -> float:
    from transformers import GenerationConfig  # deferred: transformers is heavy
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    prompts, max_tokens = workload.prompts, workload.max_tokens
    page = ContinuousBatchingConfig().page_size
    longest = max(len(p) + m for p, m in zip(prompts, max_tokens, strict=True))
    num_blocks = max(num_blocks, -(-longest // page))  # at least room for the longest request
    config = GenerationConfig(do_sample=False, max_new_tokens=max(max_tokens), eos_token_id=-1, pad_token_id=0)
    hints = WorkloadHints(
        max_prompt_length=max(len(p) for p in prompts), max_generated_length=max(max_tokens), num_requests=len(prompts)
    )
    # Not under torch.inference_mode: the manager generates on a thread of its own, and transformers 5.19 (the
    # release vLLM 0.32 pins) updates in place, on that thread, tensors created here, which fails for inference
    # tensors ("Inplace update to inference tensor outside InferenceMode"); its thread sets its own grad mode.
    with model.continuous_batching_context_manager(  # type: ignore[operator]  # a causal LM's
        generation_config=config,
        continuous_batching_config=ContinuousBatchingConfig(num_blocks=num_blocks),
        workload_hints=hints,
        block=True,
        timeout=60,
    ) as manager:  # entering it warms the manager up
        start = time.perf_counter()
        for index, (prompt, tokens) in enumerate(zip(prompts, max_tokens, strict=True)):
            manager.add_request(prompt, request_id=f"r{index}", max_new_tokens=tokens, eos_token_id=-1)
        produced, finished = 0, 0
        while finished < len(prompts):
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' continuous batching thread stopped early")
                continue
            if result.is_finished():
                if result.error is not None:
                    raise RuntimeError(f"transformers' continuous batching failed: {result.error}")
                finished += 1
                produced += len(result.generated_tokens)
        elapsed = time.perf_counter() - start
    if produced != workload.useful_tokens:
        raise RuntimeError(f"HF continuous batching produced {produced} tokens, expected {workload.useful_tokens}")
    return elapsed


def build_parser() -> argparse.ArgumentParser:
    """The common flags (harness) and the engines' settings."""
    parser = bench_parser("bench engine", __doc__, quick="small workload for smoke tests")
    add = parser.add_argument
    add("--requests", type=int, default=None, help="number of requests (default 256; quick 32)")
    add("--threads", type=int, default=1, help="torch threads for every engine (default 1)")
    add("--hf-batch", type=int, default=64, help="static batch size of HF generate")
    add("--max-num-seqs", type=int, default=256, help="rollarc EngineConfig.max_num_seqs")
    add("--prefill-budget", type=int, default=2048, help="rollarc EngineConfig.prefill_token_budget")
    add("--preset", default="tiny", help="model preset (default tiny)")
    add("--seed", type=int, default=0)
    add(
        "--hf-cb-blocks",
        type=int,
        default=16,
        help="KV blocks (of 256 tokens) of transformers' continuous batching (default 16: its fastest "
        "setting measured on this workload; its CPU attention spans the whole cache)",
    )
    add("--skip-hf-batch", action="store_true", help="skip transformers' continuous batching")
    add(
        "--backend",
        choices=["builtin", "vllm"],
        default="builtin",
        help="vllm: add vLLM's engine as a fourth arm, same requests (docs/gpu.md; published as engine_vllm)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    from rollarc.models import count_parameters, new_policy  # deferred: transformers is heavy

    torch.set_num_threads(args.threads)
    num_requests = quick_or(args.requests, args.quick, 256, 32)
    prompt_range, short_range = ((8, 128), (8, 16)) if args.quick else ((8, 512), (16, 64))
    max_len = prompt_range[1] + short_range[1] * 8
    model, tokenizer = new_policy(args.preset, max_position_embeddings=max_len, seed=args.seed)
    vocab = len(tokenizer)
    workload = make_workload(num_requests, prompt_range, short_range, 0.1, 8, vocab_size=vocab, seed=args.seed)
    print(
        f"engine bench: {num_requests} requests, prompts {prompt_range[0]}-{prompt_range[1]} tokens, "
        f"max_tokens {short_range[0]}-{short_range[1]} (10% x8), {args.preset} model "
        f"({count_parameters(model) / 1e6:.2f} M params), {args.threads} torch thread(s); "
        f"useful tokens {workload.useful_tokens}, prompt tokens {sum(map(len, workload.prompts))}",
        flush=True,
    )

    seconds: dict[str, float] = {}
    seconds["rollarc"] = run_rollarc(model, workload, args.max_num_seqs, args.prefill_budget, args.threads)
    print(f"  rollarc engine:              {seconds['rollarc']:7.2f} s", flush=True)
    seconds["hf_generate"] = run_hf_generate(model, workload, args.hf_batch)
    print(f"  HF generate (batch {args.hf_batch}):     {seconds['hf_generate']:7.2f} s", flush=True)
    if not args.skip_hf_batch:
        seconds["hf_generate_batch"] = run_hf_continuous(model, workload, args.hf_cb_blocks)
        print(f"  HF continuous batching:      {seconds['hf_generate_batch']:7.2f} s", flush=True)

    vllm_start_s = None
    if args.backend == "vllm":
        from rollarc.bench.engine_vllm import run_vllm  # deferred: vLLM is an optional extra

        measured = run_vllm(model, tokenizer, workload, args.max_num_seqs, args.threads)
        seconds["vllm"], vllm_start_s = measured["seconds"], measured["start_s"]
        print(f"  vLLM (start-up {vllm_start_s:.0f} s):       {seconds['vllm']:7.2f} s", flush=True)

    result = comparison(seconds, workload, args.threads, vllm_start_s)
    table = docs_table(seconds, workload, args.hf_batch)
    print(table, flush=True)
    cmd = "rollarc bench engine" + (f" --threads {args.threads}" if args.threads != 1 else "")
    cmd += " --backend vllm" if args.backend == "vllm" else ""
    return finish("engine_vllm" if args.backend == "vllm" else "engine", table, result, cmd, args)


def comparison(
    seconds: dict[str, float], workload: Workload, threads: int, vllm_start_s: float | None
) -> dict[str, Any]:
    """The JSON line: each engine's useful tokens/s and rollarc's ratios against the baselines."""
    tok_s = {name: workload.useful_tokens / s for name, s in seconds.items()}
    result = {
        "rollarc_tok_s": tok_s["rollarc"],
        "hf_generate_tok_s": tok_s["hf_generate"],
        "hf_generate_batch_tok_s": tok_s.get("hf_generate_batch"),
        "ratio_vs_hf_generate": tok_s["rollarc"] / tok_s["hf_generate"],
        "ratio_vs_hf_generate_batch": (
            tok_s["rollarc"] / tok_s["hf_generate_batch"] if "hf_generate_batch" in tok_s else None
        ),
        "requests": len(workload.prompts),
        "useful_tokens": workload.useful_tokens,
        "threads": threads,
    }
    if "vllm" in tok_s:
        result |= {
            "vllm_tok_s": tok_s["vllm"],
            "vllm_vs_hf_generate": tok_s["vllm"] / tok_s["hf_generate"],
            "vllm_vs_rollarc": tok_s["vllm"] / tok_s["rollarc"],
            "vllm_start_s": vllm_start_s,
        }
    return result


def docs_table(seconds: dict[str, float], workload: Workload, hf_batch: int) -> str:
    """The block's table: wall time, useful tokens/s and rollarc's speed-up per engine."""
    tok_s = {name: workload.useful_tokens / s for name, s in seconds.items()}
    labels = {
        "rollarc": "rollarc LLMEngine (continuous batching)",
        "hf_generate": f"HF `generate`, static batches of {hf_batch}",
        "hf_generate_batch": "HF continuous batching (`generate_batch` manager)",
        "vllm": "vLLM async engine (in process; `rollout.backend: vllm`)",
    }
    rows = [[labels[name], seconds[name], tok_s[name], tok_s["rollarc"] / tok_s[name]] for name in seconds]
    return markdown_table(["engine", "wall s", "useful tok/s", "rollarc speed-up"], rows)
