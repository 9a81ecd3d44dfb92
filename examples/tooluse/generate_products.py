"""Generate the tool-use demo's dataset: products of a two- or three-digit and a two-digit number, in TRL's layout.

Why products: the tiny character-level policy cannot multiply ``347*68`` in its head, but it can learn to
copy the two numbers into a Python call and the printed result into its answer, so held-out accuracy
with the interpreter is far above accuracy without it (``configs/tooluse.yaml`` against
``configs/tooluse_notool.yaml``).

Each row has TRL's columns ``prompt`` ("347*68=") and ``answer`` ("23596"), ``tool`` ("python": the
tool the row may call) and ``demo``, the SFT demonstration as one reply per turn: a Hermes tool call
that prints the product, then the answer. Train and test rows are disjoint pairs drawn with a fixed
seed, so running this script again rewrites the same two files byte for byte::

    python examples/tooluse/generate_products.py      # writes examples/tooluse/products_{train,test}.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def tool_call(code: str) -> str:
    """A Hermes/Qwen tool call of the `python` tool, as the `hermes` parser reads it."""
    return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>"


def row(a: int, b: int) -> dict[str, object]:
    answer = str(a * b)
    return {"prompt": f"{a}*{b}=", "answer": answer, "tool": "python", "demo": [tool_call(f"print({a}*{b})"), answer]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=400, help="training rows")
    parser.add_argument("--test", type=int, default=100, help="held-out rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE, help="directory of the two .jsonl files")
    args = parser.parse_args()
    pairs = [(a, b) for a in range(10, 1000) for b in range(10, 100)]
    chosen = random.Random(args.seed).sample(pairs, args.train + args.test)
    for split, part in [("train", chosen[: args.train]), ("test", chosen[args.train :])]:
        path = args.out / f"products_{split}.jsonl"
        path.write_text("".join(json.dumps(row(a, b)) + "\n" for a, b in part))
        print(f"wrote {len(part)} rows to {path}")


if __name__ == "__main__":
    main()
