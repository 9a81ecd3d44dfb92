"""``rollarc bench chaos --path harvest|spot``: which path a config is on, and the one chaos run of that path."""

from __future__ import annotations

import argparse
from types import ModuleType

from rollarc.bench import chaos_harvest, chaos_spot
from rollarc.bench.harness import finish, runs_folder
from rollarc.bench.report_file import markdown_table
from rollarc.config.io import ConfigError, read_yaml

MODULES: dict[str, ModuleType] = {"harvest": chaos_harvest, "spot": chaos_spot}


def path_of(config_path: str) -> str:
    """``spot`` for a t2i config with spot workers, ``harvest`` for one with a ``harvest:`` section, else ``llm``."""
    raw = read_yaml(config_path)
    if raw.get("kind") == "t2i":
        if not (raw.get("spot") or {}).get("enabled"):
            raise ConfigError(
                f"{config_path}: a t2i config without spot.enabled has no chaos run; use configs/t2i_spot.yaml"
            )
        return "spot"
    return "harvest" if raw.get("harvest") else "llm"


def main(path: str, args: argparse.Namespace) -> int:
    """One chaos run of ``path`` (``--quick``: the path's short one), its table published unless quick, its JSON."""
    if args.seeds not in (None, 1):
        raise ConfigError(f"--seeds {args.seeds}: the {path} chaos benchmark is one run; drop --seeds")
    module = MODULES[path]
    config = args.config or module.CONFIG
    overrides = [*(module.QUICK if args.quick else module.FULL), *args.overrides]
    result = module.run(config, overrides, runs_folder(args.runs, f"chaos-{path}"))
    body = markdown_table(["", "value"], module.table(result))
    return finish(f"chaos_{path}", body, result, f"rollarc bench chaos --path {path}", args)
