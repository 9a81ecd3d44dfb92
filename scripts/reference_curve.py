"""A training curve without Ray: the reference loop (``rollarc/train/reference_loop.py``) from a warm start.

The reference loop plays the very batches a synchronous ``rollarc train`` plays, in one process, so it is
the cheapest way to study how a config learns (docs/algorithms.md, "Learning-rate schedule")::

    rollarc sft configs/quickstart.yaml
    python scripts/reference_curve.py OUT.jsonl artifacts/sft/quickstart [key=value ...]

Each line of ``OUT.jsonl`` is one training step (``version``, training ``success``, ``signal_groups_frac``,
``entropy`` when ``algo.entropy_coef > 0``, ``grad_norm``, ``lr``, ``step_time_s``) or one held-out evaluation (``eval: true``, ``version``,
``success``, ``episodes``), written as it happens, so a run stopped early still leaves its curve.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rollarc.config import load_train_config
from rollarc.train.reference_loop import run_reference

CONFIG = "configs/quickstart.yaml"
STEP_KEYS = ("version", "success", "signal_groups_frac", "entropy", "grad_norm", "lr", "step_time_s", "wall_s")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, policy, *overrides = argv
    cfg = load_train_config(CONFIG, overrides)
    with Path(out).open("w") as log:

        def write(record: dict[str, Any]) -> None:
            line = record if record.get("eval") else {k: record.get(k) for k in STEP_KEYS}
            log.write(json.dumps(line) + "\n")
            log.flush()

        log.write(json.dumps({"config": CONFIG, "overrides": overrides}) + "\n")
        result = run_reference(cfg, policy, on_record=write)
    print(" ".join(f"{e['version']}:{e['success']:.3f}" for e in result.evals))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
