"""Config loading: clear errors with dotted paths, overrides, cross-field rules, shipped configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollarc.config import Config, load_train_config
from rollarc.config.io import ConfigError, apply_overrides, dump_yaml, load_config, parse_override, read_yaml

REPO = Path(__file__).resolve().parents[2]
MINIMAL = {"tasks": [{"name": "fl", "env": {"id": "frozen_lake"}}]}


def write(tmp_path: Path, data: object, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_unknown_key_names_dotted_path_and_allowed_keys(tmp_path):
    path = write(tmp_path, {**MINIMAL, "train": {"stepz": 3}})
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    message = str(err.value)
    assert "train.stepz: unknown key" in message
    assert "groups_per_step" in message and "steps" in message


def test_unknown_key_under_alias_section(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_train_config(write(tmp_path, MINIMAL), ["async.bogus=1"])
    assert "async.bogus: unknown key" in str(err.value)
    assert "max_staleness" in str(err.value)


def test_wrong_type_and_out_of_range(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_train_config(write(tmp_path, MINIMAL), ["train.steps=-1", "sampling.top_p=abc"])
    message = str(err.value)
    assert "train.steps" in message and "greater than or equal to 0" in message
    assert "sampling.top_p" in message


def test_literal_lists_allowed_values(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_train_config(write(tmp_path, MINIMAL), ["async.mode=sometimes"])
    assert "async.mode" in str(err.value) and "'sync'" in str(err.value) and "'async'" in str(err.value)


def test_malformed_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_train_config(write(tmp_path, "tasks: [unclosed"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_train_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_train_config(write(tmp_path, "- a\n- b\n"))


def test_overrides_parse_yaml_values_and_index_lists():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=off") == (["a"], False)
    data = apply_overrides({"tasks": [{"weight": 1}]}, ["tasks.0.weight=2.5", "train.steps=4"])
    assert data == {"tasks": [{"weight": 2.5}], "train": {"steps": 4}}
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides({"tasks": [{}]}, ["tasks.3.weight=1"])
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("train.steps")


def test_sync_mode_rejects_staleness(tmp_path):
    with pytest.raises(ConfigError, match="max_staleness must be 0"):
        load_train_config(write(tmp_path, MINIMAL), ["async.max_staleness=2"])
    cfg = load_train_config(write(tmp_path, MINIMAL), ["async.mode=async", "async.max_staleness=2"])
    assert cfg.async_.max_staleness == 2


def test_redundancy_keep_is_rejected_without_spares(tmp_path):
    with pytest.raises(ConfigError, match=r"redundancy_keep='first_finished' has no effect with async.redundancy=0"):
        load_train_config(write(tmp_path, MINIMAL), ["async.redundancy_keep=first_finished"])
    cfg = load_train_config(write(tmp_path, MINIMAL), ["async.redundancy=1", "async.redundancy_keep=first_finished"])
    assert cfg.async_.redundancy_keep == "first_finished"
    assert load_train_config(write(tmp_path, MINIMAL), ["async.redundancy=1"]).async_.redundancy_keep == "by_index"


def test_roles_must_use_declared_pools_within_capacity(tmp_path):
    with pytest.raises(ConfigError, match="not a declared pool"):
        load_train_config(write(tmp_path, MINIMAL), ["cluster.roles.train.pool=h800"])
    with pytest.raises(ConfigError, match="roles need 3 units but count is 2"):
        load_train_config(
            write(
                tmp_path,
                {
                    **MINIMAL,
                    "cluster": {
                        "pools": {"compute": {"count": 2}, "cpu": {"count": 4}},
                        "roles": {"rollout": {"pool": "compute", "replicas": 2}},
                    },
                },
            )
        )


def test_task_rollout_pool_must_have_replicas(tmp_path):
    data = {"tasks": [{"name": "fl", "env": {"id": "frozen_lake"}, "rollout_pool": "cpu"}]}
    with pytest.raises(ConfigError, match="has no rollout replicas"):
        load_train_config(write(tmp_path, data))


def test_heldout_seeds_must_be_disjoint(tmp_path):
    with pytest.raises(ConfigError, match="held-out seeds must be disjoint"):
        load_train_config(write(tmp_path, MINIMAL), ["train.eval_seed_base=5"])


def test_harvest_memory_tokens_must_hold_the_longest_turn(tmp_path):
    data = {
        "tasks": [
            {"name": "fl", "env": {"id": "frozen_lake"}, "agent": {"context_limit": 256}},
            {"name": "long", "env": {"id": "frozen_lake"}, "agent": {"context_limit": 600}},
        ],
        "harvest": {"memory_tokens": 599},
    }
    with pytest.raises(ConfigError) as err:
        load_train_config(write(tmp_path, data))
    message = str(err.value)
    assert "harvest.memory_tokens=599 is below the longest turn: tasks[1] (long)" in message
    assert "agent.context_limit=600" in message
    assert load_train_config(write(tmp_path, data), ["harvest.memory_tokens=600"]).harvest.memory_tokens == 600
    assert load_train_config(write(tmp_path, {**data, "harvest": None})).harvest is None  # no harvest: no check


def test_dump_and_reload_round_trip(tmp_path):
    cfg = load_train_config(write(tmp_path, MINIMAL), ["async.mode=async", "async.max_staleness=1"])
    again = load_train_config(write(tmp_path, dump_yaml(cfg), "dumped.yaml"))
    assert again == cfg


def test_config_is_frozen(tmp_path):
    cfg = load_train_config(write(tmp_path, MINIMAL))
    with pytest.raises(Exception, match="frozen"):
        cfg.train = None  # type: ignore[misc]


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    from rollarc.diffusion.config import T2IConfig, is_t2i, load_t2i_config  # deferred: imports torch

    if is_t2i(str(path)):  # `kind: t2i` configs are text-to-image runs (docs/diffusion.md)
        assert isinstance(load_t2i_config(str(path)), T2IConfig)
    elif path.name == "rose.yaml":  # the ROSE co-serving settings (docs/rose.md), not a training run
        from rollarc.rose.config import RoseConfig  # deferred: keeps the training-config tests light

        assert load_config(RoseConfig, path, []) == RoseConfig()  # it writes out the defaults
    elif path.name.startswith("spot_trace"):  # preemption traces: t2i_spot.yaml's (2 slots), bench spotlight's (1)
        from rollarc.spotlight.preemption import from_trace  # deferred: as above

        slots = {"spot_trace.yaml": 2, "spot_trace_one_slot.yaml": 1}[path.name]
        assert len(from_trace(read_yaml(path)["preemptions"], slots=slots)) == 4
    else:
        assert isinstance(load_train_config(path), Config)
