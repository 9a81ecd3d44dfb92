"""Readers for one field of a completions request: type and range checked, or a :class:`RequestError`.

Every value a client sends reaches the engine's decode loop, where a wrong type or an out-of-range number
used to fail the whole batch. So each field is checked here, at parse time, and a bad one is an HTTP 400
whose message names the field and what is allowed. Values are echoed shortened (:func:`show`), so a
huge body is never copied into an error.
"""

from __future__ import annotations

from typing import Any


class RequestError(ValueError):
    """A request the server cannot serve; the message names the field (HTTP 400)."""


_SHOW_CHARS = 60


def show(value: Any) -> str:
    """``repr(value)``, cut to a few dozen characters."""
    text = repr(value) if not isinstance(value, (list, dict)) or len(value) < 20 else f"<{type(value).__name__}>"
    return text if len(text) <= _SHOW_CHARS else text[: _SHOW_CHARS - 3] + "..."


def is_int(value: Any) -> bool:
    """A JSON integer (``True`` is an int to Python, not to JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_field(body: dict[str, Any], name: str, default: int | None, low: int, high: int) -> int | None:
    """An integer in [low, high]; ``default`` when absent or null."""
    value = body.get(name)
    if value is None:
        return default
    if not is_int(value) or not low <= value <= high:
        raise RequestError(f"{name} must be an integer in [{low}, {high}], got {show(value)}")
    return int(value)


def number_field(body: dict[str, Any], name: str, default: float, low: float, high: float, low_open: bool) -> float:
    """A finite number in [low, high] (or (low, high] with ``low_open``); ``default`` when absent or null."""
    value = body.get(name)
    if value is None:
        return default
    # Plain comparisons: NaN fails them, and a huge integer compares exactly (math.isfinite would overflow).
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and (value > low if low_open else value >= low) and value <= high):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise RequestError(f"{name} must be a number in {interval}, got {show(value)}")
    return float(value)


def bool_field(body: dict[str, Any], name: str) -> bool:
    """true or false; false when absent or null."""
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {show(value)}")
    return bool(value)


def token_ids_field(value: Any, name: str, vocab_size: int, max_count: int, allow_empty: bool) -> list[int]:
    """A list of at most ``max_count`` token ids in [0, vocab_size)."""
    if not isinstance(value, list) or (not value and not allow_empty):
        raise RequestError(f"{name} must be a {'' if allow_empty else 'non-empty '}list of token ids")
    if len(value) > max_count:
        raise RequestError(f"{name} holds {len(value)} token ids, more than the {max_count} allowed")
    bad = [t for t in value if not is_int(t) or not 0 <= t < vocab_size]
    if bad:
        raise RequestError(
            f"{name} must hold integer token ids in [0, {vocab_size}) (the vocabulary), got {show(bad[:5])}"
        )
    return list(value)


def stop_field(body: dict[str, Any], max_count: int, max_chars: int) -> tuple[str, ...]:
    """Stop strings: one non-empty string or a list of them, at most ``max_count`` of ``max_chars`` each."""
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > max_count:
        raise RequestError(f"stop must be a string or a list of at most {max_count} strings, got {show(value)}")
    for stop in stops:
        if not isinstance(stop, str) or not 0 < len(stop) <= max_chars:
            raise RequestError(f"stop must hold non-empty strings of at most {max_chars} characters, got {show(stop)}")
    return tuple(stops)
