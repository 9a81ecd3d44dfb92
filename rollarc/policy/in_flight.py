"""What a replica does with its running turns when new weights arrive (``async.in_flight_update``), decided once.

Every rollout engine (built-in, co-serving, vLLM, an OpenAI server) asks :func:`plan_update` and executes the
plan with its own means (a gate, an engine abort, vLLM's pause modes, cancelled HTTP requests), so the four
replicas cannot drift apart on the rule. The one engine property that changes the plan is whether the engine
labels each token with the version that produced it: one that does not (an external server) must have no turn
running across the swap, or a turn's tokens would be credited to the wrong version. Which rollout backend does is
said here too (:data:`PER_TOKEN_VERSIONS`), so the config check (:func:`in_flight_problems`) and the replicas
(:func:`plan_for_backend`) read one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

IN_FLIGHT_MODES = ("finish", "abort", "continue")  # async.in_flight_update's values
# rollout.backend -> whether its engine labels every token with its weight version. An OpenAI-compatible server
# need not (vLLM's reports none; rollarc serve does, but the backend takes any server), so it counts as not.
PER_TOKEN_VERSIONS = {"builtin": True, "vllm": True, "openai": False}


@dataclass(frozen=True)
class UpdatePlan:
    """How a replica swaps its weights in. The steps run in this order: hold, abort, drain, swap, release."""

    hold_new: bool  # new turns wait until the swap is done
    abort_running: bool  # running turns end now, keeping their partial output (the agent loop resumes them)
    drain_running: bool  # the swap waits until no turn is running
    keep_cache: bool  # running turns keep their KV cache across the swap and go on under the new weights

    @property
    def pause_mode(self) -> str:
        """The plan in vLLM's ``pause_generation`` terms (``wait``, ``abort`` or ``keep``)."""
        if self.abort_running:
            return "abort"
        return "wait" if self.drain_running else "keep"


def plan_update(mode: str, per_token_versions: bool = True, engine: str = "this engine") -> UpdatePlan:
    """The plan for ``mode`` on an engine that does (or, ``per_token_versions`` False, does not) version each token.

    - ``finish``: hold new turns, let the running ones finish under the old weights, then swap.
    - ``abort``: end the running turns with their partial output and swap; an engine without per-token versions
      also holds new turns and waits for the aborted ones to end, so no turn spans the swap.
    - ``continue``: swap at the next decode step; running turns go on under the new weights with their cache.
      Needs per-token versions (:func:`in_flight_problems` rejects it at config validation where they lack).
    """
    if mode == "finish":
        return UpdatePlan(hold_new=True, abort_running=False, drain_running=True, keep_cache=False)
    if mode == "abort":
        exact = not per_token_versions
        return UpdatePlan(hold_new=exact, abort_running=True, drain_running=exact, keep_cache=False)
    if mode == "continue":
        if not per_token_versions:
            raise ValueError(
                f"async.in_flight_update 'continue' needs an engine that versions each token, which {engine} "
                "does not; use finish or abort"
            )
        return UpdatePlan(hold_new=False, abort_running=False, drain_running=False, keep_cache=True)
    raise ValueError(f"async.in_flight_update {mode!r}: use one of {', '.join(IN_FLIGHT_MODES)}")


def plan_for_backend(mode: str, backend: str) -> UpdatePlan:
    """The plan for ``mode`` on a replica of ``rollout.backend`` ``backend``."""
    if backend not in PER_TOKEN_VERSIONS:
        raise ValueError(f"rollout.backend {backend!r}: use one of {', '.join(PER_TOKEN_VERSIONS)}")
    return plan_update(mode, PER_TOKEN_VERSIONS[backend], engine=f"rollout.backend {backend!r}")


def in_flight_problems(mode: str, backend: str) -> list[str]:
    """The config's cross-section rule: ``async.in_flight_update`` must have a plan on ``rollout.backend``'s engine
    (one line each, naming both settings and the fix); empty when it has."""
    try:
        plan_for_backend(mode, backend)
    except ValueError as err:
        return [str(err)]
    return []
