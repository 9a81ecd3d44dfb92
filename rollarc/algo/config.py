"""``LossConfig``: the advantage estimator, the PPO clip, the aggregation and the off-policy correction.

A setting that the chosen estimator or correction would not use is an error when it differs from
its default (``tis_cap: 3`` with ``correction: none``, say): a user who sets it believes it acts.
Defaults are accepted, so a dumped config loads again unchanged.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rollarc.algo.kinds import AdvantageKind, Aggregation, Correction
from rollarc.config.io import FrozenModel

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Surrogate = Literal["ppo", "gspo", "cispo"]


class LossConfig(FrozenModel):
    """How the policy loss is computed; see docs/algorithms.md for every formula."""

    advantage: AdvantageKind = Field(
        "grpo",
        description="advantage estimator within each group: `grpo` (reward "
        "minus group mean, over group std + eps), `dr_grpo` (minus "
        "the mean only), `rloo` (minus the mean of the others)",
    )
    surrogate: Surrogate = Field(
        "ppo",
        description="the policy-gradient surrogate: `ppo` (per-token clipped ratio), `gspo` (one length-normalised "
        "ratio per sequence, clipped; the paper clips at 3e-4 / 4e-4) or `cispo` (REINFORCE on every token "
        "weighted by its clipped, detached ratio); docs/algorithms.md",
    )
    clip_low: FiniteFloat = Field(
        0.2, gt=0, lt=1, description="clip range lower side: ratio >= 1 - clip_low (`cispo`: of the importance weight)"
    )
    clip_high: FiniteFloat = Field(
        0.28,
        gt=0,
        lt=1,
        description="clip range upper side: ratio <= 1 + clip_high (`cispo`: of the importance weight)",
    )
    agg: Aggregation = Field(
        "token_mean",
        description="loss aggregation: mean over all tokens of the batch "
        "(`token_mean`) or over each sequence, then sequences "
        "(`seq_mean`)",
    )
    kl_coef: FiniteFloat = Field(
        0.0, ge=0, description="weight of the k3 KL to the frozen reference policy (0: no reference is kept)"
    )
    entropy_coef: FiniteFloat = Field(0.0, ge=0, description="weight of the entropy bonus")
    correction: Correction = Field(
        "none",
        description="off-policy correction for tokens sampled by older "
        "versions: `none` (recorded log-probs are the PPO anchor), "
        "`tis` (truncated importance weight) or `decoupled_ppo`",
    )
    tis_cap: FiniteFloat = Field(
        2.0,
        ge=1,
        description="`tis` only: truncation C of the weight min(pi_prox/pi_behav, "
        "C); below 1 it would down-weight on-policy tokens",
    )
    decoupled_cap: FiniteFloat | None = Field(
        None,
        gt=1,
        description="`decoupled_ppo` only: tokens whose weight "
        "pi_prox/pi_behav exceeds it are dropped "
        "(null: keep all)",
    )
    proximal: Literal["auto", "recompute"] = Field(
        "auto",
        description="`tis`/`decoupled_ppo` only: where pi_prox's log-probs come from. `auto`: when a step makes one "
        "optimiser step (`train.minibatches` = `train.epochs` = 1) and the forward has no dropout, the loss "
        "forward's own, detached (the weights it runs are the step's start; no extra forward, as verl does "
        "on-policy); `recompute`: always a no-grad forward before the first optimiser step",
    )
    eps: FiniteFloat = Field(
        1e-6, gt=0, lt=1, description="`grpo` only: added to the group's sample std before dividing"
    )

    @model_validator(mode="after")
    def _no_setting_without_effect(self) -> LossConfig:
        applies = {
            "eps": (self.advantage == "grpo", "advantage='grpo'"),
            "tis_cap": (self.correction == "tis", "correction='tis'"),
            "decoupled_cap": (self.correction == "decoupled_ppo", "correction='decoupled_ppo'"),
            "proximal": (self.correction != "none", "correction 'tis' or 'decoupled_ppo'"),
            "agg": (self.surrogate != "gspo", "surrogate 'ppo' or 'cispo' (gspo averages over sequences)"),
        }
        for name, (used, where) in applies.items():
            value = getattr(self, name)
            if not used and value != type(self).model_fields[name].default:
                raise ValueError(
                    f"{name}={value!r} has no effect with advantage={self.advantage!r}, "
                    f"correction={self.correction!r} and surrogate={self.surrogate!r}; it only applies with {where}"
                )
        return self
