"""Env registry and loader: built-in ids, and any gymnasium text env by import path (the plugin contract).

Plugin contract: any ``gymnasium.Env`` whose observation and action spaces are
``gymnasium.spaces.Text`` can be trained on, named by ``entry_point: "package.module:Attr"`` (a class or
a factory returning an env), with no change to rollarc. It need not derive from :class:`TextEnv`; the
optional extras are looked up on ``env.unwrapped``:

* ``instructions`` (str): the system prompt; ``""`` when absent;
* ``expert_action()`` (-> str | None): an optimal next action for SFT/DAgger; None when absent.

Loading uses gymnasium's own ``load_env_creator``; every failure (module missing, attribute missing,
not an env, constructor rejecting the kwargs, non-Text spaces) is an :class:`EnvLoadError` naming the
entry point, raised when the env is made, i.e. at start-up rather than mid-run.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator
from gymnasium.spaces import Text
from pydantic import Field, model_validator

from rollarc.config.io import FrozenModel, validate

_REGISTRY: dict[str, str] = {
    "sokoban": "rollarc.envs.sokoban:SokobanEnv",
    "frozen_lake": "rollarc.envs.frozen_lake:FrozenLakeEnv",
    "countdown": "rollarc.envs.countdown:CountdownEnv",
    "long_reply": "rollarc.envs.long_reply:LongReplyEnv",
}


class EnvLoadError(ValueError):
    """An env spec that cannot be turned into a usable text env; the message names the entry point."""


class EnvSpec(FrozenModel):
    """Which env to build: a registered ``id`` or an ``entry_point`` ("module:Attr"), plus kwargs."""

    id: str | None = Field(
        None, description="a registered env id (built in: countdown, frozen_lake, long_reply, sokoban)"
    )
    entry_point: str | None = Field(
        None, description="any gymnasium Text env by import path, 'package.module:Attr' (a class or a factory)"
    )
    kwargs: dict[str, Any] = Field(
        {}, description="keyword arguments of the env's constructor, checked when it is made"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvSpec:
        if (self.id is None) == (self.entry_point is None):
            raise ValueError(
                "give exactly one of env id (one of: " + ", ".join(registered_ids()) + ") or entry_point "
                f"('package.module:Class'); got id={self.id!r}, entry_point={self.entry_point!r}"
            )
        if self.id is not None and self.id not in _REGISTRY:
            raise ValueError(f"unknown env id {self.id!r}; registered ids: {', '.join(registered_ids())}")
        if self.entry_point is not None:
            module, _, attr = self.entry_point.partition(":")
            if not module or not attr or ":" in attr:
                raise ValueError(f"entry_point {self.entry_point!r} must look like 'package.module:Class'")
        return self

    @property
    def resolved_entry_point(self) -> str:
        if self.id is not None:
            return _REGISTRY[self.id]
        assert self.entry_point is not None  # the validator requires id or entry_point
        return self.entry_point


def register(id: str, entry_point: str) -> None:
    """Register ``id`` for ``entry_point``; re-registering an id with a different entry point is an error."""
    existing = _REGISTRY.get(id)
    if existing is not None and existing != entry_point:
        raise ValueError(f"env id {id!r} is already registered for {existing!r}")
    EnvSpec(entry_point=entry_point)  # validates the "module:Attr" form
    _REGISTRY[id] = entry_point


def registered_ids() -> list[str]:
    return sorted(_REGISTRY)


def make_env(spec: EnvSpec | Mapping[str, Any]) -> gymnasium.Env:
    """Build the env of ``spec`` and check it speaks text; raises :class:`EnvLoadError` otherwise."""
    if not isinstance(spec, EnvSpec):
        spec = validate(EnvSpec, dict(spec), source="env spec")
    entry_point = spec.resolved_entry_point
    name = f"env {spec.id!r} ({entry_point})" if spec.id else f"env entry point {entry_point!r}"
    creator = _load(entry_point, name)
    _check_kwargs(creator, spec.kwargs, name)
    try:
        env = creator(**spec.kwargs)
    except EnvLoadError:
        raise  # already one line naming what is wrong (e.g. a dataset task's missing column)
    except (TypeError, ValueError) as err:
        raise EnvLoadError(f"{name} rejected its kwargs {spec.kwargs}: {err}") from err
    if not isinstance(env, gymnasium.Env):
        raise EnvLoadError(f"{name} returned a {type(env).__name__}, not a gymnasium.Env")
    for space_name in ("observation_space", "action_space"):
        space = getattr(env, space_name, None)
        if not isinstance(space, Text):
            env.close()
            raise EnvLoadError(
                f"{name} has {space_name} {space!r}; rollarc needs gymnasium.spaces.Text observations and actions"
            )
    return env


def expert_action(env: gymnasium.Env) -> str | None:
    """The env's expert next action, or None if it has no ``expert_action`` or no solution."""
    method = getattr(env.unwrapped, "expert_action", None)
    return method() if callable(method) else None


def instructions(env: gymnasium.Env) -> str:
    """The env's system prompt, or ``""`` when it has none."""
    text = getattr(env.unwrapped, "instructions", "")
    return text if isinstance(text, str) else ""


def _load(entry_point: str, name: str) -> Any:
    try:
        creator = load_env_creator(entry_point)
    except ModuleNotFoundError as err:
        raise EnvLoadError(f"{name}: cannot import module {err.name!r} ({err}); is it on PYTHONPATH?") from err
    except ImportError as err:
        raise EnvLoadError(f"{name}: importing it failed: {err}") from err
    except AttributeError as err:
        module, _, attr = entry_point.partition(":")
        raise EnvLoadError(f"{name}: module {module!r} has no attribute {attr!r}") from err
    if inspect.isclass(creator):
        if not issubclass(creator, gymnasium.Env):
            raise EnvLoadError(f"{name} is the class {creator.__name__}, which is not a gymnasium.Env subclass")
    elif not callable(creator):
        raise EnvLoadError(f"{name} is a {type(creator).__name__}, neither a gymnasium.Env class nor a factory")
    return creator


def _check_kwargs(creator: Any, kwargs: dict[str, Any], name: str) -> None:
    """Name unknown kwargs before construction, when the signature makes that possible."""
    try:
        signature = inspect.signature(creator)
    except (TypeError, ValueError):  # builtins or C callables without a signature: the constructor decides
        return
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise EnvLoadError(
            f"{name} got unknown kwarg(s) {', '.join(unknown)}; it accepts: {', '.join(accepted) or 'none'}"
        )
