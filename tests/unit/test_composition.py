"""The per-step composition records (admitted, trained, stale, cancelled) and the per-token staleness histogram,
against values computed by hand."""

from __future__ import annotations

from rollarc.agent.composition import composition, token_staleness_hist
from rollarc.agent.trajectory import Segment, Trajectory


def traj(task: str, success: bool, turns: int, versions: list[int]) -> Trajectory:
    t = Trajectory(traj_id=f"{task}-{turns}", task=task, seed=0, success=success, num_turns=turns)
    segment = Segment()
    segment.extend_context([1, 2])  # prompt tokens: no version, not counted
    segment.extend_generated([3] * len(versions), [0.0] * len(versions), versions)
    t.segments.append(segment)
    t.generated_tokens = len(versions)
    return t


def test_composition_means_per_trajectory_and_counts_groups_per_task():
    groups = [
        ("lake", [traj("lake", True, 10, [0] * 6), traj("lake", False, 2, [0] * 2)]),
        ("count", [traj("count", False, 1, [1] * 1)]),
        ("lake", [traj("lake", True, 12, [1] * 9)]),
    ]
    assert composition("trained", groups) == {
        "trained_groups_step": 3,
        "trained_trajectories": 4,
        "trained_success": 2 / 4,
        "trained_turns": (10 + 2 + 1 + 12) / 4,
        "trained_tokens": (6 + 2 + 1 + 9) / 4,
        "trained_by_task": {"count": 1, "lake": 2},
    }


def test_groups_without_trajectories_count_but_have_no_means():
    assert composition("cancelled", [("swe", []), ("swe", [])]) == {
        "cancelled_groups_step": 2,
        "cancelled_trajectories": 0,
        "cancelled_success": None,
        "cancelled_turns": None,
        "cancelled_tokens": None,
        "cancelled_by_task": {"swe": 2},
    }
    assert composition("stale", [])["stale_groups_step"] == 0


def test_token_staleness_hist_counts_each_generated_token_by_its_own_lag():
    # trained by the step that starts from version 5: a turn resumed across 3 -> 5, and one fresh turn
    trajs = [traj("lake", True, 2, [3, 3, 3, 5, 5]), traj("lake", False, 1, [5, 4])]
    assert token_staleness_hist(5, trajs) == [3, 1, 3]  # lag 0: three 5s; lag 1: one 4; lag 2: three 3s
    assert token_staleness_hist(7, trajs) == [0, 0, 3, 1, 3]
    assert token_staleness_hist(5, []) == []
