"""``rollarc reward ...``: the model-based reward's own commands.

* ``rollarc reward train CONFIG [key=value ...]``: generate labelled episodes of the config's tasks,
  train the progress judge and save it (atomically) at ``reward.model_path``; prints the held-out
  figures and, last, one JSON line with them.
"""

from __future__ import annotations

import argparse
import json

import torch

from rollarc.config import load_train_config


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc reward", description="model-based reward commands")
    sub = parser.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="train the progress judge on episodes rollarc generates")
    train.add_argument("config", help="YAML training config (its tasks and reward section)")
    train.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. reward.train.steps=100")
    args = parser.parse_args(argv)

    from rollarc.rewards.train import train_reward_model  # deferred: transformers is heavy (args checked first)

    cfg = load_train_config(args.config, args.overrides)
    torch.set_num_threads(cfg.cluster.roles.reward.threads)
    path, meta = train_reward_model(cfg)
    print(json.dumps({"model_path": str(path), **meta["heldout"], "train_s": meta["train_s"]}))
    return 0
