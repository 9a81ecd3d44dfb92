"""Exhaustive Countdown solver: every value reachable from a few numbers, each with a fewest-operation
expression and the calculator steps that build it.

Search: breadth-first over multisets of values. A move replaces two values ``a, b`` by ``a + b``,
``a - b``, ``a * b`` or ``a / b``; as in the TV game, intermediate results must be positive integers
(so the demonstrations only ever show whole numbers), and moves that leave a value unchanged
(``* 1``, ``/ 1``) are skipped. The first time BFS creates a value its expression has the fewest
operations. Four numbers are a few thousand states (milliseconds); five are tens of thousands.

Expressions are written with the fewest parentheses that keep their meaning under exact arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

_ATOM, _PRODUCT, _SUM = 3, 2, 1  # precedence of an expression's outermost operator


@dataclass(frozen=True)
class Step:
    """One calculator step: ``left op right = result``."""

    left: int
    op: str
    right: int
    result: int

    @property
    def text(self) -> str:
        return f"{self.left}{self.op}{self.right}"


@dataclass(frozen=True)
class Solution:
    """How to build ``value``: the full expression over the given numbers and its steps in order."""

    value: int
    expression: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class _Item:
    value: int
    expression: str
    precedence: int
    steps: tuple[Step, ...]


def solve(numbers: Sequence[int], target: int) -> Solution | None:
    """A fewest-operation solution reaching ``target`` with each number used at most once, or None."""
    return reachable(tuple(sorted(numbers))).get(target)


@lru_cache(maxsize=256)
def reachable(numbers: tuple[int, ...]) -> dict[int, Solution]:
    """Every value reachable from ``numbers`` (each used at most once) with a fewest-operation solution."""
    start = tuple(_Item(n, str(n), _ATOM, ()) for n in sorted(numbers))
    found: dict[int, Solution] = {item.value: Solution(item.value, item.expression, ()) for item in start}
    level, seen = [start], {tuple(n for n in sorted(numbers))}
    while level:
        next_level = []
        for state in level:
            for i in range(len(state)):
                for j in range(len(state)):
                    if i == j:
                        continue
                    rest = [item for k, item in enumerate(state) if k not in (i, j)]
                    for item in _combine(state[i], state[j]):
                        if item.value not in found:
                            found[item.value] = Solution(item.value, item.expression, item.steps)
                        new_state = tuple(sorted([*rest, item], key=lambda it: it.value))
                        key = tuple(it.value for it in new_state)
                        if key not in seen:
                            seen.add(key)
                            next_level.append(new_state)
        level = next_level
    return found


def _combine(a: _Item, b: _Item) -> list[_Item]:
    """The items made by one operation on ``a`` (left) and ``b`` (right); symmetric ops only once."""
    out = []
    if a.value <= b.value:  # + and * are symmetric: build them once, largest operand first
        out.append(_make(b, "+", a, b.value + a.value))
        if a.value != 1:
            out.append(_make(b, "*", a, b.value * a.value))
    if a.value > b.value:
        out.append(_make(a, "-", b, a.value - b.value))
    if b.value != 1 and a.value % b.value == 0:
        out.append(_make(a, "/", b, a.value // b.value))
    return out


def _make(left: _Item, op: str, right: _Item, value: int) -> _Item:
    precedence = _SUM if op in "+-" else _PRODUCT
    # Parenthesise an operand only when dropping the parentheses would change the value.
    left_text = f"({left.expression})" if left.precedence < precedence else left.expression
    right_needs = right.precedence < precedence or (op in "-/" and right.precedence == precedence)
    right_text = f"({right.expression})" if right_needs else right.expression
    step = Step(left.value, op, right.value, value)
    return _Item(value, f"{left_text}{op}{right_text}", precedence, left.steps + right.steps + (step,))
