"""``AsyncLLMEngine``: the engine's step loop on a background thread, for asyncio callers (Ray async actors).

Callers on one event loop ``await generate(...)`` concurrently; the engine thread batches them all.
Everything that touches the engine (add, abort, weight updates) is queued as a command and applied
by the engine thread at the next step boundary, so the engine itself is never shared between
threads. Results go back with ``loop.call_soon_threadsafe``.

If the loop thread dies (a bug, an out-of-memory), every pending and later call raises
:class:`EngineDeadError` carrying the cause, instead of hanging.

Torch threads: ``EngineConfig.num_threads`` is applied on the engine thread as well as at construction,
since OpenMP keeps the setting per thread; torch's intra-op pool itself is process-wide.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rollarc.engine.config import EngineConfig
from rollarc.engine.engine import LLMEngine
from rollarc.engine.types import Completion, EngineDeadError, SamplingParams

logger = logging.getLogger(__name__)

# A streaming caller's callback: the new tokens' ids, log-probs and weight versions, called on its event loop.
OnTokens = Callable[[list[int], list[float], list[int]], None]


def _settle(future: asyncio.Future, result: Completion | None, error: BaseException | None) -> None:
    if future.done():  # the caller cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class AsyncLLMEngine:
    def __init__(self, model: nn.Module, config: EngineConfig | None = None, tokenizer: Any = None) -> None:
        self.engine = LLMEngine(model, config, tokenizer)
        self._cv = threading.Condition()
        self._commands: list[tuple[Any, ...]] = []
        self._waiters: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._watchers: dict[str, OnTokens] = {}  # streaming requests (under _cv)
        self._streamed: dict[str, int] = {}  # tokens already handed to each watcher (engine thread only)
        self._ids = itertools.count()
        self._stopping = False
        self._error: BaseException | None = None
        self._stats = self.engine.stats()
        self._thread = threading.Thread(target=self._run, name="rollarc-engine", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- public API (any thread / event loop)
    async def generate(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        cache_key: Hashable | None = None,
        on_tokens: OnTokens | None = None,
    ) -> Completion:
        """Generate for one prompt; resolves when the request finishes (any finish_reason).

        Cancelling the awaiting task aborts the request. Bad arguments raise ``ValueError``. ``on_tokens`` (a
        streaming server) is called on this event loop after each step with the tokens sampled since its last
        call; the tokens of the step that finishes the request come only in the returned completion.
        """
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request_id = request_id if request_id is not None else f"async-{next(self._ids)}"
        with self._cv:
            self._check_alive()
            if request_id in self._waiters:
                raise ValueError(f"request_id {request_id!r} is already in use")
            self._waiters[request_id] = (loop, future)
            if on_tokens is not None:
                self._watchers[request_id] = on_tokens
            self._commands.append(("add", request_id, list(prompt_ids), params, cache_key))
            self._cv.notify()
        try:
            return await future
        except asyncio.CancelledError:
            with self._cv:
                if self._error is None and not self._stopping:
                    self._commands.append(("abort", request_id))
                    self._cv.notify()
            raise

    def submit_many(
        self,
        prompts: Sequence[Sequence[int]],
        params: Sequence[SamplingParams | None],
        request_ids: Sequence[str] | None = None,
        cache_keys: Sequence[Hashable | None] | None = None,
    ) -> list[asyncio.Future[Completion]]:
        """Queue many requests in one command batch; one future per request, resolved as each finishes.

        All of them reach the engine thread together, so they are admitted at the same step boundary:
        ``generate`` called in a loop lets the engine wake on the first and start a step with a partial
        batch. Call it on the event loop that awaits the futures. A request whose arguments are bad fails
        its own future with ``ValueError``; the others run.
        """
        n = len(prompts)
        ids = list(request_ids) if request_ids is not None else [f"async-{next(self._ids)}" for _ in range(n)]
        keys = list(cache_keys) if cache_keys is not None else [None] * n
        if not (len(params) == len(ids) == len(keys) == n):
            raise ValueError(f"submit_many: {n} prompts but {len(params)} params, {len(ids)} ids, {len(keys)} keys")
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Completion]] = [loop.create_future() for _ in range(n)]
        with self._cv:
            self._check_alive()
            clash = [i for i in ids if i in self._waiters]
            if clash or len(set(ids)) != n:
                raise ValueError(f"request_id {(clash or ids)[0]!r} is already in use")
            for request_id, prompt, sampling, key, future in zip(ids, prompts, params, keys, futures, strict=True):
                self._waiters[request_id] = (loop, future)
                self._commands.append(("add", request_id, list(prompt), sampling, key))
            self._cv.notify()
        return futures

    async def generate_many(
        self,
        prompts: Sequence[Sequence[int]],
        params: Sequence[SamplingParams | None],
        request_ids: Sequence[str] | None = None,
        cache_keys: Sequence[Hashable | None] | None = None,
    ) -> list[Completion]:
        """:meth:`submit_many`, then wait for all; completions in input order.

        Cancelling the awaiting task aborts every unfinished request.
        """
        ids = list(request_ids) if request_ids is not None else [f"async-{next(self._ids)}" for _ in prompts]
        futures = self.submit_many(prompts, params, ids, cache_keys)
        try:
            await asyncio.wait(futures)  # unlike gather, a cancelled wait leaves the futures as they are
        except asyncio.CancelledError:
            self.abort_unfinished(ids, futures)
            raise
        return [future.result() for future in futures]

    def abort_unfinished(self, request_ids: Sequence[str], futures: Sequence[asyncio.Future[Completion]]) -> None:
        """Abort the requests whose futures are still pending, and cancel those futures (nobody waits any more)."""
        with self._cv:
            if self._error is None and not self._stopping:
                self._commands += [("abort", i) for i, f in zip(request_ids, futures, strict=True) if not f.done()]
                self._cv.notify()
        for future in futures:
            future.cancel()

    def abort(self, request_id: str) -> None:
        """Abort a request; its ``generate`` returns a Completion with finish_reason "abort"."""
        self._submit(("abort", request_id))

    def update_weights_nowait(
        self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], version: int
    ) -> concurrent.futures.Future:
        """Queue a weight update for the next step boundary; the future resolves once it is applied."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._submit(("update", named_tensors, version, done))
        return done

    async def update_weights(
        self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], version: int
    ) -> None:
        """Apply new weights between two steps and return once they are in use (see ``LLMEngine.update_weights``)."""
        await asyncio.wrap_future(self.update_weights_nowait(named_tensors, version))

    def stats(self) -> dict[str, Any]:
        """The engine's stats as of the end of its latest step."""
        return dict(self._stats)

    @property
    def version(self) -> int:
        """The weight version in use (set once an update is applied)."""
        return self.engine.version

    def check_alive(self) -> None:
        """Raise :class:`EngineDeadError` when the loop thread is not running: a replica's health check, so a replica
        whose actor lives on around a dead engine is replaced like a dead one."""
        with self._cv:
            self._check_alive()

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Stop the loop thread; unfinished requests fail with :class:`EngineDeadError`. Idempotent."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # ----------------------------------------------------------------- engine thread
    def _submit(self, command: tuple[Any, ...]) -> None:
        with self._cv:
            self._check_alive()
            self._commands.append(command)
            self._cv.notify()

    def _check_alive(self) -> None:
        if self._error is not None:
            raise EngineDeadError(f"engine loop failed: {self._error!r}") from self._error
        if self._stopping:
            raise EngineDeadError("engine was shut down")

    def _run(self) -> None:
        if self.engine.config.num_threads is not None:
            torch.set_num_threads(self.engine.config.num_threads)
        try:
            while True:
                with self._cv:
                    while not (self._commands or self._stopping or self.engine.has_unfinished()):
                        self._cv.wait()
                    if self._stopping:
                        break
                    commands, self._commands = self._commands, []
                for command in commands:
                    self._apply(command)
                if commands:
                    self._stats = self.engine.stats()
                if self.engine.has_unfinished():
                    for completion in self.engine.step():
                        self._resolve(completion.request_id, completion, None)
                    self._report_tokens()
                self._stats = self.engine.stats()
        except BaseException as err:  # logged here and raised to every caller as EngineDeadError
            self._error = err
            logger.exception("rollarc engine loop failed; pending and later calls raise EngineDeadError")
        finally:
            self._fail_all()

    def _apply(self, command: tuple[Any, ...]) -> None:
        kind = command[0]
        if kind == "add":
            _, request_id, prompt_ids, params, cache_key = command
            try:
                self.engine.add_request(prompt_ids, params, request_id=request_id, cache_key=cache_key)
            except ValueError as err:
                self._resolve(request_id, None, err)
        elif kind == "abort":
            self.engine.abort(command[1])
        elif kind == "update":
            _, named_tensors, version, done = command
            try:
                self.engine.update_weights(named_tensors, version)
            except (KeyError, ValueError) as err:
                done.set_exception(err)
            else:
                done.set_result(None)

    def _report_tokens(self) -> None:
        """Hand each streaming caller the tokens its request sampled since the last report, on its event loop."""
        with self._cv:
            if not self._watchers:
                return
            watched = [(rid, callback, self._waiters.get(rid)) for rid, callback in self._watchers.items()]
        for request_id, callback, waiter in watched:
            start = self._streamed.get(request_id, 0)
            ids, logprobs, versions = self.engine.new_output(request_id, start)
            if waiter is None or not ids:
                continue
            self._streamed[request_id] = start + len(ids)
            with contextlib.suppress(RuntimeError):  # the caller's event loop is closed: nobody is waiting any more
                waiter[0].call_soon_threadsafe(callback, ids, logprobs, versions)

    def _resolve(self, request_id: str, completion: Completion | None, error: BaseException | None) -> None:
        self._streamed.pop(request_id, None)
        with self._cv:
            self._watchers.pop(request_id, None)
            waiter = self._waiters.pop(request_id, None)
        if waiter is None:
            return
        loop, future = waiter
        with contextlib.suppress(RuntimeError):  # the caller's event loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, future, completion, error)

    def _fail_all(self) -> None:
        """Fail every pending request and weight update: the loop is gone."""
        with self._cv:
            self._stopping = True
            waiters, self._waiters = self._waiters, {}
            self._watchers.clear()
            commands, self._commands = self._commands, []
        cause = self._error
        for request_id in waiters:
            error = EngineDeadError(
                f"engine loop ended before request {request_id!r} finished"
                + (f": {cause!r}" if cause is not None else " (shut down)")
            )
            error.__cause__ = cause
            loop, future = waiters[request_id]
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, None, error)
        for command in commands:
            if command[0] == "update":
                command[3].set_exception(EngineDeadError("engine loop ended before the weight update was applied"))
