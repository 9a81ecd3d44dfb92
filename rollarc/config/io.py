"""Load YAML configs into frozen pydantic models, with dotted ``key=value`` overrides.

Every rollarc config model derives from :class:`FrozenModel` (frozen, ``extra="forbid"``). Errors are
re-raised as :class:`ConfigError` whose message names each bad key by its dotted path and says what
is allowed, so a typo fails at start-up instead of being silently ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class FrozenModel(BaseModel):
    """Base of every config model: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class ConfigError(ValueError):
    """A config that cannot be used; the message is meant for the user as is."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into its path and a YAML-parsed value (so ``3`` is an int, ``[1,2]`` a list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value (for example train.steps=10)")
    key, raw = text.split("=", 1)
    path = [part for part in key.strip().split(".")]
    if not key.strip() or any(not part for part in path):
        raise ConfigError(f"override {text!r} has an empty key segment")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {err}") from err
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key=value`` override applied.

    Missing sections are created as mappings; a numeric segment indexes into a list the file sets
    (``tasks.0.weight=2``).
    """
    result = _deep_copy(data)
    for text in overrides:
        path, value = parse_override(text)
        node: Any = result
        for depth, part in enumerate(path):
            where = ".".join(path[: depth + 1])
            last = depth == len(path) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"override {text!r}: {where} is not an index of the {len(node)}-item list")
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
                continue
            if not isinstance(node, dict):
                raise ConfigError(
                    f"override {text!r}: {'.'.join(path[:depth])} is a {type(node).__name__}, not a section"
                )
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
    return result


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with a clear error for a missing, malformed or non-mapping file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def validate(model: type[M], data: dict[str, Any], source: str = "config") -> M:
    """Build ``model`` from ``data``; on failure raise ConfigError listing every bad dotted path."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, model)) from None


def load_config(model: type[M], path: str | Path | None = None, overrides: list[str] | None = None) -> M:
    """Read ``path`` (optional), apply ``overrides`` and validate into ``model``."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    return validate(model, data, source=str(path) if path is not None else "config")


def dump_yaml(config: BaseModel) -> str:
    """The resolved config as YAML, keys in declaration order."""
    return yaml.safe_dump(config.model_dump(mode="json", by_alias=True), sort_keys=False)


def format_validation_error(err: ValidationError, source: str, root: type[BaseModel]) -> str:
    lines = [f"invalid {source}:"]
    for item in err.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            parent_allowed = _allowed_keys(root, item["loc"][:-1])
            hint = f"; allowed keys here: {', '.join(parent_allowed)}" if parent_allowed else ""
            lines.append(f"  {where}: unknown key{hint}")
            continue
        message = item["msg"]
        ctx = item.get("ctx") or {}
        if "expected" in ctx and "expected" not in message:
            message += f" (allowed: {ctx['expected']})"
        lines.append(f"  {where}: {message} (got {item.get('input')!r})")
    return "\n".join(lines)


def _allowed_keys(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found at ``loc`` below ``root`` (list/dict indices are skipped)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if model is None:
            return []
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        if not isinstance(part, str) or part not in fields:
            continue  # an index into a list or a dict key: the model stays the item's
        model = _model_of(fields[part].annotation)
    return [f.alias or name for name, f in model.model_fields.items()] if model is not None else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``Foo``, ``Foo | None`` or ``dict[str, Foo]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _deep_copy(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_deep_copy(value) for value in data]
    return data
