"""The ``vllm`` section of the device check (``scripts/device_check.py``): vLLM on the GPU, as a replica runs it.

On the throughput section's model and long-tailed requests: vLLM's tokens/s (in-process ``AsyncLLM``, bf16,
CUDA graphs on), and the latency of one full-copy weight update loaded in place through ``collective_rpc`` with
``rollarc.serve.vllm_weights.WeightLoader`` (pause, load, version label, resume: what ``VLLMRolloutWorker``
does after every train step). The caller adds the ratios against rollarc's engine and HF ``generate``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from typing import Any

import torch


def run_vllm_section(model: Any, prompts: list[list[int]], outputs: list[int]) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from rollarc.serve.vllm_weights import digest, pack

    useful = sum(outputs)
    max_len = max(len(p) for p in prompts) + max(outputs)

    async def generate(engine: Any, batch: list[list[int]], lengths: list[int], tag: str) -> int:
        async def one(i: int) -> int:
            params = SamplingParams(temperature=0.0, max_tokens=lengths[i], ignore_eos=True, detokenize=False,
                                    output_kind=RequestOutputKind.FINAL_ONLY)  # fmt: skip
            n = 0
            async for out in engine.generate(TokensPrompt(prompt_token_ids=batch[i]), params, f"{tag}{i}"):
                n = len(out.outputs[0].token_ids)
            return n

        return sum(await asyncio.gather(*(one(i) for i in range(len(batch)))))

    async def go(directory: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=directory,
                skip_tokenizer_init=True,
                dtype="bfloat16",
                max_model_len=max_len,
                max_num_seqs=len(prompts),
                gpu_memory_utilization=0.5,
                enable_prefix_caching=False,
                logprobs_mode="processed_logprobs",
                worker_extension_cls="rollarc.serve.vllm_weights.WeightLoader",
            )
        )
        start_s = time.perf_counter() - t0
        try:
            await generate(engine, prompts[:4], [4] * 4, "warm")
            t1 = time.perf_counter()
            produced = await generate(engine, prompts, outputs, "r")
            gen_s = time.perf_counter() - t1
            state = {k: v.detach().to(torch.bfloat16) * 1.001 for k, v in model.state_dict().items()}
            t2 = time.perf_counter()
            packed = pack(state)
            t3 = time.perf_counter()
            await engine.pause_generation(mode="keep", clear_cache=False)
            (loaded,) = await engine.collective_rpc("rollarc_load", args=(packed,))
            await engine.update_weight_version("1")
            await engine.resume_generation()
            t4 = time.perf_counter()
        finally:
            engine.shutdown()
        return {
            "engine": "vLLM AsyncLLM in process, bf16, CUDA graphs",
            "start_s": start_s,
            "useful_tokens": useful,
            "produced_tokens": produced,
            "seconds": gen_s,
            "tokens_per_s": useful / gen_s,
            "update_full_copy_s": t4 - t2,
            "update_pack_s": t3 - t2,
            "update_load_s": t4 - t3,
            "update_bytes": sum(len(raw) for raw, _, _ in packed.values()),
            "update_bitwise": loaded["digest"] == digest(state.items()),
        }

    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, safe_serialization=True)
        return asyncio.run(go(directory))
