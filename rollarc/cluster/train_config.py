"""A plan made runnable: a complete training config = a base config with the plan's placement.

``rollarc plan ... --base BASE.yaml --emit-config OUT.yaml`` keeps everything the base config says
about the job (tasks and their env specs, agent, model, train, algo, async, ...) and replaces only
what the plan decides:

- ``cluster.pools``: one pool per device kind the plan uses (named by kind), with its count;
- ``cluster.roles``: training becomes one replica spanning ``units = devices`` (the runtime trains
  with exactly one TrainWorker); each rollout pool gets ``replicas`` engines of ``units`` =
  tensor-parallel size; environments one replica per CPU node; the reward role from the plan where
  it has dedicated reward replicas, else, when the base's ``reward.kind`` is a served model
  (``serverless``/``dedicated``), the base's own reward role and pool (the runtime's judge is sized by
  the base's ``reward`` section, which the plan does not know). Torch thread counts are kept from the
  base config's roles;
- ``tasks[*].rollout_pool``: the pool the plan routes each task's turns to.

Other ``cluster`` keys of the base (``num_cpus``, ``address``, dashboard) are kept. Tasks are matched
by name; a task the plan lacks, or a planned task the base lacks, is an error naming both lists. The
result is validated as a training config before it is written, so ``rollarc train OUT.yaml`` runs
it unchanged.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from rollarc.cluster.fragment import PlacementFragment
from rollarc.config.cluster import RolesConfig
from rollarc.config.io import ConfigError, read_yaml, validate


def _threads(base_roles: RolesConfig, role: str) -> int:
    if role == "rollout":
        return base_roles.rollout[0].threads if base_roles.rollout else 1
    return getattr(base_roles, role).threads


def planned_config(base: dict[str, Any], fragment: PlacementFragment, source: str = "base config") -> dict[str, Any]:
    """``base`` (a training config as read from YAML) with the placement of ``fragment``; validated."""
    from rollarc.config import Config  # deferred: the training config imports torch

    base_cfg = validate(Config, base, source=source)
    planned = {t.name: t.rollout_pool for t in fragment.tasks}
    names = [t.name for t in base_cfg.tasks]
    if set(names) != set(planned):
        raise ConfigError(
            f"{source}: the base config's tasks {sorted(names)} and the workload's tasks {sorted(planned)} differ; "
            f"the plan places tasks by name, so both must list the same tasks"
        )
    roles = fragment.cluster.roles
    base_roles = base_cfg.cluster.roles
    pools = {
        name: {"count": pool.count, "kind": pool.kind}
        for name, pool in fragment.cluster.pools.items()
        if pool.count > 0
    }
    out_roles: dict[str, Any] = {
        "train": {
            "pool": roles.train.pool,
            "replicas": 1,
            "units": roles.train.devices,
            "threads": _threads(base_roles, "train"),
        },
        "rollout": [
            {"pool": r.pool, "replicas": r.replicas, "units": r.units, "threads": _threads(base_roles, "rollout")}
            for r in roles.rollout
            if r.replicas > 0
        ],
        "env": {
            "pool": roles.env.pool,
            "replicas": roles.env.replicas,
            "units": roles.env.units,
            "threads": _threads(base_roles, "env"),
        },
    }
    if roles.reward.replicas > 0:
        out_roles["reward"] = {
            "pool": roles.reward.pool,
            "replicas": roles.reward.replicas,
            "units": roles.reward.units,
            "threads": _threads(base_roles, "reward"),
        }
    elif base_cfg.reward.kind != "rule":
        name = base_roles.reward.pool
        if name in pools:
            raise ConfigError(
                f"{source}: the reward role's pool {name!r} is also a pool of the plan; give the reward "
                f"role a pool of its own in the base config (e.g. cluster.pools.reward)"
            )
        pools[name] = base_cfg.cluster.pools[name].model_dump(exclude_none=True)
        out_roles["reward"] = base_roles.reward.model_dump()
    else:
        out_roles["reward"] = {"pool": roles.env.pool, "replicas": 0}
    data = copy.deepcopy(base)
    cluster = {key: value for key, value in (data.get("cluster") or {}).items() if key not in ("pools", "roles")}
    data["cluster"] = {**cluster, "pools": pools, "roles": out_roles}
    for task in data["tasks"]:
        task["rollout_pool"] = planned[task["name"]]
    validate(Config, data, source=f"{source} with the plan's placement")
    return data


def write_planned_config(base_path: str | Path, fragment: PlacementFragment, out: str | Path, header: str = "") -> Path:
    """Read ``base_path``, apply the plan, validate, and write ``out`` atomically (``header`` as comments)."""
    data = planned_config(read_yaml(base_path), fragment, source=str(base_path))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(comments + yaml.safe_dump(data, sort_keys=False))
    tmp.replace(out)
    return out
