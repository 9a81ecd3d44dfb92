"""A thread pool of daemon threads, for environment code that may hang forever.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so a single
``env.step`` stuck in an endless loop kept ``rollarc eval`` alive after it had printed its result. A
stuck thread cannot be killed from Python; the only way not to wait for it is not to join it. These
threads are daemons: the process exits whatever they are doing, and nothing else changes (same
``submit`` -> ``concurrent.futures.Future`` interface, same bound on the number of threads).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_WorkItem = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool:
    """At most ``max_workers`` daemon threads, started on demand, running submitted calls in order."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "daemon-pool") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.thread_name_prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a DaemonThreadPool after shutdown")
            future: Future[Any] = Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self.thread_name_prefix}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except Exception as err:  # noqa: BLE001 - handed to the caller through the future, as the stdlib pool does
                    future.set_exception(err)
                else:
                    future.set_result(result)
            del item, future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, cancel_futures: bool = False) -> None:
        """Stop accepting work and let idle threads exit; never waits (a thread may be stuck for good)."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)
