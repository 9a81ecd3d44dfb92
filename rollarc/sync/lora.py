"""Merging a synced LoRA adapter into a rollout replica's base weights, bit for bit as ``peft`` merges it.

With ``model.lora`` the trainer publishes only the adapter tensors, under the names of PEFT's saved adapter
(``base_model.model.<module>.lora_A.weight`` / ``.lora_B.weight``). A replica keeps its own float32 copy of the
base weights of the adapted layers and computes, for each one, ``W = W_base + (B @ A) * (alpha / r)``: the
same operations, in the same order and dtype, as peft's ``LoraLayer.merge`` (``weight.data += B @ A *
scaling``), so the engine runs exactly the weights ``merge_and_unload`` gives on the trainer when the wire
dtype is float32 (``sync.dtype: null``). Each version is merged from the base, never onto the previous
merge, so rounding does not accumulate over versions.

No torch import beyond tensors, no peft: replicas merge without the training stack.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

PREFIX = "base_model.model."  # PEFT's prefix of adapter names (the PeftModel wraps the HF model as base_model.model)
A_SUFFIX = ".lora_A.weight"
B_SUFFIX = ".lora_B.weight"


def adapter_targets(adapter: Mapping[str, torch.Tensor]) -> dict[str, tuple[str, str]]:
    """``{base weight name: (lora_A name, lora_B name)}`` for every adapted layer of ``adapter``.

    Raises ``ValueError`` for a name that is not an adapter matrix or a layer whose A or B is missing.
    """
    targets: dict[str, tuple[str, str]] = {}
    for name in adapter:
        if not name.startswith(PREFIX) or not name.endswith((A_SUFFIX, B_SUFFIX)):
            raise ValueError(f"{name!r} is not a LoRA adapter tensor ({PREFIX}<module>{A_SUFFIX} or {B_SUFFIX})")
        if name.endswith(A_SUFFIX):
            module = name[len(PREFIX) : -len(A_SUFFIX)]
            b_name = PREFIX + module + B_SUFFIX
            if b_name not in adapter:
                raise ValueError(f"adapter has {name} but not {b_name}")
            targets[module + ".weight"] = (name, b_name)
    b_count = sum(name.endswith(B_SUFFIX) for name in adapter)
    if b_count != len(targets):
        raise ValueError(f"adapter has {b_count} lora_B matrices but {len(targets)} lora_A matrices")
    return targets


def merge_adapter(
    base: Mapping[str, torch.Tensor], adapter: Mapping[str, torch.Tensor], scaling: float
) -> dict[str, torch.Tensor]:
    """The merged weight of every adapted layer: ``base + (B @ A) * scaling`` in the base's dtype."""
    merged: dict[str, torch.Tensor] = {}
    for weight, (a_name, b_name) in adapter_targets(adapter).items():
        if weight not in base:
            raise KeyError(f"adapter targets {weight}, which the base weights do not hold")
        w = base[weight]
        a, b = adapter[a_name].to(w.dtype), adapter[b_name].to(w.dtype)
        merged[weight] = w + (b @ a) * scaling
    return merged


class AdapterMerge:
    """A replica's base weights of the adapted layers, and the merge of each adapter version into them.

    It holds the float32 base once: the whole state until the first adapter names its targets, then only the
    adapted layers (the rest of the model never changes, so the engine's own copy is all it needs).
    """

    def __init__(self, base: Mapping[str, torch.Tensor], scaling: float) -> None:
        self.base = {name: t.detach().to("cpu", torch.float32, copy=True) for name, t in base.items()}
        self.scaling = scaling
        self._pruned = False

    def merged(self, adapter: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        merged = merge_adapter(self.base, adapter, self.scaling)
        if not self._pruned:
            self.base = {name: self.base[name] for name in merged}
            self._pruned = True
        elif merged.keys() != self.base.keys():
            raise ValueError(
                f"adapter targets changed between versions: {sorted(merged.keys() ^ self.base.keys())[:3]}"
            )
        return merged
