"""The in-flight update plan (``rollarc.policy.in_flight``): every mode on both kinds of engine, by hand."""

from __future__ import annotations

import pytest

from rollarc.policy.in_flight import UpdatePlan, in_flight_problems, plan_for_backend, plan_update


@pytest.mark.parametrize(
    ("mode", "per_token", "plan", "pause"),
    [
        # finish: hold new turns, let running ones end under the old weights, then swap
        ("finish", True, UpdatePlan(hold_new=True, abort_running=False, drain_running=True, keep_cache=False), "wait"),
        ("finish", False, UpdatePlan(hold_new=True, abort_running=False, drain_running=True, keep_cache=False), "wait"),
        # abort: end running turns now; only an engine without per-token versions holds and drains around the swap
        ("abort", True, UpdatePlan(hold_new=False, abort_running=True, drain_running=False, keep_cache=False), "abort"),
        ("abort", False, UpdatePlan(hold_new=True, abort_running=True, drain_running=True, keep_cache=False), "abort"),
        # continue: nothing held, nothing aborted, the running turns keep their cache
        (
            "continue",
            True,
            UpdatePlan(hold_new=False, abort_running=False, drain_running=False, keep_cache=True),
            "keep",
        ),
    ],
)
def test_each_mode_gives_its_plan(mode: str, per_token: bool, plan: UpdatePlan, pause: str) -> None:
    got = plan_update(mode, per_token_versions=per_token)
    assert got == plan
    assert got.pause_mode == pause


def test_continue_without_per_token_versions_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError) as err:
        plan_update("continue", per_token_versions=False)
    assert str(err.value) == (
        "async.in_flight_update 'continue' needs an engine that versions each token, which this engine does not; "
        "use finish or abort"
    )


@pytest.mark.parametrize(
    ("backend", "hold_and_drain_on_abort"), [("builtin", False), ("vllm", False), ("openai", True)]
)
def test_each_backend_gets_the_plan_of_its_engine(backend: str, hold_and_drain_on_abort: bool) -> None:
    """The backends whose engines version each token take every mode; an OpenAI server holds and drains on abort."""
    aborting = plan_for_backend("abort", backend)
    assert (aborting.hold_new, aborting.drain_running) == (hold_and_drain_on_abort, hold_and_drain_on_abort)
    assert plan_for_backend("finish", backend) == plan_update("finish")
    assert in_flight_problems("finish", backend) == [] and in_flight_problems("abort", backend) == []


def test_continue_is_refused_for_the_openai_backend_alone_naming_it() -> None:
    """The one rule the config check and the OpenAI replica both read (before: a copy of it in serve/config.py)."""
    assert in_flight_problems("continue", "builtin") == [] and in_flight_problems("continue", "vllm") == []
    assert in_flight_problems("continue", "openai") == [
        "async.in_flight_update 'continue' needs an engine that versions each token, which rollout.backend "
        "'openai' does not; use finish or abort"
    ]
    with pytest.raises(ValueError, match=r"rollout\.backend 'openai' does not"):
        plan_for_backend("continue", "openai")
    with pytest.raises(ValueError, match=r"rollout\.backend 'sglang': use one of builtin, vllm, openai"):
        plan_for_backend("finish", "sglang")


def test_an_unknown_mode_names_the_values() -> None:
    with pytest.raises(ValueError) as err:
        plan_update("pause")
    assert str(err.value) == "async.in_flight_update 'pause': use one of finish, abort, continue"
