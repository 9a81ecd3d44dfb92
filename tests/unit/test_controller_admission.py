"""When the controller admits the next groups before a step's bookkeeping: never before an evaluation, a
checkpoint or an elastic change, nor after the last step (docs/performance.md). The decision is the step plan's,
configured from the training config as the Controller's is."""

from __future__ import annotations

from pathlib import Path

from rollarc.config import load_train_config
from rollarc.policy.step_plan import Checkpoint, Launch, Resize, StepDone
from rollarc.runtime.scheduling import RuntimeScheduling
from tests.unit.test_policy_step_plan import drive

ROOT = Path(__file__).resolve().parents[2]


def test_admits_early_except_at_evaluations_checkpoints_elastic_changes_and_the_end():
    cfg = load_train_config(
        str(ROOT / "configs/short_task.yaml"),
        [
            "train.steps=12",
            "train.eval_every=5",
            "train.checkpoint_every=4",
            "cluster.pools.compute.count=3",
            'elastic=[{"at_step": 7, "add": 1}]',
        ],
    )
    answers = drive(RuntimeScheduling(cfg).plan)
    steps = [actions for actions in answers if any(isinstance(a, StepDone) for a in actions)]
    assert [next(a.version for a in actions if isinstance(a, StepDone)) for actions in steps] == list(range(1, 13))
    early = [actions[1].version for actions in steps if isinstance(actions[0], Launch)]
    assert early == [1, 2, 3, 6, 9, 11]  # not 4, 8 (checkpoints), 5, 10 (evaluations), 7 (elastic), 12 (the end)
    evaluated = [a.version for actions in steps for a in actions if isinstance(a, StepDone) and a.evaluate]
    assert evaluated == [5, 10]
    assert [a.version for actions in steps for a in actions if isinstance(a, Checkpoint)] == [4, 8, 12]
    assert [a.version for actions in steps for a in actions if isinstance(a, Resize)] == [7]
