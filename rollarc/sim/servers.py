"""A fixed number of identical servers with one FIFO queue: env CPU cores, dedicated reward replicas.

Written with plain SimPy events and callbacks rather than ``simpy.Resource`` plus a process per
request: a request here is one event in and one out, which keeps 100k-trajectory runs fast.
"""

from __future__ import annotations

from collections import deque

import simpy


class FifoServers:
    def __init__(self, env: simpy.Environment, slots: int, name: str):
        if slots <= 0:
            raise ValueError(f"{name} has no servers (slots={slots})")
        self.env = env
        self.name = name
        self.slots = slots
        self.free = slots
        self.queue: deque[tuple[simpy.Event, float]] = deque()
        self.busy_s = 0.0
        self.served = 0

    def request(self, duration: float) -> simpy.Event:
        """An event that fires when a server has spent ``duration`` seconds on this request."""
        done = self.env.event()
        if self.free > 0:
            self.free -= 1
            self._start(done, duration)
        else:
            self.queue.append((done, duration))
        return done

    def _start(self, done: simpy.Event, duration: float) -> None:
        self.busy_s += duration
        self.env.timeout(duration).callbacks.append(lambda _event: self._finish(done))

    def _finish(self, done: simpy.Event) -> None:
        self.served += 1
        done.succeed()
        if self.queue:
            self._start(*self.queue.popleft())
        else:
            self.free += 1
