"""The phase split of ``rollarc bench step``: where synchronous rollarc's step differs from the in-process loop's.

Both modes do the same five things per step, in order; rollarc adds the weight swap the in-process loop does not
need (its sampler is the trained model). Each mode's own measurements map onto one shared list of phases:

======================  ===========================================  ======================================
phase                   in-process loop (``generate_loop``)           synchronous rollarc (``step_timeline``)
======================  ===========================================  ======================================
``start_s``             env resets and prompt rendering               previous swap → first turn in the engine
                                                                      (controller loop, EnvWorker call, resets
                                                                      and prompts, two Ray hops)
``generate_s``          one HF ``generate`` call                      first turn in → last turn out of the engine
``score_s``             env steps                                     last turn out → last env step (two hops back)
``to_train_s``          building the trajectories                     last env step → trainer starts (results to
                                                                      the driver, the batch to the trainer)
``train_s``             ``PolicyTrainer.train_step``                  the same, on the TrainWorker
``publish_s``           (none)                                        the trainer publishes the weights
``sync_s``              (none)                                        publish end → the replica's swap ends
======================  ===========================================  ======================================

Figures are **means** over the steady steps (step 1 left out in both modes), not medians: throughput is the inverse
of the mean step, so the phases' differences add up exactly to the step's difference and so explain the ratio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean

PHASES = ("start_s", "generate_s", "score_s", "to_train_s", "train_s", "publish_s", "sync_s")

# in-process loop's own phases (generate_loop.PHASES) -> the shared phase they are
INPROCESS = {"prompts_s": "start_s", "generate_s": "generate_s", "env_s": "score_s", "batch_s": "to_train_s"}
INPROCESS_TRAIN = "train_s"
# step_timeline links -> the shared phase (the stagger is inside generate_s already)
SYNC = {
    "admit_s": "start_s",
    "generate_s": "generate_s",
    "return_s": "score_s",
    "to_train_s": "to_train_s",
    "train_s": "train_s",
    "publish_s": "publish_s",
    "sync_s": "sync_s",
}


def _mean_split(rows: Sequence[Mapping[str, float]], mapping: Mapping[str, str], step_key: str) -> dict[str, float]:
    split = dict.fromkeys(PHASES, 0.0)
    for source, phase in mapping.items():
        split[phase] += fmean(row[source] for row in rows)
    step = fmean(row[step_key] for row in rows)
    split["other_s"] = step - sum(split[p] for p in PHASES)  # what no phase covers (0 up to rounding when chained)
    split["step_s"] = step
    return split


def inprocess_split(steps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean seconds per phase of the in-process loop's steps 2..N (``generate_loop`` step records)."""
    rows = list(steps[1:]) or list(steps)
    return _mean_split(rows, {**INPROCESS, INPROCESS_TRAIN: "train_s"}, "step_time_s") if rows else {}


def sync_split(links: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean seconds per phase of a synchronous run's steps (``step_timeline.step_links``: step 1 is already out)."""
    return _mean_split(links, SYNC, "step_s") if links else {}


def phase_split(inprocess: Mapping[str, float], sync: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Both splits and ``sync − inprocess`` per phase; the differences sum to the step's difference."""
    out = {"inprocess": dict(inprocess), "sync": dict(sync)}
    if inprocess and sync:
        out["sync_minus_inprocess"] = {k: sync[k] - inprocess[k] for k in (*PHASES, "other_s", "step_s")}
    return out
