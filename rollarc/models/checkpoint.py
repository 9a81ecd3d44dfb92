"""HF-format policy directories: build, save atomically, load.

What rollarc writes is a plain ``save_pretrained`` directory (``config.json``, ``model.safetensors``,
``tokenizer.json``, chat template), so ``transformers`` and vLLM load it. What rollarc reads is any
causal-LM directory ``AutoModelForCausalLM`` understands, e.g. a Qwen2.5 checkpoint on local disk.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from rollarc.config.io import ConfigError
from rollarc.models.checkpoint_digest import DamagedCheckpoint, write_manifest
from rollarc.models.presets import build_model
from rollarc.models.tokenizer import build_tokenizer
from rollarc.report.durable import fsync_path, fsync_tree

# Loading a 2 MB checkpoint is instant; per-load progress bars from every actor only bury the run's output.
hf_logging.disable_progress_bar()

# In an RL checkpoint: the frozen KL reference's weights (only when algo.kl_coef > 0), so a resume keeps it.
REFERENCE_FILE = "reference.safetensors"
# In a LoRA (model.lora) checkpoint: the adapter in PEFT's format, beside policy/ (which then holds the base).
ADAPTER_DIR = "adapter"


def checkpoint_adapter(policy_dir: str | Path) -> Path | None:
    """The adapter saved beside a LoRA checkpoint's ``policy/`` (its base), or None for a plain policy directory.

    ``rollarc eval --checkpoint RUN/checkpoints/step_N/policy`` must evaluate the trained policy, not the base
    that a LoRA checkpoint keeps there.
    """
    adapter = Path(policy_dir).parent / ADAPTER_DIR
    return adapter if (adapter / "adapter_config.json").is_file() else None


@contextlib.contextmanager
def atomic_directory(path: str | Path, *, manifest: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces ``path`` by rename, on error it is removed.

    A reader therefore sees either the old complete directory or the new complete one, never a half-written one.
    Every file is fsynced before the rename and the parent directory after it, so a power loss cannot leave the
    new name over partial files. ``manifest``: write ``manifest.json`` (the SHA-256 of every file) last.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if manifest:
            write_manifest(tmp)
        fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_path(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class UnsafeCheckpoint(ConfigError):
    """A state file that holds pickled objects (code could run on load): refused, never unpickled."""


class _KeepOSError:
    """A file for ``torch.save`` that keeps the OSError of a failed write: torch reports it without the errno."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.fh.flush()


def save_state_file(state: dict[str, Any], path: str | Path) -> None:
    """``torch.save`` of tensors and plain data (what :func:`load_state_file` loads back), a full disk kept as the
    OSError it is (ENOSPC), not torch's errno-less RuntimeError."""
    with Path(path).open("wb") as fh:
        writer = _KeepOSError(fh)
        try:
            torch.save(state, writer)  # type: ignore[arg-type]  # any object with write() and flush()
        except RuntimeError:
            if writer.error is not None:
                raise writer.error from None
            raise


def load_state_file(path: str | Path, *, mmap: bool = False) -> Any:
    """A state file (optimiser, scheduler, generator, version) loaded with ``weights_only=True``.

    Only tensors and plain data load: a file holding any other pickled object is an :class:`UnsafeCheckpoint`,
    since unpickling it could run code (a run directory copied from elsewhere). ``mmap``: leave the tensors on
    disk (a check that the file is safe, without reading the data).
    """
    try:
        return torch.load(path, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:
        raise UnsafeCheckpoint(
            f"{path} holds pickled objects other than tensors and plain data; rollarc does not load it (it could "
            "run code): use a checkpoint written by rollarc"
        ) from None


def check_state_files(directory: str | Path) -> None:
    """Every ``*.pt`` state file of a checkpoint loads safely, checked without reading its tensors.

    Raises :class:`UnsafeCheckpoint` for pickled objects, ``DamagedCheckpoint`` for a file torch cannot read.
    """
    for path in sorted(Path(directory).glob("*.pt")):
        try:
            load_state_file(path, mmap=True)
        except (RuntimeError, EOFError, OSError) as err:  # torch: a truncated or overwritten archive
            raise DamagedCheckpoint(f"{path} cannot be read ({str(err).splitlines()[0][:120]})") from None
    for path in sorted(Path(directory).glob("*/.metadata")):  # an FSDP checkpoint's DCP index (sharded/)
        check_dcp_metadata(path)


# What torch DCP's ``.metadata`` pickle names (torch 2.x): its own records, dtypes, sizes, a layout, a path.
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_DCP_GLOBALS = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath")}


class _DCPMetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name) if module in _DCP_MODULES or module == "torch" else None
        allowed = (
            (module, name) in _DCP_GLOBALS
            or (module in _DCP_MODULES and isinstance(found, type))
            or (module == "torch" and isinstance(found, torch.dtype))
        )
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name}")
        return found if found is not None else super().find_class(module, name)


def check_dcp_metadata(path: Path) -> None:
    """torch DCP unpickles ``.metadata`` with plain pickle: it is read here first, allowing only what DCP writes
    (:class:`UnsafeCheckpoint` otherwise), before any rank loads the sharded checkpoint."""
    try:
        with path.open("rb") as fh:
            _DCPMetadataUnpickler(fh).load()
    except pickle.UnpicklingError as err:
        raise UnsafeCheckpoint(
            f"{path} holds pickled objects DCP does not write ({err}); rollarc does not load it (it could run code)"
        ) from None
    except (EOFError, ValueError, TypeError, AttributeError) as err:
        raise DamagedCheckpoint(f"{path} cannot be read ({type(err).__name__})") from None


def remove_partial_directories(parent: str | Path, name: str = "*") -> list[Path]:
    """Undo what a crash inside :func:`atomic_directory` left in ``parent`` (for ``name``, or every name).

    A ``.NAME.tmp-*`` directory is an unfinished write: removed. A ``.NAME.old-*`` directory is the
    previous complete version, moved aside just before the new one took its place: put back when
    ``NAME`` is missing (the crash fell between the two renames), else removed. Returns what was removed.
    """
    parent = Path(parent)
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for old in sorted(parent.glob(f".{name}.old-*")):
        target = parent / old.name[1:].rsplit(".old-", 1)[0]
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
        else:
            os.replace(old, target)
    for tmp in sorted(parent.glob(f".{name}.tmp-*")):
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def save_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    path: str | Path,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Save model + tokenizer (+ small text files, e.g. metadata) as one HF-format directory, atomically."""
    with atomic_directory(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
    return Path(path)


def load_policy(
    path: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load any HF-format causal LM directory (weights + tokenizer) from local disk, never from a hub."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not an HF-format model directory (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return model.eval(), load_tokenizer(path)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of an HF-format directory, from local disk."""
    tokenizer = AutoTokenizer.from_pretrained(Path(path), local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def new_policy(
    preset: str, max_position_embeddings: int = 1024, seed: int = 0
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A freshly initialised tiny policy with rollarc's character tokenizer."""
    tokenizer = build_tokenizer()
    tokenizer.model_max_length = max_position_embeddings
    model = build_model(
        preset,
        vocab_size=len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        seed=seed,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return model, tokenizer
