"""The device check's ``t2i`` section: one Flow-GRPO step and one elastic SP regroup of the DiT on the device.

``scripts/device_check.py`` runs it in a process of its own (it imports Ray and diffusers, which the check keeps
out of its own process), as ``python scripts/device_check_t2i.py --device cuda|cpu [--tiny] --out FILE``, and
reads the JSON it writes. Both parts run the training path's own code, not a copy:

- ``flow_grpo_step``: a DiT (PixArt architecture, random init) on the device; ``sample_sde`` draws groups of
  images there and ``FlowGrpoTrainer.step`` (the t2i trainer role's step) takes one optimiser step on them.
  Rewards are each image's mean brightness, so that groups have contrast. Recorded: where the weights sit,
  loss and grad norm (finite), how far the weights moved, and the seconds of each part.
- ``sp_regroup``: an :class:`~rollarc.diffusion.sp_group.ElasticSPGroup` of two member actors on the device
  (a local Ray cluster with one GPU: each member reserves half of it, so the transport is gloo with the Ulysses
  exchanges staged through the CPU; NCCL needs a GPU per member, :mod:`rollarc.diffusion.t2i_device`), one
  forward at degree 2, a shrink to degree 1 (one member gives its device back, the survivor keeps its weights),
  one forward again. Recorded: the degrees, the transport, each forward's largest difference from the
  single-process velocity, the regroup's seconds, and the checkpoint reads during the regroup (0).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch

from rollarc.diffusion.config import RLConfig
from rollarc.diffusion.model import T2IPolicy, build_policy
from rollarc.diffusion.sampling import sample_sde
from rollarc.diffusion.t2i_device import sp_transport
from rollarc.diffusion.trainer import FlowGrpoTrainer, GroupBatch
from rollarc.models.device import resolve_device

VOCAB = ["one", "two", "red", "blue", "square", "plus", "left", "right"]
PROMPTS = ["one red square left", "two blue plus right", "one blue square right", "two red plus left"]
MEMBER_GPUS = 0.5  # two members on one GPU


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tiny_dit(tiny: bool) -> T2IPolicy:
    """The check's DiT: the t2i default (16×16, width 64, 4 layers) for the dry run, 32×32 × 256 wide on a GPU."""
    if tiny:
        return build_policy(VOCAB, 16, 32, 2, 4, seed=0)
    return build_policy(VOCAB, 32, 256, 8, 8, seed=0)


def flow_grpo_step(device: torch.device, tiny: bool) -> dict[str, Any]:
    policy = tiny_dit(tiny).to(device)
    groups, size, steps = (2, 4, 4) if tiny else (8, 8, 8)
    prompts = [PROMPTS[g % len(PROMPTS)] for g in range(groups) for _ in range(size)]
    before = {k: v.detach().clone() for k, v in policy.transformer.state_dict().items()}
    sync(device)
    t0 = time.perf_counter()
    traj = sample_sde(policy, prompts, list(range(len(prompts))), steps, 0.7, version=0)
    sync(device)
    t1 = time.perf_counter()
    rewards = torch.tensor(traj.images().mean(axis=(1, 2, 3))).reshape(groups, size)
    trainer = FlowGrpoTrainer(policy, RLConfig(minibatches=2, clip=0.2, lr=1e-3))
    stats = trainer.step(GroupBatch(traj, rewards))
    sync(device)
    t2 = time.perf_counter()
    moved = max((policy.transformer.state_dict()[k] - v).abs().max().item() for k, v in before.items())
    return {
        "weights_on": str(policy.device),
        "dit": f"PixArt {policy.image_size}x{policy.image_size}, random init, fp32",
        "images": len(prompts),
        "denoising_steps": steps,
        "trajectories_on": str(traj.states.device),
        "loss": stats["loss"],
        "grad_norm": stats["grad_norm"],
        "finite": math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"]),
        "max_weight_change": moved,
        "sample_s": t1 - t0,
        "step_s": t2 - t1,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
    }


def sp_regroup(device: torch.device, tiny: bool) -> dict[str, Any] | str:
    try:
        import ray  # noqa: F401  (only to say "not available" when it is missing)
    except ImportError:
        return "not available (Ray is not installed: the SP members are Ray actors)"
    from rollarc.diffusion.sp_group import ElasticSPGroup
    from rollarc.runtime.ray_cluster import RayStart, start_cluster, stop_ray

    gpus = MEMBER_GPUS if device.type == "cuda" else 0.0
    policy = tiny_dit(tiny).eval()
    x = torch.randn(2, 3, policy.image_size, policy.image_size, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0.8, 0.3])
    with torch.no_grad():
        hidden, mask = policy.encode(PROMPTS[:2])
        reference = policy.velocity(x, t, (hidden, mask))
    with tempfile.TemporaryDirectory() as tmp:
        policy.save(Path(tmp) / "policy")
        start_cluster(RayStart(pools={}, num_cpus=2), device=device.type)
        try:
            group = ElasticSPGroup(2, Path(tmp) / "policy", device=device.type, member_gpus=gpus)
            try:
                before = group.form()
                wide = group.forward(x, t, hidden, mask)
                t0 = time.perf_counter()
                after = group.shrink()
                regroup_s = time.perf_counter() - t0
                narrow = group.forward(x, t, hidden, mask)
                reads = group.disk_loads() - len(group.members)  # each survivor read the checkpoint once, at start
            finally:
                group.close()
        finally:
            stop_ray()
    transport = sp_transport(device.type, gpus)
    return {
        "members_on": device.type,
        "member_gpus": gpus,
        "backend": transport.backend,
        "staged_through_cpu": transport.staged,
        "degree_before": before,
        "degree_after": after,
        "max_abs_diff_degree_before": (wide - reference).abs().max().item(),
        "max_abs_diff_degree_after": (narrow - reference).abs().max().item(),
        "regroup_s": regroup_s,
        "checkpoint_reads_in_regroup": reads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    torch.set_num_threads(1 if args.tiny else 4)
    report = {"flow_grpo_step": flow_grpo_step(device, args.tiny), "sp_regroup": sp_regroup(device, args.tiny)}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
