"""Closed-form decode spans: hand values and the inverse."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollarc.cluster.decode_span import IterationCost, iterations_in, span_time


def test_constant_iterations():
    cost = IterationCost(floor=0.0, base=0.01, slope=0.0, overhead=0.002)
    assert span_time(cost, 100) == pytest.approx(1.2)
    assert iterations_in(cost, 1.2) == pytest.approx(100)


def test_linear_growth_is_an_arithmetic_series():
    # tau(x) = 0.01 + 0.0001 x: integral over [0, 100] = 1 + 0.0001 * 5000 = 1.5
    cost = IterationCost(floor=0.0, base=0.01, slope=0.0001)
    assert span_time(cost, 100) == pytest.approx(1.5)
    assert iterations_in(cost, 1.5) == pytest.approx(100)


def test_compute_floor_then_bandwidth():
    # floor 0.02 until base + slope*x reaches it at x = (0.02-0.01)/0.001 = 10;
    # then integral from 10 to 20 of 0.01 + 0.001x = 0.1 + 0.001*(400-100)/2 = 0.25; total 0.2 + 0.25
    cost = IterationCost(floor=0.02, base=0.01, slope=0.001)
    assert span_time(cost, 5) == pytest.approx(0.1)
    assert span_time(cost, 20) == pytest.approx(0.45)
    assert iterations_in(cost, 0.45) == pytest.approx(20)
    assert iterations_in(cost, 0.1) == pytest.approx(5)


@given(
    floor=st.floats(0, 0.1),
    base=st.floats(1e-4, 0.1),
    slope=st.floats(0, 1e-3),
    overhead=st.floats(0, 0.01),
    n=st.floats(0.1, 1e5),
)
def test_iterations_in_inverts_span_time(floor, base, slope, overhead, n):
    cost = IterationCost(floor, base, slope, overhead)
    assert iterations_in(cost, span_time(cost, n)) == pytest.approx(n, rel=1e-7)
