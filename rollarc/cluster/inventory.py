"""What a user can reserve: device kinds with the most of each, and whether serverless is offered.

This is the ``--cluster`` file of ``rollarc plan``. The planner chooses how many of each kind to use
(never more than ``available``) and for which role.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rollarc.cluster.catalogue import Catalogue, load_catalogue
from rollarc.config.io import ConfigError, FrozenModel, load_config


class ServerlessOffer(FrozenModel):
    enabled: bool = True
    device: str = Field(description="GPU kind of a serverless reward instance")
    price_markup: float = Field(default=1.5, gt=0)
    cold_start_s: float = Field(default=30.0, ge=0)
    keep_alive_s: float = Field(default=60.0, ge=0)
    max_instances: int = Field(default=256, gt=0)


class Inventory(FrozenModel):
    catalogue: str = Field(description="hardware catalogue YAML, relative to this file")
    available: dict[str, int] = Field(min_length=1, description="device kind or CPU node type -> most you can reserve")
    serverless: ServerlessOffer | None = None


def load_inventory(path: str | Path) -> tuple[Inventory, Catalogue]:
    path = Path(path)
    inventory = load_config(Inventory, path)
    catalogue = load_catalogue(path.parent / inventory.catalogue)
    for kind, count in inventory.available.items():
        catalogue.is_gpu(kind)  # unknown kinds fail here, naming the catalogue's
        if count < 0:
            raise ConfigError(f"{path}: available.{kind} must be >= 0, got {count}")
    if inventory.serverless is not None and inventory.serverless.enabled:
        catalogue.gpu(inventory.serverless.device)
    if not any(catalogue.is_gpu(k) and n > 0 for k, n in inventory.available.items()):
        raise ConfigError(f"{path}: available lists no GPU kind with a count > 0")
    if not any(not catalogue.is_gpu(k) and n > 0 for k, n in inventory.available.items()):
        raise ConfigError(f"{path}: available lists no CPU node type with a count > 0 (environments need one)")
    return inventory, catalogue
