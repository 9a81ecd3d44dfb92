"""Start-up checks in the driver, before Ray starts or a run directory exists.

Without them, a typo in an env entry point or a bad ``model.path`` surfaced inside a Ray actor tens of
seconds later, as a long traceback or a count (``env construction (64)``) that hid the cause, and left
an empty run directory behind. Each check here fails in one line naming the config key and the fix:

* every task's env imports, constructs and resets (the real import or constructor error is shown);
* a policy directory (``model.path``, ``--checkpoint``, an existing SFT warm start) holds a readable
  ``config.json``, a tokenizer, and weights whose safetensors header matches the model that config
  builds (names and shapes, read from the header: no weights are loaded);
* ``model.lora.target_modules`` each name a linear layer of the policy (checked on a meta-device copy);
* a warm start exists when SFT must make one: SFT clones the env's ``expert_action()``, so a task
  without an expert needs ``model.path`` or an explicit ``sft.steps: 0`` (RL from the preset's random
  weights, with a warning that it may not learn).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from rollarc.agent.daemon_pool import DaemonThreadPool
from rollarc.config import Config, TaskConfig
from rollarc.config.io import ConfigError
from rollarc.envs.registry import EnvLoadError, make_env
from rollarc.models.checkpoint import load_tokenizer
from rollarc.models.presets import build_config
from rollarc.report.trackers import check_trackers
from rollarc.train.sft_settings import changed_settings, sft_settings

MODEL_FILES = "config.json, model.safetensors and the tokenizer files"
MAX_LISTED = 3


class PreflightError(ConfigError):
    """A start-up check failed; the message names the config key and the fix."""


# ---- environments ------------------------------------------------------------------------------------
def probe_env(task: TaskConfig, seed: int) -> tuple[bool, list[str]]:
    """Construct and reset the task's env; whether it offers an expert action at the first turn, and notes.

    The notes are what a dataset task skipped: per split, the malformed rows' count and the first one.
    """
    env = make_env(task.env_spec)
    try:
        env.reset(seed=seed)
        expert = getattr(env.unwrapped, "expert_action", None)
        table = getattr(env.unwrapped, "table", None)
        notes = [
            f"skipped {bad.count} malformed row(s) of {bad.total} in split {split!r}, e.g. {bad.example}"
            for split, bad in (getattr(table, "malformed", None) or {}).items()
        ]
        return callable(expert) and expert() is not None, notes
    finally:
        env.close()


def check_envs(tasks: list[TaskConfig], seed: int, warn: Callable[[str], None] | None = None) -> dict[str, bool]:
    """Every task's env builds and resets in this process; returns, per task, whether it has an expert.

    Each probe runs in a daemon thread bounded by twice the task's ``step_timeout_s`` (construction and
    reset), so a plugin that hangs fails here instead of blocking start-up or exit. ``warn`` receives a
    dataset task's skipped malformed rows.
    """
    pool = DaemonThreadPool(1, thread_name_prefix="preflight-env")
    experts: dict[str, bool] = {}
    try:
        for i, task in enumerate(tasks):
            key = f"tasks[{i}].{'env' if task.dataset is None else 'dataset'} ({task.name})"
            future = pool.submit(probe_env, task, seed)
            try:
                experts[task.name], notes = future.result(timeout=2 * task.step_timeout_s)
            except FutureTimeout:
                raise PreflightError(
                    f"{key}: constructing and resetting the env took longer than {2 * task.step_timeout_s:g} s "
                    f"(2 x tasks[{i}].step_timeout_s); fix the env or raise step_timeout_s"
                ) from None
            except EnvLoadError as err:
                raise PreflightError(f"{key}: {err}") from None
            except Exception as err:  # noqa: BLE001 - plugin boundary: an env may raise anything when built or reset
                raise PreflightError(
                    f"{key}: building or resetting the env raised {type(err).__name__}: {_first_line(err)}"
                ) from None
            for note in notes:
                if warn is not None:
                    warn(f"warning: {key}: {note}")
    finally:
        pool.shutdown()
    return experts


# ---- policy directories ------------------------------------------------------------------------------
def check_model_dir(path: str | Path, key: str, fix: str | None = None) -> None:
    """``path`` is an HF-format causal-LM directory rollarc can load; else a one-line :class:`PreflightError`."""
    path = Path(path)
    fix = fix or f"set {key} to an HF-format model directory ({MODEL_FILES})"

    def fail(problem: str) -> PreflightError:
        return PreflightError(f"{key}={path}: {problem}; {fix}")

    if not path.exists():
        raise fail("does not exist")
    if not path.is_dir():
        raise fail("is not a directory")
    if not (path / "config.json").is_file():
        raise fail("has no config.json (is it an HF-format model directory?)")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise fail(f"config.json cannot be read ({_first_line(err)})") from None
    try:
        load_tokenizer(path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise fail(f"the tokenizer cannot be loaded ({type(err).__name__}: {_first_line(err)})") from None
    problem = weights_problem(path, config)
    if problem is not None:
        raise fail(problem)


def weights_problem(path: Path, config: PretrainedConfig) -> str | None:
    """What is wrong with the directory's weights for ``config``, or None; reads safetensors headers only."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            return f"{index.name} cannot be read ({type(err).__name__}: {_first_line(err)})"
    elif (path / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    elif any(path.glob("pytorch_model*.bin")):
        return None  # pickled weights: no header to check without loading them
    else:
        return "holds no weights (model.safetensors)"
    found: dict[str, tuple[int, ...]] = {}
    for shard in shards:
        if not (path / shard).is_file():
            return f"weight shard {shard} is missing"
        try:
            with safe_open(str(path / shard), framework="pt") as f:
                found.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})  # noqa: SIM118 - safe_open is not iterable
        except SafetensorError as err:
            return f"{shard} is not a valid safetensors file ({_first_line(err)})"
    try:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError) as err:
        return f"config.json does not describe a causal LM transformers can build ({_first_line(err)})"
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    wrong = [f"{n} {found[n]} (expected {s})" for n, s in expected.items() if n in found and found[n] != s]
    missing = [n for n in expected if n not in found and n not in tied]
    if wrong:
        return f"{len(wrong)} weight(s) have the wrong shape for config.json, e.g. {', '.join(wrong[:MAX_LISTED])}"
    if missing:
        return f"{len(missing)} weight(s) are missing, e.g. {', '.join(missing[:MAX_LISTED])}"
    return None


# ---- what each command needs ------------------------------------------------------------------------
def check_warm_start(cfg: Config, experts: dict[str, bool], warn: Callable[[str], None]) -> None:
    """SFT needs an expert in every task; without one, ask for ``model.path`` or ``sft.steps: 0``."""
    lacking = [f"tasks[{i}] ({t.name})" for i, t in enumerate(cfg.tasks) if not experts.get(t.name, False)]
    if cfg.sft.steps == 0:
        if cfg.model.path is None:
            warn(
                "warning: sft.steps is 0, so RL starts from the random weights of model.preset "
                f"{cfg.model.preset!r}; it may not learn (set model.path to a trained checkpoint)"
            )
        return
    if lacking:
        raise PreflightError(
            f"{', '.join(lacking)}: the env has no expert_action() (a dataset task: no dataset.reference_column), so the "
            "SFT warm start has no demonstrations; "
            "set model.path to a trained HF-format checkpoint, or sft.steps=0 to start RL from random weights "
            "(it may not learn)"
        )


def preflight_train(cfg: Config, resuming: bool, warn: Callable[[str], None]) -> None:
    """``rollarc train``: the trackers' packages, the envs, then the policy RL starts from (or the means to make it)."""
    check_trackers(list(cfg.run.trackers))
    experts = check_envs(list(cfg.tasks), cfg.sft.seed_base, warn)
    check_lora_targets(cfg)
    if resuming:
        return  # the policy comes from the run's checkpoint
    if cfg.model.path is not None:
        check_model_dir(cfg.model.path, "model.path")
        return
    sft_dir = cfg.sft_checkpoint()
    if (sft_dir / "config.json").is_file():  # reused as it is (see runtime.entry.initial_policy)
        check_model_dir(
            sft_dir, "sft.checkpoint", fix=f"delete {sft_dir} to train the warm start again, or set model.path"
        )
        check_sft_settings(cfg, sft_dir)
        return
    check_warm_start(cfg, experts, warn)


def check_sft_settings(cfg: Config, sft_dir: Path) -> None:
    """A reused warm start was trained with this config's SFT settings (``rollarc.train.sft_settings``)."""
    meta = sft_dir / "sft_meta.json"
    try:
        recorded = json.loads(meta.read_text()).get("settings") if meta.is_file() else None
    except (OSError, ValueError, AttributeError) as err:
        raise PreflightError(
            f"sft.checkpoint={sft_dir}: its sft_meta.json is unreadable ({err}); delete {sft_dir}"
        ) from err
    if not isinstance(recorded, dict):
        return  # recorded before settings were: reused as before
    changed = changed_settings(recorded, sft_settings(cfg))
    if changed:
        raise PreflightError(
            f"sft.checkpoint={sft_dir} was trained with other SFT settings ({'; '.join(changed[:MAX_LISTED])}"
            f"{'; …' if len(changed) > MAX_LISTED else ''}); delete {sft_dir} to train it again with this config, "
            "or set sft.checkpoint to another directory"
        )


def check_lora_targets(cfg: Config) -> None:
    """Each ``model.lora.target_modules`` entry names a linear layer of the policy RL starts from (shapes only)."""
    if cfg.model.lora is None:
        return
    from rollarc.train.lora import check_targets  # deferred: peft, needed only with model.lora

    source = cfg.model.path or (cfg.sft_checkpoint() if (cfg.sft_checkpoint() / "config.json").is_file() else None)
    if source is not None:
        try:
            config = AutoConfig.from_pretrained(source, local_files_only=True)
        except (OSError, ValueError):
            return  # check_model_dir names what is wrong with the directory
    else:
        config = build_config(
            cfg.model.preset, vocab_size=64, max_position_embeddings=cfg.model.max_position_embeddings
        )
    with torch.device("meta"):  # module names only: no memory, no initialisation
        model = AutoModelForCausalLM.from_config(config)
    try:
        check_targets(model, list(cfg.model.lora.target_modules))
    except ValueError as err:
        raise PreflightError(str(err)) from None


def preflight_sft(cfg: Config, warn: Callable[[str], None]) -> None:
    """``rollarc sft``: the envs, their experts, and the starting point when ``model.path`` is given."""
    experts = check_envs(list(cfg.tasks), cfg.sft.seed_base, warn)
    if cfg.model.path is not None:
        check_model_dir(cfg.model.path, "model.path")
    check_warm_start(cfg, experts, warn)


def eval_policy_dir(cfg: Config, checkpoint: str | None) -> str:
    """``rollarc eval``: the envs and the policy it evaluates (``--checkpoint``, ``model.path`` or SFT's)."""
    check_envs(list(cfg.tasks), cfg.train.eval_seed_base)
    if checkpoint is not None:
        check_model_dir(checkpoint, "--checkpoint")
        return checkpoint
    if cfg.model.path is not None:
        check_model_dir(cfg.model.path, "model.path")
        return cfg.model.path
    sft_dir = cfg.sft_checkpoint()
    fix = "pass --checkpoint DIR, set model.path, or train the warm start first (rollarc sft CONFIG)"
    check_model_dir(sft_dir, "sft.checkpoint", fix=fix)
    return str(sft_dir)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
