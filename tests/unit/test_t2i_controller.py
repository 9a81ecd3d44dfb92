"""The t2i controller's schedules and exploration budget (no Ray started: nothing here calls a worker)."""

import numpy as np

from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.controller import T2IController, T2IWorkers


class NullMetrics:
    def log(self, step, values):
        raise AssertionError("not expected")


def controller(tmp_path, **explore):
    cfg = T2IConfig(kind="t2i", train={"prompts_per_step": 3, "group_size": 4}, explore={"enabled": True, **explore})
    prompts = [f"p{i}" for i in range(10)]
    return T2IController(cfg, tmp_path, T2IWorkers(None, None, None), prompts, ["h"], NullMetrics())


def test_schedules_are_fixed_by_the_seed(tmp_path):
    a, b = controller(tmp_path), controller(tmp_path)
    assert a.prompts_for(3) == b.prompts_for(3) and len(a.prompts_for(3)) == 3
    assert a.candidates_for(3, 1, 6)[:4] == a.candidates_for(3, 1, 4)  # the baseline's G are the first candidates
    assert a.candidates_for(3, 1, 4) != a.candidates_for(4, 1, 4)


def test_the_contrast_planner_splits_the_same_budget(tmp_path):
    plain = controller(tmp_path, candidates=12)
    assert plain.exploration_sizes(["a", "b", "c"]) == [12, 12, 12]
    planned = controller(tmp_path, candidates=12, planner="contrast", chunk=4, arms="prompt")
    assert planned.exploration_sizes(["a", "b", "c"]) == [12, 12, 12]  # nothing observed: uniform
    planned.planner.observe("a", 0.2)
    planned.planner.observe("b", 0.0)
    sizes = planned.exploration_sizes(["a", "b", "c"])
    # b's seeds all scored alike: not explored; the unseen c scores like a; 36 images: 4 + 4 + 7 chunks of 4 -> 20, 16
    assert sizes == [20, 0, 16] and sum(sizes) <= 36


def test_template_arms_recur_across_prompts(tmp_path):
    planned = controller(tmp_path, candidates=12, planner="contrast", chunk=4)
    red, blue = "one red square left", "one blue square left"
    assert planned.arm_of(red) == planned.arm_of(blue) == "one * square left"
    planned.planner.observe(planned.arm_of(red), 0.1)
    planned.planner.observe(planned.arm_of("two red pluses right"), 0.0)
    # blue was never seen but its template was: it is explored, the other template's prompt is not
    assert planned.exploration_sizes([blue, "two green pluses right"]) == [24, 0]


class RecordingFleet:
    """Stands in for SpotFleet: records what the controller submits."""

    version = 7

    def __init__(self):
        self.launched = []

    def launch(self, prompts, seeds, steps, version):
        self.launched.append((prompts, seeds, steps, version))
        return [0, 1, 2]


def test_exploration_goes_to_the_spot_fleet_as_jobs_of_its_weight_version(tmp_path):
    cfg = T2IConfig(kind="t2i", train={"prompts_per_step": 3, "group_size": 4}, explore={"enabled": True})
    fleet = RecordingFleet()
    ctl = T2IController(cfg, tmp_path, T2IWorkers(None, None, None, fleet), ["p0", "p1"], ["h"], NullMetrics())
    handle, seeds = ctl.launch_exploration(2)
    assert handle == [0, 1, 2]
    ((prompts, launched_seeds, steps, version),) = fleet.launched
    assert prompts == ctl.prompts_for(2) and launched_seeds == seeds and len(seeds[0]) == cfg.explore.candidates
    assert (steps, version) == (cfg.train.sample_steps, 7)
    assert ctl.launch_exploration(cfg.train.steps) is None  # nothing past the last step


def test_the_contrast_planner_allocates_the_next_step_from_this_step(tmp_path):
    """``explore.planner: contrast``: every prompt of step s is observed before step s + 1 is allocated (by hand)."""
    cfg = T2IConfig(
        kind="t2i",
        seed=2,  # its schedule draws ["a", "b"] for step 4
        train={"prompts_per_step": 2, "group_size": 4},
        explore={"enabled": True, "planner": "contrast", "candidates": 8, "chunk": 4, "arms": "prompt"},
    )
    fleet = RecordingFleet()
    ctl = T2IController(cfg, tmp_path, T2IWorkers(None, None, None, fleet), ["a", "b"], ["h"], NullMetrics())
    ctl.step = 3
    assert ctl.exploration_sizes(["a", "b"]) == [8, 8]  # nothing observed yet: uniform
    stale = [[0.25] * 8, []]  # a explored, every candidate alike (std 0); b not explored
    fresh = np.array([[0.25] * 4, [0.0, 0.0, 1.0, 1.0]])  # b's trained group: std 0.5
    ctl.explore_next(["a", "b"], stale, fresh)
    assert ctl.planner.arms["a"].score == 0.0 and ctl.planner.arms["b"].score == 0.5
    ((prompts, seeds, _, _),) = fleet.launched
    # scores [0, 0.5]: only b is explored; 16 images = G 4 + 3 chunks of 4
    assert prompts == ["a", "b"] and [len(s) for s in seeds] == [0, 16]
    assert ctl.state()["arms"] == {"a": [1, 0.0], "b": [1, 0.5]}
