"""The size presets of rollarc's tiny policies, as a table: no torch, no transformers.

Apart from :mod:`rollarc.models.presets` (which builds the models) so that the config layer can list and check
preset names without importing torch (:mod:`rollarc.lazy_exports` says why that matters).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SizePreset:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int


PRESETS: dict[str, SizePreset] = {
    # ~0.1 M parameters: unit tests only.
    "nano": SizePreset(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128),
    # ~1.6 M parameters: the default policy for CPU runs.
    "tiny": SizePreset(hidden_size=192, num_layers=4, num_heads=6, num_kv_heads=2, intermediate_size=512),
    # ~4.8 M parameters: longer runs on harder environments.
    "small": SizePreset(hidden_size=256, num_layers=6, num_heads=8, num_kv_heads=4, intermediate_size=768),
}
