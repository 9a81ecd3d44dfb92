"""``LLMEngine``: the synchronous engine core (add requests, ``step()``, collect finished completions).

One ``step()`` = the scheduler admits waiting requests, the model runner decodes one token for every
running request and prefills the admitted ones, the sampler picks one token per request, and
finished requests leave the batch (their KV goes to the prefix cache when they carry a
``cache_key``). Everything happens on the caller's thread; :class:`rollarc.engine.AsyncLLMEngine`
runs this loop on a background thread.

Rules worth knowing:

- **Length.** ``max_model_len`` bounds prompt + generated tokens. A prompt of ``max_model_len`` tokens
  or more is rejected (finish_reason "error", message says both numbers). Otherwise generation stops
  at ``max_tokens`` or when the sequence reaches ``max_model_len``, whichever comes first, with
  finish_reason "length": ``max_tokens`` is never rewritten, the sequence is just cut where the
  cache ends, like vLLM.
- **Versions.** Every token records ``self.version`` at the step that sampled it. ``update_weights``
  applies between steps; running requests continue under the new weights, keeping the KV they
  computed under the old ones, and their earlier tokens keep their old version.
- **Errors.** Bad arguments to ``add_request`` raise ``ValueError`` at once (sampling parameters the step
  could not run too: ``rollarc.engine.params_check``). Non-finite logits, or a stop check that raises, finish
  only the affected request with finish_reason "error"; the others continue.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rollarc.engine.config import EngineConfig
from rollarc.engine.kv_cache import SlotKVCache, kv_bytes_per_token, plan_kv_cache
from rollarc.engine.model_runner import ModelRunner, PrefillSeq, model_geometry
from rollarc.engine.params_check import params_problem
from rollarc.engine.prefix_cache import CachedPrefix, PrefixCache
from rollarc.engine.request import Request
from rollarc.engine.sampling import Sampled, draw_uniforms, sample
from rollarc.engine.scheduler import Scheduler
from rollarc.engine.types import Completion, FinishReason, SamplingParams
from rollarc.models.device import free_memory_bytes, resolve_dtype

_RATE_WINDOW_S = 10.0


def _eos_ids(model: nn.Module) -> frozenset[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


class LLMEngine:
    def __init__(self, model: nn.Module, config: EngineConfig | None = None, tokenizer: Any = None) -> None:
        """``model``: an HF Llama-family causal LM (its weights are shared, not copied).

        ``tokenizer`` (anything with ``decode(list[int]) -> str``) is needed only for stop strings.
        """
        self.config = config = config or EngineConfig()
        geometry = model_geometry(model)
        self.max_model_len = config.max_model_len or geometry.max_position_embeddings
        if self.max_model_len > geometry.max_position_embeddings:
            raise ValueError(
                f"EngineConfig.max_model_len={self.max_model_len} exceeds the model's "
                f"max_position_embeddings={geometry.max_position_embeddings}"
            )
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        self.model = model
        self.vocab_size = geometry.vocab_size
        parameter = next(model.parameters())
        if config.dtype is not None and parameter.dtype != resolve_dtype(config.dtype):
            raise ValueError(
                f"EngineConfig.dtype is {config.dtype} but the model's weights are {parameter.dtype}; "
                f"cast the model first (model.to({resolve_dtype(config.dtype)}))"
            )
        budget = (
            int(config.kv_cache_gb * 1e9)
            if config.kv_cache_gb is not None
            else int(config.kv_cache_memory_fraction * free_memory_bytes(parameter.device))
        )
        bytes_per_token = kv_bytes_per_token(
            geometry.num_layers, geometry.num_kv_heads, geometry.head_dim, parameter.element_size()
        )
        self.kv_plan = plan_kv_cache(bytes_per_token, budget, config.max_num_seqs, self.max_model_len)
        self.kv = SlotKVCache(
            geometry.num_layers,
            self.kv_plan.num_slots,
            geometry.num_kv_heads,
            self.max_model_len,
            geometry.head_dim,
            dtype=parameter.dtype,
            device=parameter.device,
        )
        self.runner = ModelRunner(model, self.kv)
        self.prefix_cache = PrefixCache(config.prefix_cache_tokens)
        self.scheduler = Scheduler(self.kv, self.prefix_cache, config.prefill_token_budget)
        self.version = 0
        self.eos_token_ids = _eos_ids(model)
        self._decode: Callable[[list[int]], str] | None = tokenizer.decode if tokenizer is not None else None
        self._generator = torch.Generator().manual_seed(config.seed)
        self._requests: dict[str, Request] = {}
        self._done: list[Completion] = []  # finished outside step() (abort, rejection), returned by the next step()
        self._next_id = 0
        self._rate: deque[tuple[float, int]] = deque()
        self._rate_total = 0  # generated tokens in ``_rate``
        self.counters: dict[str, int] = {
            "steps": 0,
            "generated_tokens": 0,
            "prefill_tokens": 0,
            "cached_prompt_tokens": 0,
            "prefix_hits": 0,
            "shared_prefill_tokens": 0,
            "stop": 0,
            "length": 0,
            "abort": 0,
            "error": 0,
        }

    # ----------------------------------------------------------------- requests
    def add_request(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        cache_key: Hashable | None = None,
        skip_draws: int = 0,
    ) -> str:
        """Queue a request; returns its id. Invalid input raises ``ValueError`` naming the problem.

        ``skip_draws``: the tokens a resumed request already generated (a preempted or migrated turn re-submitted
        with its partial output in the prompt). Its seeded generator skips that many draws, one per token, so the
        rest of the turn draws what it would have drawn uninterrupted, wherever it resumes. It adds to
        ``params.skip_draws`` (the draws of the turn's earlier requests, which the agent loop resumed).
        """
        params = params or SamplingParams()
        try:
            prompt = [int(t) for t in prompt_ids]
        except (TypeError, ValueError, OverflowError):  # on the async engine's thread, anything else would kill it
            raise ValueError(f"prompt ids must be integers, got {list(prompt_ids)[:5]!r}") from None
        if request_id is None:
            request_id = f"req-{self._next_id}"
            self._next_id += 1
        if request_id in self._requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        if not prompt:
            raise ValueError(f"request {request_id!r}: empty prompt")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"request {request_id!r}: token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})"
            )
        if params.stop and self._decode is None:
            raise ValueError(
                f"request {request_id!r}: stop strings {params.stop!r} need an engine built with a tokenizer"
            )
        if skip_draws < 0:
            raise ValueError(f"request {request_id!r}: skip_draws must be >= 0, got {skip_draws}")
        problem = params_problem(params)
        if problem is not None:  # it would fail inside step(), for the whole batch
            raise ValueError(f"request {request_id!r}: {problem}")
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        for _ in range(skip_draws + params.skip_draws if generator is not None else 0):
            torch.rand((), generator=generator)  # as draw_uniforms draws, one number per generated token
        request = Request(request_id, prompt, params, cache_key, time.perf_counter(), generator=generator)
        self._requests[request_id] = request
        if len(prompt) >= self.max_model_len:
            self._done.append(
                self._finish(
                    request,
                    "error",
                    error=(
                        f"prompt of {len(prompt)} tokens leaves no room to generate within "
                        f"max_model_len={self.max_model_len}"
                    ),
                )
            )
        else:
            self.scheduler.add(request)
        return request_id

    def abort(self, request_id: str) -> bool:
        """Finish a request now with finish_reason "abort" and the tokens so far (returned by the next ``step()``).

        False when no such request is unfinished.
        """
        request = self._requests.get(request_id)
        if request is None:
            return False
        if request.slot is None:
            self.scheduler.remove_waiting(request)
        self._done.append(self._finish(request, "abort"))
        return True

    def new_output(self, request_id: str, start: int) -> tuple[list[int], list[float], list[int]]:
        """An unfinished request's tokens from output index ``start`` on: ids, log-probs, versions (a streaming
        caller's delta after a step); empty lists when there are none or the request is not unfinished."""
        request = self._requests.get(request_id)
        if request is None:
            return [], [], []
        return request.output_ids[start:], request.logprobs[start:], request.token_versions[start:]

    def take_finished(self) -> list[Completion]:
        """The completions finished outside ``step()`` (aborts, rejections), now, without running a step."""
        finished, self._done = self._done, []
        return finished

    def has_unfinished(self) -> bool:
        return bool(self._requests) or bool(self._done)

    # ----------------------------------------------------------------- stepping
    def step(self) -> list[Completion]:
        """Run one engine step; returns the requests that finished (in any order)."""
        finished, self._done = self._done, []
        plan = self.scheduler.schedule(self.version)
        batch = plan.decodes + plan.prefills
        shared_before = self.counters["shared_prefill_tokens"]
        if not batch:
            return finished
        with torch.inference_mode():
            logits = []
            if plan.decodes:
                device = self.runner.device
                token_ids = torch.tensor([r.last_token() for r in plan.decodes], device=device)
                computed = [r.num_computed for r in plan.decodes]
                positions = torch.tensor(computed, device=device)
                logits.append(self.runner.decode(token_ids, positions, max(computed) + 1))
            if plan.prefills:
                logits.append(self._prefill_shared(plan.prefills))
            sampled = self._sample(batch, torch.cat(logits) if len(logits) > 1 else logits[0])
        now = time.perf_counter()
        self.counters["steps"] += 1
        self.counters["prefill_tokens"] += sum(len(r.prompt_ids) - r.cached_prompt_tokens for r in plan.prefills)
        self.counters["prefill_tokens"] -= self.counters["shared_prefill_tokens"] - shared_before
        # One device-to-host copy per step (not one per tensor, nor per token): float64 holds token ids
        # exactly and widens the float32 log-probs exactly.
        host = torch.stack([sampled.token_ids.double(), sampled.logprobs.double(), sampled.ok.double()]).cpu()
        tokens = [int(t) for t in host[0].tolist()]
        logprobs, ok = host[1].tolist(), [bool(g) for g in host[2].tolist()]
        for request in batch:  # all of them first: finishing one may move another's KV, by num_computed
            request.num_computed = request.num_tokens
        generated = 0
        for request, token, logprob, good in zip(batch, tokens, logprobs, ok, strict=True):
            if not good:
                finished.append(
                    self._finish(
                        request,
                        "error",
                        now=now,
                        error=(
                            f"NaN/inf in logits at position {request.num_tokens} (output token {len(request.output_ids)}) "
                            f"under weight version {self.version}"
                        ),
                    )
                )
                continue
            request.output_ids.append(token)
            request.logprobs.append(logprob)
            request.token_versions.append(self.version)
            if request.first_token_time is None:
                request.first_token_time = now
            generated += 1
            try:
                reason = self._stop_reason(request, token)
            except (TypeError, ValueError, LookupError, RuntimeError) as err:
                # The stop check runs this request's stop strings against the tokenizer's decode of its own
                # output: what fails there (a stop that is not a string, an id the tokenizer cannot decode; a
                # Rust tokenizer reports its own failures as RuntimeError) concerns this request alone, so it
                # fails alone and the loop goes on for the others. No torch runs in this check.
                finished.append(self._finish(request, "error", now=now, error=f"stop check failed: {err!r}"))
                continue
            if reason is not None:
                finished.append(self._finish(request, reason[0], now=now, stop_reason=reason[1]))
        self.counters["generated_tokens"] += generated
        self._rate.append((now, generated))
        self._rate_total += generated
        return finished

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        cache_keys: Sequence[Hashable | None] | None = None,
    ) -> list[Completion]:
        """Run ``prompts`` to completion together (continuous batching); completions in input order.

        Requests added earlier with ``add_request`` keep running; those that finish meanwhile are
        returned by the next ``step()``.
        """
        per_request = params if isinstance(params, Sequence) else [params] * len(prompts)
        keys = cache_keys if cache_keys is not None else [None] * len(prompts)
        if len(per_request) != len(prompts) or len(keys) != len(prompts):
            raise ValueError(
                f"generate: {len(prompts)} prompts but {len(per_request)} params and {len(keys)} cache_keys"
            )
        ids = [self.add_request(p, sp, cache_key=k) for p, sp, k in zip(prompts, per_request, keys, strict=True)]
        wanted = set(ids)
        results: dict[str, Completion] = {}
        others: list[Completion] = []
        while not wanted.issubset(results):
            for completion in self.step():
                if completion.request_id in wanted:
                    results[completion.request_id] = completion
                else:
                    others.append(completion)
        self._done.extend(others)
        return [results[i] for i in ids]

    # ----------------------------------------------------------------- weights
    def update_weights(
        self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], version: int
    ) -> None:
        """Copy new values into the model's parameters (by ``named_parameters`` name) and set the version.

        All names and shapes are checked before anything is copied, so a bad update changes nothing.
        Cached prefixes are dropped: their KV was computed under the old weights.
        """
        items = list(named_tensors.items()) if isinstance(named_tensors, Mapping) else list(named_tensors)
        targets: dict[str, torch.Tensor] = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(self.model.named_buffers(remove_duplicate=False))
        unknown = [name for name, _ in items if name not in targets]
        if unknown:
            raise KeyError(
                f"update_weights: unknown parameter names {unknown[:5]}"
                f"{' ...' if len(unknown) > 5 else ''}; the model has e.g. {list(targets)[:3]}"
            )
        mismatched = [
            f"{name}: {tuple(t.shape)} != {tuple(targets[name].shape)}"
            for name, t in items
            if tuple(t.shape) != tuple(targets[name].shape)
        ]
        if mismatched:
            raise ValueError(f"update_weights: shape mismatch {mismatched[:5]}")
        with torch.no_grad():
            for name, tensor in items:
                targets[name].copy_(tensor)
        self.prefix_cache.clear()
        self.version = int(version)

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        now = time.perf_counter()
        while self._rate and now - self._rate[0][0] > _RATE_WINDOW_S:
            self._rate_total -= self._rate.popleft()[1]
        span = now - self._rate[0][0] if len(self._rate) > 1 else 0.0
        # A running total: the async engine reads stats after every step, and summing the window's
        # (hundreds of) entries each time cost more than the step's own bookkeeping.
        recent = self._rate_total - self._rate[0][1] if self._rate else 0
        return {
            "version": self.version,
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "gen_tokens_per_s": recent / span if span > 0 else 0.0,
            "prefix_cache_tokens": self.prefix_cache.num_tokens,
            "prefix_cache_entries": len(self.prefix_cache),
            "kv_cache_bytes": self.kv.nbytes,
            "max_num_seqs": self.kv.max_num_seqs,
            "max_model_len": self.max_model_len,
            **self.counters,
        }

    # ----------------------------------------------------------------- internals
    def _prefill_shared(self, requests: list[Request]) -> torch.Tensor:
        """Prefill ``requests``, running each distinct prompt once; returns their last-token logits in order.

        GRPO starts ``G`` rollouts of the same task together, so identical prompts arrive in the same step
        (every first turn of a group; in small environments many later turns too). A duplicate's KV is a
        copy of its twin's (the same tokens under the same weights give the same KV), so it is copied, not
        recomputed. Each request still samples from its own generator.
        """
        seqs = [self._prefill_seq(r) for r in requests]
        first: dict[tuple[int, tuple[int, ...]], int] = {}
        twin = [
            first.setdefault((s.start, tuple(r.prompt_ids)), i)
            for i, (s, r) in enumerate(zip(seqs, requests, strict=True))
        ]
        unique = sorted(set(twin))
        logits = self.runner.prefill([seqs[i] for i in unique])
        row = {i: k for k, i in enumerate(unique)}
        for i, j in enumerate(twin):
            if i != j:
                self.kv.move(seqs[j].slot, seqs[i].slot, len(requests[i].prompt_ids))
        self.counters["shared_prefill_tokens"] += sum(len(seqs[i].token_ids) for i, j in enumerate(twin) if i != j)
        return logits[[row[j] for j in twin]]

    def _prefill_seq(self, request: Request) -> PrefillSeq:
        start, slot = request.cached_prompt_tokens, request.slot
        assert slot is not None  # the scheduler gave it a slot
        if request.reused_prefix is not None:
            self.kv.write(slot, request.reused_prefix.kv, start)
            request.reused_prefix = None
        return PrefillSeq(slot=slot, start=start, token_ids=request.prompt_ids[start:])

    def _sample(self, batch: list[Request], logits: torch.Tensor) -> Sampled:
        params = [r.params for r in batch]
        device = logits.device
        temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
        if all(p.greedy for p in params):
            uniforms = torch.zeros(len(batch), device=device)
        else:
            uniforms = draw_uniforms([r.generator for r in batch], self._generator).to(device)
        top_k = torch.tensor([p.top_k for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        return sample(logits, temperature, top_k, top_p, uniforms)

    def _stop_reason(self, request: Request, token: int) -> tuple[FinishReason, int | str | None] | None:
        params = request.params
        if token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids):
            return "stop", token
        if params.stop and self._decode is not None:  # add_request refused stop strings without a tokenizer
            text = self._decode(request.output_ids)
            for stop in params.stop:
                if stop in text:
                    return "stop", stop
        if len(request.output_ids) >= params.max_tokens or request.num_tokens >= self.max_model_len:
            return "length", None
        return None

    def _finish(
        self,
        request: Request,
        reason: FinishReason,
        now: float | None = None,
        error: str | None = None,
        stop_reason: int | str | None = None,
    ) -> Completion:
        """Take ``request`` out of the engine (slot, prefix cache) and build its completion."""
        if request.slot is not None:
            if reason == "error":
                self.kv.clear(request.slot, request.num_computed)
            elif request.cache_key is not None and self.prefix_cache.capacity_tokens > 0 and request.num_computed > 0:
                tokens = (request.prompt_ids + request.output_ids)[: request.num_computed]
                self.prefix_cache.put(
                    request.cache_key,
                    CachedPrefix(tokens, self.kv.read(request.slot, request.num_computed), self.version),
                )
            self.scheduler.release(request)
        del self._requests[request.request_id]
        self.counters[reason] += 1
        if request.cached_prompt_tokens:
            self.counters["prefix_hits"] += 1
            self.counters["cached_prompt_tokens"] += request.cached_prompt_tokens
        return request.completion(
            reason, self.version, now if now is not None else time.perf_counter(), error=error, stop_reason=stop_reason
        )
