"""Device check of FSDP2 training: one sharded training step (world size 1) against the same step unsharded.

``main(device="cuda")`` joins a one-rank process group (NCCL for CUDA tensors, gloo for the CPU ones), applies
``fully_shard`` per decoder layer and to the root of a freshly built preset model, and runs one GRPO step on a
synthetic batch; the reference is the plain ``PolicyTrainer`` step of the same model on the CPU. Both use SGD
with learning rate 1, so the parameters differ exactly by the difference of the two gradients (Adam's first
step, about lr * sign(grad), would turn the rounding of a near-zero gradient into a whole step).
``main(device="cpu")`` runs the same logic with gloo (the unit tests call it). Imports only torch,
transformers and rollarc; ``scripts/device_check.py`` calls ``main()`` when this file exists.
"""

from __future__ import annotations

import copy
import math
import random
import resource
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.algo.config import LossConfig
from rollarc.models import new_policy
from rollarc.train.fsdp import free_port, init_process_group
from rollarc.train.fsdp_trainer import ShardedPolicyTrainer
from rollarc.train.policy_trainer import PolicyTrainer

# Same device: only the order of float additions differs (micro-batches, sharded reduction), a few ulps of
# gradients below 1. Across devices (CUDA kernels against CPU ones) float32 sums may differ by more, still
# far below a real bug, which moves parameters by the size of the gradient itself (~1e-3 and more).
TOLERANCE = {"cpu": 1e-6, "cuda": 1e-4}


def synthetic_groups(vocab: int, groups: int = 4, size: int = 4, seed: int = 0) -> list[list[Trajectory]]:
    """GRPO groups of one-turn trajectories: random prompts (shared within a group), replies and rewards."""
    rng = random.Random(seed)
    result = []
    for g in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(24, 48))]
        group = []
        for i in range(size):
            seg = Segment()
            seg.extend_context(prompt)
            reply = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 16))]
            seg.extend_generated(reply, [-rng.uniform(0.5, 3.0) for _ in reply], [0] * len(reply))
            group.append(Trajectory(traj_id=f"g{g}t{i}", task="synthetic", seed=g, segments=[seg], reward=rng.random()))
        result.append(group)
    return result


def _sgd(trainer: PolicyTrainer) -> None:
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)  # type: ignore[assignment]
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)


def _peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def main(device: str | None = None, preset: str = "small") -> dict[str, Any]:
    """``device``: ``cuda`` or ``cpu`` (default: CUDA when this process sees a GPU, else the CPU)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return {"ok": False, "error": "CUDA is not available"}
    model, tok = new_policy(preset, max_position_embeddings=128, seed=0)
    groups = synthetic_groups(len(tok))
    options = {"pad_id": tok.pad_token_id, "micro_batch_tokens": 512, "seed": 0}
    loss_cfg = LossConfig(correction="decoupled_ppo")

    reference = PolicyTrainer(copy.deepcopy(model), loss_cfg, 1.0, **options)
    _sgd(reference)
    reference.train_step(groups)
    expected = {k: v.detach().clone() for k, v in reference.model.state_dict().items()}

    init_process_group(0, 1, "127.0.0.1", free_port(), dev)
    try:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        trainer = ShardedPolicyTrainer(model, loss_cfg, 1.0, device=dev, **options)
        _sgd(trainer)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        stats = trainer.train_step(groups)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        step_s = time.perf_counter() - start
        weights = trainer.named_weights()
    finally:
        dist.destroy_process_group()
    diff = max(float((weights[k].float() - v.float()).abs().max()) for k, v in expected.items())
    moved = sum(
        int(not torch.equal(v, model_before))
        for v, model_before in zip(
            expected.values(),
            new_policy(preset, max_position_embeddings=128, seed=0)[0].state_dict().values(),
            strict=True,
        )
    )
    tolerance = TOLERANCE.get(dev.type, TOLERANCE["cuda"])
    loss = float(stats["loss"])
    return {
        "ok": math.isfinite(loss) and diff <= tolerance and weights.keys() == expected.keys(),
        "device": str(dev),
        "world_size": 1,
        "preset": preset,
        "loss": loss,
        "loss_finite": math.isfinite(loss),
        "step_s": step_s,
        "peak_memory_gb": _peak_memory_gb(dev),
        "max_abs_param_diff": diff,
        "tolerance": tolerance,
        "tensors_moved": moved,
        "tensors": len(expected),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "cuda")))
