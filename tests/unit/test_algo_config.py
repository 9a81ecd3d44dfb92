"""LossConfig: defaults, range checks, settings without effect, YAML round trip with overrides."""

import pytest

from rollarc.algo import LossConfig
from rollarc.config.io import ConfigError, dump_yaml, load_config


def test_defaults():
    cfg = LossConfig()
    assert (cfg.advantage, cfg.clip_low, cfg.clip_high, cfg.agg, cfg.correction, cfg.tis_cap, cfg.eps) == (
        "grpo",
        0.2,
        0.28,
        "token_mean",
        "none",
        2.0,
        1e-6,
    )
    assert (cfg.kl_coef, cfg.entropy_coef, cfg.decoupled_cap) == (0.0, 0.0, None)


@pytest.mark.parametrize(
    "override, message",
    [
        ("clip_low=1.2", "clip_low: Input should be less than 1"),
        ("clip_high=0", "clip_high: Input should be greater than 0"),
        ("kl_coef=-0.1", "kl_coef"),
        ("eps=.nan", "eps"),
        ("tis_cap=0.5", "tis_cap: Input should be greater than or equal to 1"),
        ("correction=decoupled_ppo", None),
        ("correction=importance", "correction: Input should be 'none', 'tis' or 'decoupled_ppo'"),
        ("agg=sum", "agg"),
        ("clip=0.2", "clip: unknown key; allowed keys here: advantage, surrogate, clip_low"),
        ("tis_cap=3", "tis_cap=3.0 has no effect .* only applies with correction='tis'"),
        ("decoupled_cap=5", "decoupled_cap=5.0 has no effect"),
    ],
)
def test_overrides_are_validated_with_the_key_named(override, message):
    if message is None:
        assert load_config(LossConfig, overrides=[override]).correction == "decoupled_ppo"
        return
    with pytest.raises(ConfigError, match=message):
        load_config(LossConfig, overrides=[override])


def test_setting_used_by_the_chosen_option_is_accepted():
    cfg = load_config(LossConfig, overrides=["correction=decoupled_ppo", "decoupled_cap=5"])
    assert cfg.decoupled_cap == 5.0
    assert load_config(LossConfig, overrides=["advantage=rloo"]).advantage == "rloo"
    with pytest.raises(ConfigError, match=r"eps=0\.01 has no effect .* only applies with advantage='grpo'"):
        load_config(LossConfig, overrides=["advantage=rloo", "eps=0.01"])


def test_dumped_config_loads_back_unchanged(tmp_path):
    cfg = LossConfig(correction="tis", tis_cap=3.0, agg="seq_mean", advantage="dr_grpo")
    path = tmp_path / "loss.yaml"
    path.write_text(dump_yaml(cfg))
    assert load_config(LossConfig, path) == cfg
