"""One Flow-GRPO optimiser step on a batch of groups (in-process; the Ray trainer role wraps it).

For every image, every denoising step ``i`` is re-evaluated under the current weights: the velocity at
the recorded ``x_{t_i}`` gives the transition's mean, and the recorded ``x_{t_{i+1}}`` its log-prob.
The loss is the clipped ratio against the behaviour log-prob (recorded at sampling) times the image's
group-relative advantage (std floored: ``floored_group_advantages``), averaged over images and steps, plus ``kl_coef`` × the KL of each step's
Gaussian to the reference's. The groups are split into ``minibatches`` optimiser sub-steps, so every
sub-step after the first sees a ratio ≠ 1 and the clip acts. The step runs where the policy's weights are
(``model.device``); the batch arrives on the CPU and is copied there.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from rollarc.algo.flow_grpo import clipped_step_loss, floored_group_advantages, gaussian_mean_kl
from rollarc.algo.flow_sde import gaussian_log_prob, sde_mean, sde_std, time_grid
from rollarc.diffusion.config import RLConfig
from rollarc.diffusion.model import T2IPolicy
from rollarc.diffusion.sampling import Trajectories


@dataclass
class GroupBatch:
    """Groups for one step: ``trajectories`` hold ``groups × G`` images, group-major; ``rewards [groups, G]``."""

    trajectories: Trajectories
    rewards: torch.Tensor


class FlowGrpoTrainer:
    def __init__(self, policy: T2IPolicy, cfg: RLConfig, reference: T2IPolicy | None = None):
        """``reference``: the KL's reference (default: a copy of ``policy``); kept only when ``kl_coef > 0``."""
        self.policy = policy
        self.cfg = cfg
        for p in policy.encoder.parameters():
            p.requires_grad_(False)
        self.reference = None
        if cfg.kl_coef > 0:
            self.reference = (reference or copy.deepcopy(policy)).eval()
        self.opt = torch.optim.AdamW(policy.transformer.parameters(), lr=cfg.lr, weight_decay=0.0)

    def step(self, batch: GroupBatch) -> dict[str, float]:
        cfg, traj, device = self.cfg, batch.trajectories, self.policy.device
        groups, size = batch.rewards.shape
        adv = floored_group_advantages(batch.rewards.to(torch.float32), cfg.adv_std_floor).reshape(-1).to(device)
        states, behaviour = traj.states.to(device), traj.logps.to(device)
        steps = traj.logps.shape[1]
        grid = time_grid(steps).tolist()
        stats: dict[str, float] = {"loss": 0.0, "kl": 0.0}
        clip_first = clip_last = clip_all = 0.0
        ratios = []
        parts = [list(range(g * size, (g + 1) * size)) for g in range(groups)]
        chunks = [
            [r for part in parts[i :: cfg.minibatches] for r in part] for i in range(min(cfg.minibatches, groups))
        ]
        for rows in chunks:
            index = torch.tensor(rows, device=device)
            prompts = [traj.prompts[i] for i in rows]
            context = self.policy.encode(prompts)
            ref_context = self.reference.encode(prompts) if self.reference is not None else None
            self.opt.zero_grad()
            total = torch.zeros((), device=device)
            for i in range(steps):
                t, t_next = grid[i], grid[i + 1]
                x, x_next = states[index, i], states[index, i + 1]
                tt = torch.full((len(rows),), t, device=device)
                v = self.policy.velocity(x, tt, context)
                mean = sde_mean(x, v, t, t_next, cfg.noise_level, grid[1])
                std = sde_std(t, t_next, cfg.noise_level, grid[1])
                logp = gaussian_log_prob(x_next, mean, std)
                loss, clipped = clipped_step_loss(logp, behaviour[index, i], adv[index], cfg.clip)
                step_loss = loss.mean()
                if self.reference is not None and ref_context is not None:
                    with torch.no_grad():
                        ref_mean = sde_mean(
                            x, self.reference.velocity(x, tt, ref_context), t, t_next, cfg.noise_level, grid[1]
                        )
                    kl = gaussian_mean_kl(mean, ref_mean, std).mean()
                    step_loss = step_loss + cfg.kl_coef * kl
                    stats["kl"] += kl.item() / (steps * len(chunks))
                (step_loss / steps).backward()
                total += step_loss.detach() / steps
                frac = clipped.mean().item()
                clip_all += frac / (steps * len(chunks))
                if i < steps // 2:
                    clip_first += frac / (len(chunks) * (steps // 2))
                else:
                    clip_last += frac / (len(chunks) * (steps - steps // 2))
                ratios.append(torch.exp(logp.detach() - behaviour[index, i]).mean().item())
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.transformer.parameters(), cfg.max_grad_norm)
            self.opt.step()
            stats["loss"] += total.item() / len(chunks)
            stats["grad_norm"] = float(grad_norm)
        stats.update(
            clip_fraction=clip_all,
            clip_fraction_first_half=clip_first,
            clip_fraction_last_half=clip_last,
            ratio_mean=sum(ratios) / len(ratios),
        )
        return stats
