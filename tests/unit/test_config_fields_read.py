"""Every key of the training config is read by the code: a key that does nothing is a bug.

For each field of every model reachable from :class:`rollarc.config.Config`, some module of ``rollarc/``
other than the config modules must access it as an attribute (``.name``, or ``.alias``). A field that is
consumed generically (the whole model dumped or passed through ``**``) may be named in ``GENERIC`` with the
reason; keep that list tiny.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from rollarc.config import Config

PACKAGE = Path(__file__).resolve().parents[2] / "rollarc"
# Modules that declare config models and check them: a field read only there is read by nothing else.
# Every module of the rollarc/config/ package is one of them.
CONFIG_MODULES = {
    "algo/config.py",
    "data/config.py",
    "engine/config.py",
    "rewards/config.py",
    "serve/config.py",
    "sync/config.py",
}
# (model, field) read without an attribute access outside the config modules; "*" is every field of the model.
GENERIC: dict[tuple[str, str], str] = {
    ("AutoscalingConfig", "*"): "dumped whole into Ray Serve's autoscaling_config (serve_options)",
    ("BatchingConfig", "max_ongoing_requests"): "read through the ongoing_limit property",
    ("SyncConfig", "bucket_mb"): "read through the bucket_bytes property",
    ("RewardConfig", "stateless"): "a declaration checked at load time: serverless needs it true",
}


def models_of(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_of(arg)]


def reachable_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Config]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(models_of(field.annotation))
    return seen


def package_source() -> str:
    files = [
        p
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).as_posix() not in CONFIG_MODULES and p.relative_to(PACKAGE).parts[0] != "config"
    ]
    return "\n".join(p.read_text() for p in files)


def test_every_config_field_is_read_outside_the_config_modules():
    source = package_source()
    unread = []
    for model in reachable_models():
        for name, field in model.model_fields.items():
            if (model.__name__, name) in GENERIC or (model.__name__, "*") in GENERIC:
                continue
            names = {name} | ({field.alias} if field.alias else set())
            if not any(re.search(rf"\.{re.escape(n)}\b", source) for n in names):
                unread.append(f"{model.__name__}.{name}")
    assert not unread, f"config fields that nothing in rollarc/ reads: {unread}"


def test_the_walk_reaches_the_nested_sections():
    names = {m.__name__ for m in reachable_models()}
    assert {"Config", "TrainConfig", "AsyncConfig", "SyncConfig", "ElasticChange", "RoleConfig"} <= names
