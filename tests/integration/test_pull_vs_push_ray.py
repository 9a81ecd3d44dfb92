"""Pull vs push measured on Ray, small: both modes finish every job exactly once under the same trace (slot 0
lost without notice mid-job, then a notice to slot 1), score the same images;
pull redoes a lost job after the lease (or commits it on a notice).

Each mode starts a Ray cluster of its own, not the suite's shared one (tests/integration/shared_ray.py): a local
multi-node ``ray.cluster_utils.Cluster`` with a node per spot slot, which the trace's preemptions remove and replace."""

import pytest

from rollarc.bench.spot_ray import pull_vs_push_measured
from rollarc.diffusion.config import load_t2i_config


@pytest.mark.slow
def test_pull_and_push_on_ray_under_one_trace(tmp_path):
    trace = tmp_path / "trace.yaml"
    # slot 0 lost without notice while its first job runs in either mode, then a notice to slot 1
    trace.write_text("preemptions:\n  - {at_s: 0.2, slot: 0, notice_s: 0}\n  - {at_s: 0.5, slot: 1, notice_s: 0.3}\n")
    cfg = load_t2i_config(
        "configs/t2i_spot.yaml",
        [
            "model.width=16",
            "model.layers=1",
            "model.heads=2",
            "explore.candidates=4",
            "train.group_size=2",
            f"spot.trace={trace}",
            "spot.target=slot",
            "spot.replacement_s=0.5",
            "spot.lease_s=2.0",
        ],
    )
    out = pull_vs_push_measured(cfg, tmp_path, jobs=8, steps=120)
    pull, push = out["pull"], out["push"]
    assert out["same_rewards"]  # the same jobs scored the same either way
    assert (pull["completed"], pull["lost_jobs"], pull["duplicate_jobs"]) == (8, 0, 0)
    assert (push["completed"], push["lost_jobs"], push["duplicate_jobs"]) == (8, 0, 0)
    assert pull["preemptions"] == push["preemptions"] == 2
    assert out["throughput_ratio"] == pytest.approx(pull["jobs_per_s"] / push["jobs_per_s"])
    for mode in (pull, push):  # where the slot-seconds went: slot 0 spent 0.5 s without a node in both modes
        acc = mode["time_accounting"]
        assert acc["slot_s"] == pytest.approx(2 * mode["seconds"]) and 0 < acc["busy_share"] <= 1
        assert acc["down_slot_s"] > 0 and acc["job_s_median"] > 0
    # Not asserted: that push redid a job. Whether the loss at 0.2 s (wall clock) catches slot 0 mid-job
    # depends on the machine's speed: under load a clean CI run saw push redo nothing. The restart of a lost
    # job from step 0 is tested deterministically in tests/unit/test_spot_push_plan.py.
    assert pull["redone_jobs"] + pull["committed_on_notice"] >= 1  # its lease expired (or a notice committed it)
