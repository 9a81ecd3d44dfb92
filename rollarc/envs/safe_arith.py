"""A safe evaluator for the arithmetic a model writes (countdown's calculator and answers).

Model output is hostile input: it is never passed to ``eval``/``exec``. The text is first checked
against a character whitelist (digits, ``.``, spaces, ``+ - * / ( )``), then parsed with ``ast`` and
walked by hand, accepting only number literals, the binary operators ``+ - * /``, unary ``-``/``+``
and parentheses. ``**``, ``//``, ``%``, names, calls, attributes, subscripts and everything else are
rejected. Length and nesting depth are bounded so that no input can make evaluation slow.

Arithmetic is exact with :class:`fractions.Fraction` (``1/3*3 == 1``), so answer checks never suffer
float rounding. Every failure, including division by zero, raises :class:`ArithError` with a short
message meant to be shown to the model.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

MAX_LENGTH = 64
MAX_DEPTH = 32
_ALLOWED_CHARS = frozenset("0123456789. +-*/()")
_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class ArithError(ValueError):
    """The text is not an allowed arithmetic expression, or has no value (division by zero)."""


@dataclass(frozen=True)
class Evaluation:
    """The exact value of an expression and its number literals in order of appearance."""

    value: Fraction
    numbers: tuple[Fraction, ...]


def evaluate(text: str, *, max_length: int = MAX_LENGTH, max_depth: int = MAX_DEPTH) -> Evaluation:
    """Evaluate ``text`` safely; raises :class:`ArithError` on anything but plain arithmetic."""
    if not isinstance(text, str):
        raise ArithError(f"expression must be text, got {type(text).__name__}")
    if len(text) > max_length:
        raise ArithError(f"expression longer than {max_length} characters")
    if not text.strip():
        raise ArithError("empty expression")
    bad = sorted(set(text) - _ALLOWED_CHARS)
    if bad:
        # ascii() keeps the message inside the policy's character set whatever the input was.
        raise ArithError(f"character {bad[0]!a} not allowed; use numbers, + - * / and parentheses")
    source = text.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        raise ArithError("not a valid expression") from None
    numbers: list[Fraction] = []
    value = _eval(tree.body, source, numbers, depth=0, max_depth=max_depth)
    return Evaluation(value, tuple(numbers))


def _eval(node: ast.expr, source: str, numbers: list[Fraction], depth: int, max_depth: int) -> Fraction:
    if depth > max_depth:
        raise ArithError(f"expression nested deeper than {max_depth}")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        # Read the literal's own digits, so "0.1" is exactly 1/10 (not the nearest float).
        number = Fraction(ast.get_source_segment(source, node) or str(node.value))
        numbers.append(number)
        return number
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _eval(node.operand, source, numbers, depth + 1, max_depth)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _eval(node.left, source, numbers, depth + 1, max_depth)
        right = _eval(node.right, source, numbers, depth + 1, max_depth)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ArithError("division by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.BinOp):
        raise ArithError(f"operator {type(node.op).__name__} not allowed; use + - * /")
    raise ArithError("only numbers, + - * / and parentheses are allowed")


def format_number(value: Fraction) -> str:
    """``75`` for integers, ``7/2`` otherwise: exact and short."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
