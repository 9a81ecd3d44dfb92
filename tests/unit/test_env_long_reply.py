"""Long-reply: hand-computed rewards, the reply-length distribution, held-out disjointness, the expert."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from rollarc.config import load_train_config
from rollarc.envs import make_env, play_expert
from rollarc.envs.long_reply import LongReplyConfig, LongReplyEnv, draw_length, score
from rollarc.envs.registry import EnvLoadError
from rollarc.models.tokenizer import UNK, build_tokenizer

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gentail.yaml"


def _answered(text: str, reply: str, **kwargs: object) -> tuple[float, bool, bool, dict[str, object]]:
    env = LongReplyEnv(**kwargs)
    env.reset(options={"text": text})
    _, reward, terminated, truncated, info = env.step(reply)
    return reward, terminated, truncated, info


def test_exact_reply_scores_one_and_succeeds() -> None:
    reward, terminated, _, info = _answered("abcd", "abcd")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    reward, _, _, info = _answered("abcd", "dcba", op="reverse")
    assert (reward, info["success"]) == (1.0, True)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("abxd", 0.5 * 3 / 4),  # one wrong letter
        ("abc", 0.5 * 3 / 4),  # one letter short
        ("abcde", 0.5 * 4 / 5),  # one letter too many: judged over the longer length
        ("bcda", 0.0),  # shifted: no position right
        ("", 0.0),
        ("dcba", 0.0),  # reversed when asked to copy
    ],
)
def test_partial_credit_is_the_fraction_of_positions_right(reply: str, expected: float) -> None:
    reward, terminated, _, info = _answered("abcd", reply)
    assert reward == pytest.approx(expected)
    assert terminated and info["success"] is False


def test_partial_credit_scales_and_lenient_strips_but_strict_does_not() -> None:
    assert _answered("abcd", "abxd", partial_credit=1.0)[0] == pytest.approx(0.75)
    assert _answered("abcd", "abxd", partial_credit=0.0)[0] == 0.0
    assert _answered("abcd", "  abcd\n")[0] == 1.0
    assert _answered("abcd", " abcd", parse_mode="strict")[0] == pytest.approx(0.5 * 0 / 5)
    assert score("abcd", "abcd", 0.5) == 1.0


def test_a_reply_over_max_action_length_is_invalid_and_truncates() -> None:
    reward, terminated, truncated, info = _answered("ab", "a" * 81, max_action_length=80)
    assert (reward, terminated, truncated, info["invalid_action"], info["success"]) == (-0.1, False, True, True, False)


def test_length_quantiles_over_many_seeds_follow_the_clipped_lognormal() -> None:
    cfg = LongReplyConfig()  # median 7, sigma 0.77, 1..64
    env = LongReplyEnv()
    lengths = np.array([len(env.reset(seed=seed)[0].removeprefix("copy ")) for seed in range(20_000)])
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    # analytic quantiles of round(7 exp(0.77 z)): z_0.5 = 0, z_0.9 = 1.2816, z_0.99 = 2.3263
    assert p50 == 7
    assert abs(p90 - 7 * math.exp(0.77 * 1.2816)) <= 1.5  # 18.8
    assert abs(p99 - 7 * math.exp(0.77 * 2.3263)) <= 3.5  # 42.0: six times the median
    assert lengths.min() >= cfg.length_min and lengths.max() == cfg.length_max  # the cut is reached
    assert 0.001 < np.mean(lengths == cfg.length_max) < 0.004  # P(7 exp(0.77 z) >= 63.5) = 0.0021


def test_an_episode_is_determined_by_its_seed() -> None:
    first, second = LongReplyEnv(), LongReplyEnv()
    assert [first.reset(seed=s)[0] for s in range(50)] == [second.reset(seed=s)[0] for s in range(50)]
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    cfg = LongReplyConfig(length_sigma=1.5)
    assert [draw_length(rng_a, cfg) for _ in range(100)] == [draw_length(rng_b, cfg) for _ in range(100)]


def test_heldout_seeds_are_disjoint_from_training_and_sft_and_rarely_repeat_a_string() -> None:
    # under `copy`; `repeat` (the config's op) shows one of 64 numbers, so its held-out prompts recur by design
    cfg = load_train_config(CONFIG, ["tasks.0.env.kwargs.op=copy"])
    train_end = cfg.train.seed_base + (cfg.train.steps + 1) * cfg.train.groups_per_step * 4
    heldout = range(cfg.train.eval_seed_base, cfg.train.eval_seed_base + cfg.train.eval_episodes)
    sft = range(cfg.sft.seed_base, cfg.sft.seed_base + cfg.sft.episodes)
    assert not set(heldout) & (set(range(cfg.train.seed_base, train_end)) | set(sft))
    env = make_env(cfg.tasks[0].env_spec)
    seen = {env.reset(seed=s)[0] for s in [*range(cfg.train.seed_base, train_end), *sft]}
    shown = [env.reset(seed=s)[0] for s in heldout]
    repeated = sum(text in seen for text in shown)
    assert repeated / len(shown) < 0.1  # only the shortest strings (one or two letters) can recur


def test_the_solver_demonstrations_score_full_reward() -> None:
    for op in ("copy", "reverse", "repeat"):
        env = make_env({"id": "long_reply", "kwargs": {"op": op}})
        for seed in range(200):
            episode = play_expert(env, seed=seed)
            assert episode.rewards == [1.0] and episode.success
            shown = episode.observations[0].removeprefix(f"{op} ")
            expected = {"copy": shown, "reverse": shown[::-1], "repeat": "a" * int(shown) if shown.isdigit() else None}
            assert episode.actions == [expected[op]]


def test_repeat_shows_the_count_and_scores_the_length() -> None:
    env = LongReplyEnv(op="repeat")
    obs, _ = env.reset(options={"text": "aaaa"})
    assert obs == "repeat 4" and env.expert_action() == "aaaa"
    for reply, expected in [("aaaa", 1.0), ("aaa", 0.5 * 3 / 4), ("aaaaa", 0.5 * 4 / 5), ("aaba", 0.5 * 3 / 4)]:
        env.reset(options={"text": "aaaa"})
        assert env.step(reply)[1] == pytest.approx(expected)
    with pytest.raises(
        ValueError, match=re.escape("must be 1..64 letters of 'a' (length_min, length_max, alphabet; op repeat)")
    ):
        env.reset(options={"text": "abc"})
    lengths = [int(env.reset(seed=s)[0].removeprefix("repeat ")) for s in range(2_000)]
    copies = [len(LongReplyEnv().reset(seed=s)[0].removeprefix("copy ")) for s in range(2_000)]
    assert lengths == copies  # the same length draw as copy, seed for seed


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(EnvLoadError, match="length_min=9 is greater than length_max=8"):
        make_env({"id": "long_reply", "kwargs": {"length_min": 9, "length_max": 8}})
    with pytest.raises(EnvLoadError, match="max_action_length=10 is below length_max=64"):
        make_env({"id": "long_reply", "kwargs": {"max_action_length": 10}})
    with pytest.raises(EnvLoadError, match="repeats a letter"):
        make_env({"id": "long_reply", "kwargs": {"alphabet": "aab"}})
    with pytest.raises(ValueError, match=re.escape("options['text'] must be 1..64 letters")):
        LongReplyEnv().reset(options={"text": "ABC"})


def test_text_fits_the_spaces_and_the_tokenizer_and_each_letter_is_one_token() -> None:
    tokenizer = build_tokenizer()
    env = LongReplyEnv(op="reverse", length_min=64, render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs and env.observation_space.contains(obs)
    reply = env.expert_action()
    assert reply is not None and env.action_space.contains(reply)
    assert len(tokenizer(reply, add_special_tokens=False)["input_ids"]) == 64  # the reply's length in tokens
    final, _, _, _, _ = env.step(reply)
    assert final == "correct" and env.observation_space.contains(final)
    for text in (obs, reply, LongReplyEnv.instructions, LongReplyEnv.invalid_hint):
        assert tokenizer.convert_tokens_to_ids(UNK) not in tokenizer(text, add_special_tokens=False)["input_ids"]
