"""Generate the RLVR demos' verifiable datasets: arithmetic with integer answers, in verl's or TRL's row layout.

verl's layout (the default, ``configs/rlvr.yaml``): ``prompt`` ("37+8="), ``data_source`` ("arith"),
``reward_model`` ({"ground_truth": "45", "style": "rule"}). TRL's layout (``--layout trl``,
``configs/rlvr_sub.yaml``): ``prompt`` and ``answer`` columns, as a TRL user's dataset would have them.
By default a is a two-digit and b a one-digit number (810 pairs): small enough for the tiny
character-level policy to get some right after a short SFT, with room for RL to improve.
Train and test rows are disjoint pairs (a, b), drawn with a fixed seed, so running this script again
rewrites the same two files byte for byte::

    python examples/rlvr/generate_arith.py            # writes examples/rlvr/arith_{train,test}.jsonl
    python examples/rlvr/generate_arith.py --op - --layout trl --name sub   # examples/rlvr/sub_{train,test}.jsonl
"""

from __future__ import annotations

import argparse
import json
import operator
import random
from pathlib import Path

HERE = Path(__file__).parent
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def rows(pairs: list[tuple[int, int]], op: str = "+", layout: str = "verl") -> list[dict[str, object]]:
    answers = [(f"{a}{op}{b}=", str(OPERATIONS[op](a, b))) for a, b in pairs]
    if layout == "trl":
        return [{"prompt": prompt, "answer": answer} for prompt, answer in answers]
    return [
        {"prompt": prompt, "data_source": "arith", "reward_model": {"ground_truth": answer, "style": "rule"}}
        for prompt, answer in answers
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=650, help="training rows")
    parser.add_argument("--test", type=int, default=160, help="held-out rows")
    parser.add_argument("--a", type=int, nargs=2, default=[10, 99], metavar=("LOW", "HIGH"), help="range of a")
    parser.add_argument("--b", type=int, nargs=2, default=[1, 9], metavar=("LOW", "HIGH"), help="range of b")
    parser.add_argument("--op", choices=sorted(OPERATIONS), default="+", help="the operation asked for")
    parser.add_argument("--layout", choices=["verl", "trl"], default="verl", help="the rows' columns")
    parser.add_argument("--name", default="arith", help="the files' name: NAME_train.jsonl and NAME_test.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE, help="directory of the two .jsonl files")
    args = parser.parse_args()
    pairs = [(a, b) for a in range(args.a[0], args.a[1] + 1) for b in range(args.b[0], args.b[1] + 1)]
    if args.train + args.test > len(pairs):
        parser.error(f"only {len(pairs)} distinct pairs for {args.train} + {args.test} rows")
    chosen = random.Random(args.seed).sample(pairs, args.train + args.test)
    for split, part in [("train", chosen[: args.train]), ("test", chosen[args.train :])]:
        path = args.out / f"{args.name}_{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows(part, args.op, args.layout)))
        print(f"wrote {len(part)} rows to {path}")


if __name__ == "__main__":
    main()
