"""The safe arithmetic evaluator: exact values, and hostile input rejected without eval."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.envs.safe_arith import ArithError, evaluate, format_number


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("1+2*3", Fraction(7), (1, 2, 3)),
        ("(1+2)*3", Fraction(9), (1, 2, 3)),
        ("7/2", Fraction(7, 2), (7, 2)),
        ("1/3*3", Fraction(1), (1, 3, 3)),
        ("-3+5", Fraction(2), (3, 5)),
        ("+4 - -2", Fraction(6), (4, 2)),
        ("2.5*2", Fraction(5), (Fraction(5, 2), 2)),
        ("0.1*3", Fraction(3, 10), (Fraction(1, 10), 3)),  # exact decimal, not the float 0.1
        ("0.1000000000000000055511151231257827", Fraction("0.1000000000000000055511151231257827"), None),
        (" 25 * 3 + 7 ", Fraction(82), (25, 3, 7)),
        ("50-(25+7)/4", Fraction(42), (50, 25, 7, 4)),
        ("(((((8)))))", Fraction(8), (8,)),
    ],
)
def test_values_are_exact(text: str, value: Fraction, numbers: tuple | None) -> None:
    result = evaluate(text)
    assert result.value == value and isinstance(result.value, Fraction)
    if numbers is not None:
        assert result.numbers == tuple(Fraction(n) for n in numbers)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os')", "not allowed"),
        ("__import__('os').system('ls')", "not allowed"),
        ("x", "not allowed"),
        ("x+1", "not allowed"),
        ("(1).real", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("1,2", "not allowed"),
        ("1e5", "not allowed"),
        ("1_000", "not allowed"),
        ("True", "not allowed"),
        ("2**8", "Pow not allowed"),
        ("9**9**9**9", "Pow not allowed"),
        ("7//2", "FloorDiv not allowed"),
        ("7%2", "not allowed"),
        ("1/0", "division by zero"),
        ("5/(3-3)", "division by zero"),
        ("", "empty"),
        ("   ", "empty"),
        ("1 2", "not a valid expression"),
        ("(1+2", "not a valid expression"),
        ("1+" * 40 + "1", "longer than 64"),
        ("-" * 40 + "1", "nested deeper than 32"),
    ],
)
def test_hostile_or_malformed_input_is_rejected(text: str, reason: str) -> None:
    with pytest.raises(ArithError, match=reason.replace("*", r"\*")):
        evaluate(text)


def test_bounds_are_configurable() -> None:
    assert evaluate("1+" * 40 + "1", max_length=100, max_depth=40).value == 41
    with pytest.raises(ArithError, match="nested deeper than 2"):
        evaluate("1+2+3+4", max_depth=2)
    with pytest.raises(ArithError, match="longer than 3"):
        evaluate("1+23", max_length=3)


def test_format_number() -> None:
    assert format_number(Fraction(75)) == "75"
    assert format_number(Fraction(-7, 2)) == "-7/2"


# An independent reference: build random expression trees, render them fully parenthesised, and
# compare the evaluator with Fraction arithmetic done on the tree itself.
_leaf = st.integers(min_value=0, max_value=99).map(lambda n: (str(n), Fraction(n)))


def _combine(children: st.SearchStrategy) -> st.SearchStrategy:
    def build(args: tuple) -> tuple[str, Fraction | None]:
        (left_text, left), op, (right_text, right) = args
        if left is None or right is None or (op == "/" and right == 0):
            value = None
        else:
            value = {"+": left + right, "-": left - right, "*": left * right, "/": left / right if right else None}[op]
        return f"({left_text}{op}{right_text})", value

    return st.tuples(children, st.sampled_from("+-*/"), children).map(build)


@settings(max_examples=150, deadline=None)
@given(st.recursive(_leaf, _combine, max_leaves=6))
def test_matches_fraction_arithmetic_on_random_trees(tree: tuple[str, Fraction | None]) -> None:
    text, value = tree
    if value is None:
        with pytest.raises(ArithError, match="division by zero"):
            evaluate(text, max_length=200)
    else:
        assert evaluate(text, max_length=200).value == value


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.text(alphabet="0123456789.+-*/() ", max_size=40)))
def test_any_text_gives_a_value_or_an_arith_error(text: str) -> None:
    try:
        result = evaluate(text)
    except ArithError as err:
        assert str(err)
    else:
        assert isinstance(result.value, Fraction)
