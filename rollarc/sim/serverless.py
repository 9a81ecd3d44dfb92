"""Serverless reward instances: cold starts, scale-out on demand, scale-in after a keep-alive.

A request that finds no idle warm instance queues. The pool starts one more instance (up to the cap)
when the queued work, spread over the instances already warm or warming, would take longer than a
cold start: starting one sooner would not help the queue, starting it later would. With nothing
running at all it always starts one. A started instance serves the queue head when its cold start
ends. An instance idle for ``keep_alive_s`` is released. Billing is per instance-second from start (cold start included) to
release, at the device price times ``price_markup``.
"""

from __future__ import annotations

from collections import deque

import simpy


class ServerlessPool:
    def __init__(self, env: simpy.Environment, cold_start_s: float, keep_alive_s: float, max_instances: int):
        self.env = env
        self.cold_start_s = cold_start_s
        self.keep_alive_s = keep_alive_s
        self.max_instances = max_instances
        self.idle: list[int] = []  # instance ids, most recently idle last
        self.idle_since: dict[int, float] = {}
        self.started_at: dict[int, float] = {}
        self.starting = 0
        self.queue: deque[tuple[simpy.Event, float]] = deque()
        self.instance_seconds = 0.0  # of released instances; live ones are added in :meth:`billed_seconds`
        self.busy_s = 0.0
        self.cold_starts = 0
        self.peak_instances = 0
        self.served = 0
        self.queued_s = 0.0  # service time waiting in the queue
        self._next_id = 0

    @property
    def instances(self) -> int:
        return len(self.started_at)

    def request(self, duration: float) -> simpy.Event:
        done = self.env.event()
        if self.idle:
            self._serve(self.idle.pop(), done, duration)
            return done
        self.queue.append((done, duration))
        self.queued_s += duration
        if (
            self.instances < self.max_instances
            and self.starting < len(self.queue)
            and (self.instances == 0 or self.queued_s / self.instances > self.cold_start_s)
        ):
            self._cold_start()
        return done

    def billed_seconds(self, now: float) -> float:
        return self.instance_seconds + sum(now - t for t in self.started_at.values())

    def _cold_start(self) -> None:
        instance = self._next_id
        self._next_id += 1
        self.started_at[instance] = self.env.now
        self.starting += 1
        self.cold_starts += 1
        self.peak_instances = max(self.peak_instances, self.instances)
        self.env.timeout(self.cold_start_s).callbacks.append(lambda _e: self._warm(instance))

    def _warm(self, instance: int) -> None:
        self.starting -= 1
        self._next_request(instance)

    def _serve(self, instance: int, done: simpy.Event, duration: float) -> None:
        self.idle_since.pop(instance, None)
        self.busy_s += duration
        self.env.timeout(duration).callbacks.append(lambda _e: self._finish(instance, done))

    def _finish(self, instance: int, done: simpy.Event) -> None:
        self.served += 1
        done.succeed()
        self._next_request(instance)

    def _next_request(self, instance: int) -> None:
        if self.queue:
            done, duration = self.queue.popleft()
            self.queued_s -= duration
            self._serve(instance, done, duration)
            return
        since = self.env.now
        self.idle.append(instance)
        self.idle_since[instance] = since
        self.env.timeout(self.keep_alive_s).callbacks.append(lambda _e: self._maybe_release(instance, since))

    def _maybe_release(self, instance: int, since: float) -> None:
        if self.idle_since.get(instance) != since:
            return  # it served something since, and a newer keep-alive check owns it
        self.idle.remove(instance)
        del self.idle_since[instance]
        self.instance_seconds += self.env.now - self.started_at.pop(instance)
