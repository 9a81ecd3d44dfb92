"""Served dataset reward functions, the parts without Ray: outcomes, the app name, and the client's retries."""

from __future__ import annotations

import pytest

from rollarc.config import TaskConfig
from rollarc.data.config import DatasetConfig, RewardFunctionConfig
from rollarc.data.reward_fn import Answer, RewardFunctionError, load_reward_function
from rollarc.data.reward_outcome import Outcome, score_answer, scores_of
from rollarc.data.served_client import ServedRewards, ServedSettings

ANSWER = Answer(prompt="3+4=", completion="\\boxed{7}", columns={"difficulty": 2}, ground_truth="7")


def functions(*paths: str) -> list:
    return [load_reward_function(RewardFunctionConfig(function=p)) for p in paths]


class Lost(Exception):
    pass


class Broken(Exception):
    pass


def test_outcome_holds_each_functions_score_and_round_trips_to_the_same_floats():
    fs = functions("byo_rewards:length_trl", "byo_rewards:exact_verl", "byo_rewards:not_applicable_trl")
    outcome = score_answer(fs, ANSWER)
    assert outcome == Outcome(scores=(0.1 * len("\\boxed{7}"), 0.0, None))
    assert scores_of(outcome) == [f.score(ANSWER) for f in fs]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("byo_rewards:raises_trl", "reward function byo_rewards:raises_trl raised"),
        ("byo_rewards:text_trl", "not a finite number"),
        ("byo_rewards:nan_verl", "not a finite number"),
    ],
)
def test_a_failing_function_becomes_its_reason_and_raises_it_again_on_the_callers_side(path, reason):
    outcome = score_answer(functions("byo_rewards:length_trl", path), ANSWER)
    assert outcome.scores == ()
    assert outcome.error is not None and reason in outcome.error
    with pytest.raises(RewardFunctionError, match=reason):
        scores_of(outcome)


def dataset(*paths: str, **extra: object) -> DatasetConfig:
    return DatasetConfig(path="rows.jsonl", reward=[{"function": p} for p in paths], **extra)


def test_app_name_depends_on_the_functions_only():
    from rollarc.data.reward_deployment import APP_PREFIX, app_name

    a = app_name(dataset("m:f", reward_placement="serverless"))
    assert a.startswith(APP_PREFIX + "-") and len(a) == len(APP_PREFIX) + 13
    assert a == app_name(dataset("m:f", split_seed=3))
    assert a != app_name(dataset("m:g"))
    assert a != app_name(DatasetConfig(path="x", reward=[{"function": "m:f", "weight": 2.0}]))


def test_reward_placement_defaults_to_local_and_serverless_refuses_inline_steps():
    assert dataset("m:f").reward_placement == "local"
    with pytest.raises(ValueError, match="inline_env_steps: false"):
        TaskConfig(
            name="t",
            dataset={"path": "x", "reward": [{"function": "m:f"}], "reward_placement": "serverless"},
            inline_env_steps=True,
        )


class Script:
    """A transport that raises the scripted errors in turn, then answers."""

    def __init__(self, *events: BaseException | Outcome):
        self.events = list(events)
        self.budgets: list[float] = []

    def __call__(self, answer: Answer, seconds: float) -> Outcome:
        self.budgets.append(seconds)
        event = self.events.pop(0)
        if isinstance(event, BaseException):
            raise event
        return event


def client(script: Script, max_retries: int = 2) -> tuple[ServedRewards, list[float]]:
    sleeps: list[float] = []
    served = ServedRewards(
        script,
        ServedSettings(timeout_s=10.0, max_retries=max_retries, backoff_s=0.5),
        lost=(Lost,),
        errors=(Broken,),
        sleep=sleeps.append,
        clock=lambda: 100.0,
    )
    return served, sleeps


def test_a_lost_replica_is_retried_with_exponential_backoff():
    served, sleeps = client(Script(Lost(), Lost(), Outcome(scores=(1.0, None))))
    assert served.scores(ANSWER) == [1.0, None]
    assert sleeps == [0.5, 1.0]
    assert (served.stats.requests, served.stats.retries, served.stats.failures) == (1, 2, 0)


def test_retries_exhausted_timeouts_service_errors_and_function_errors_fail_with_their_reason():
    served, _ = client(Script(Lost(), Lost()), max_retries=1)
    with pytest.raises(RewardFunctionError, match="replica lost 2 times, retries exhausted: Lost"):
        served.scores(ANSWER)
    served, _ = client(Script(TimeoutError()))
    with pytest.raises(RewardFunctionError, match="served reward timed out after 10 s"):
        served.scores(ANSWER)
    served, _ = client(Script(Broken("boom")))
    with pytest.raises(RewardFunctionError, match="service error: Broken: boom"):
        served.scores(ANSWER)
    served, _ = client(Script(Outcome(error="reward function m:f raised ValueError: bad")))
    with pytest.raises(RewardFunctionError, match=r"^reward function m:f raised ValueError: bad$"):
        served.scores(ANSWER)
    assert served.stats.failures == 1


def test_the_call_gets_the_time_left_of_the_whole_budget():
    script = Script(Outcome(scores=(0.5,)))
    served, _ = client(script)
    served.scores(ANSWER)
    assert script.budgets == [10.0]


def test_start_deploys_nothing_without_served_tasks_and_checks_the_pool_before_serve_starts():
    from rollarc.config import Config
    from rollarc.config.io import ConfigError, validate
    from rollarc.rewards.dataset_service import served_datasets, start_dataset_rewards

    def cfg(placement: str, max_replicas: int) -> Config:
        task = {"path": "rows.jsonl", "reward": [{"function": "m:f"}], "reward_placement": placement}
        return validate(
            Config,
            {
                "tasks": [{"name": "a", "dataset": task}, {"name": "b", "dataset": {**task, "split_seed": 1}}],
                "reward": {"autoscaling": {"max_replicas": max_replicas}},
                "cluster": {
                    "pools": {"compute": {"count": 2}, "cpu": {"count": 4}, "reward": {"count": 2}},
                    "roles": {"reward": {"pool": "reward", "replicas": 0}},
                },
            },
        )

    assert start_dataset_rewards(cfg("local", 2)) is None
    served = served_datasets(cfg("serverless", 2))
    assert list(served) == [app_name_of(served)]  # two tasks, the same functions: one application
    with pytest.raises(ConfigError, match=r"reward\.autoscaling\.max_replicas=3 x cluster\.roles\.reward\.units=1"):
        start_dataset_rewards(cfg("serverless", 3))


def app_name_of(served: dict[str, DatasetConfig]) -> str:
    from rollarc.data.reward_deployment import app_name

    (dataset,) = served.values()
    return app_name(dataset)
