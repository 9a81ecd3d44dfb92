"""SDE sampling one denoising step at a time, so a preempted worker can commit its in-flight latent.

``sample_sde`` runs all ``T`` steps in one call. A spot worker instead holds an :class:`InFlight` state
and advances it step by step, heartbeating in between; on a preemption notice it commits the state and
any other worker finishes it with :func:`advance` and :func:`finish`.

**What the state holds.** The latent ``x`` after ``step`` steps, the states and log-probs so far (the
trainer needs the whole trajectory), and the RNG state. The RNG state is each image's seed plus the step
index: Flow-GRPO's noise sequence is a pure function of the seed (``flow_sde.noise_sequence``), so the
step-``i`` noise is regenerated exactly on any worker, and nothing about a ``torch.Generator`` has to
travel. The prompt context is re-encoded (deterministic under the same weights).

**Devices.** The state stays on the CPU (it is committed through Ray to a worker that may have no GPU);
each step runs on the policy's device and brings the new latent back.

**Same image.** Resuming runs the same operations on the same tensors in the same batch as an
uninterrupted run, so on the same device, thread count and weights the result is bitwise equal
(tests/unit/test_spot_resume.py checks ``torch.equal`` on the real DiT).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rollarc.algo.flow_sde import sde_step, time_grid
from rollarc.diffusion.model import T2IPolicy
from rollarc.diffusion.sampling import Trajectories, seeded_noise


@dataclass
class InFlight:
    """A batch of SDE samples ``step`` steps in: enough to finish it anywhere with the same weights."""

    prompts: list[str]
    seeds: list[int]
    steps: int
    noise_level: float
    version: int
    step: int
    x: torch.Tensor
    states: list[torch.Tensor] = field(default_factory=list)
    logps: list[torch.Tensor] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.step == self.steps


def start(
    policy: T2IPolicy, prompts: list[str], seeds: list[int], steps: int, noise_level: float, version: int
) -> InFlight:
    size = policy.image_size
    x, _ = seeded_noise(seeds, (3, size, size), steps)
    return InFlight(list(prompts), list(seeds), steps, noise_level, version, 0, x, [x], [])


@dataclass(frozen=True)
class Prepared:
    """What every step of one in-flight sample needs and no step changes: the seeds' step noise, the time grid
    and the prompts' context. A worker that advances one step at a time (to heartbeat in between) prepares
    it once per job: preparing it at every step cost a spot worker about 30 % of each job (the whole noise
    sequence regenerated and the prompts re-encoded 16 times; docs/spot.md#rollarc-bench-spot). It stays on
    the worker: a committed state does not carry it, and the worker that resumes prepares its own."""

    noise: torch.Tensor
    grid: list[float]
    context: tuple[torch.Tensor, torch.Tensor]  # what T2IPolicy.encode returns


@torch.no_grad()
def prepare(policy: T2IPolicy, state: InFlight) -> Prepared:
    size = policy.image_size
    _, noise = seeded_noise(state.seeds, (3, size, size), state.steps)
    return Prepared(noise.to(policy.device), time_grid(state.steps).tolist(), policy.encode(state.prompts))


@torch.no_grad()
def advance(policy: T2IPolicy, state: InFlight, count: int = 1, prepared: Prepared | None = None) -> InFlight:
    """``count`` more denoising steps (fewer if the job ends first); the state is updated in place.

    ``prepared``: this state's :func:`prepare` under ``policy``'s weights (made here when None)."""
    ready = prepare(policy, state) if prepared is None else prepared
    noise, grid, context, device = ready.noise, ready.grid, ready.context, policy.device
    for _ in range(min(count, state.steps - state.step)):
        i = state.step
        x = state.x.to(device)
        v = policy.velocity(x, torch.full((len(state.prompts),), grid[i], device=device), context)
        x, logp = sde_step(x, v, grid[i], grid[i + 1], noise[i], state.noise_level, grid[1])
        state.x, logp = x.cpu(), logp.cpu()
        state.states.append(state.x)
        state.logps.append(logp)
        state.step += 1
    return state


def finish(state: InFlight) -> Trajectories:
    if not state.finished:
        raise ValueError(f"in-flight sample is at step {state.step} of {state.steps}; advance it first")
    return Trajectories(
        state.prompts, state.seeds, torch.stack(state.states, 1), torch.stack(state.logps, 1), state.version
    )
