"""Hardware catalogue: what each device class can do and what it costs.

The catalogue is a user-editable YAML file (``configs/cluster/hardware.yaml``) so that prices and new
device classes never need a code change. Units are the ones people quote (TFLOP/s, TB/s, GB, GB/s,
USD per hour); :class:`GpuSpec` converts them to SI once, so the cost model works in FLOP/s, bytes/s
and bytes.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from rollarc.config.io import ConfigError, FrozenModel, load_config

TERA = 1e12
GIGA = 1e9


class GpuSpec(FrozenModel):
    """One accelerator class. Peaks are dense bf16; the cost model applies efficiencies on top."""

    tflops_bf16: float = Field(gt=0)
    hbm_TBps: float = Field(gt=0)
    memory_GB: float = Field(gt=0)
    nvlink_GBps: float = Field(gt=0, description="per-GPU intra-node bandwidth, one direction")
    network_GBps: float = Field(gt=0, description="per-GPU inter-node bandwidth, one direction")
    price_per_hour: float = Field(ge=0, description="on-demand USD per device-hour (an assumption to edit)")
    spot_factor: float = Field(default=0.27, gt=0, le=1, description="spot price / on-demand price")

    @property
    def flops(self) -> float:
        return self.tflops_bf16 * TERA

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_TBps * TERA

    @property
    def memory_bytes(self) -> float:
        return self.memory_GB * GIGA

    @property
    def nvlink_bytes_per_s(self) -> float:
        return self.nvlink_GBps * GIGA

    @property
    def network_bytes_per_s(self) -> float:
        return self.network_GBps * GIGA


class CpuSpec(FrozenModel):
    """One CPU node type; an environment step occupies one core while it runs."""

    cores: int = Field(gt=0)
    memory_GB: float = Field(gt=0)
    price_per_hour: float = Field(ge=0)
    spot_factor: float = Field(default=0.3, gt=0, le=1)


class Catalogue(FrozenModel):
    gpus: dict[str, GpuSpec]
    cpus: dict[str, CpuSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_unique(self) -> Catalogue:
        both = sorted(set(self.gpus) & set(self.cpus))
        if both:
            raise ValueError(f"names used both as a GPU and a CPU type: {', '.join(both)}")
        return self

    def gpu(self, kind: str) -> GpuSpec:
        if kind not in self.gpus:
            raise ConfigError(f"unknown GPU kind {kind!r}; the catalogue has: {', '.join(sorted(self.gpus))}")
        return self.gpus[kind]

    def cpu(self, kind: str) -> CpuSpec:
        if kind not in self.cpus:
            raise ConfigError(f"unknown CPU node type {kind!r}; the catalogue has: {', '.join(sorted(self.cpus))}")
        return self.cpus[kind]

    def is_gpu(self, kind: str) -> bool:
        if kind in self.gpus:
            return True
        if kind in self.cpus:
            return False
        known = ", ".join(sorted([*self.gpus, *self.cpus]))
        raise ConfigError(f"unknown device kind {kind!r}; the catalogue has: {known}")

    def price_per_hour(self, kind: str, spot: bool = False) -> float:
        """USD per hour of one device (GPU) or one node (CPU), at the spot price if ``spot``."""
        spec: GpuSpec | CpuSpec = self.gpu(kind) if self.is_gpu(kind) else self.cpu(kind)
        return spec.price_per_hour * (spec.spot_factor if spot else 1.0)


def load_catalogue(path: str | Path, overrides: list[str] | None = None) -> Catalogue:
    return load_config(Catalogue, path, overrides)
