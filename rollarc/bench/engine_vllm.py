"""The vLLM arm of ``rollarc bench engine --backend vllm``: the same workload through vLLM's async engine.

The engine is built as the ``vllm`` rollout backend builds it (``runtime/vllm_replica.py``: no tokenizer,
processed log-probs, the model directory as written by rollarc), in this process, and every request is
submitted at once, as the rollarc arm does. Start-up (about a minute on a CPU) and a warm-up on a few
requests are not timed; they are reported apart.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollarc.bench.engine import Workload


def run_vllm(model: Any, tokenizer: Any, workload: Workload, max_num_seqs: int, threads: int) -> dict[str, float]:
    """Seconds to generate ``workload`` with vLLM (greedy, EOS ignored), and its start-up seconds."""
    from vllm import SamplingParams  # deferred: vLLM is an optional extra, and heavy
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from rollarc.models import save_policy

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    max_len = max(len(p) + m for p, m in zip(workload.prompts, workload.max_tokens, strict=True))

    async def generate_all(engine: Any, prompts: list[list[int]], max_tokens: list[int]) -> int:
        async def one(i: int) -> int:
            params = SamplingParams(
                temperature=0.0, max_tokens=max_tokens[i], ignore_eos=True, detokenize=False,
                output_kind=RequestOutputKind.FINAL_ONLY,
            )  # fmt: skip
            tokens = 0
            async for out in engine.generate(TokensPrompt(prompt_token_ids=prompts[i]), params, f"r{i}-{time.time()}"):
                tokens = len(out.outputs[0].token_ids)
            return tokens

        return sum(await asyncio.gather(*(one(i) for i in range(len(prompts)))))

    async def go(directory: str) -> dict[str, float]:
        t0 = time.perf_counter()
        args = AsyncEngineArgs(
            model=directory, skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
            max_model_len=max_len, max_num_seqs=max_num_seqs, kv_cache_memory_bytes=1024 * 2**20,
            distributed_executor_backend="uni", enable_prefix_caching=False,
        )  # fmt: skip
        engine = AsyncLLM.from_engine_args(args)
        started = time.perf_counter()
        try:
            await generate_all(engine, workload.prompts[:4], workload.max_tokens[:4])  # warm-up
            t1 = time.perf_counter()
            produced = await generate_all(engine, workload.prompts, workload.max_tokens)
            elapsed = time.perf_counter() - t1
        finally:
            engine.shutdown()
        if produced != workload.useful_tokens:
            raise RuntimeError(f"vLLM produced {produced} tokens, expected {workload.useful_tokens}")
        return {"seconds": elapsed, "start_s": started - t0}

    with tempfile.TemporaryDirectory() as directory:
        save_policy(model, tokenizer, directory + "/policy")
        return asyncio.run(go(directory + "/policy"))
