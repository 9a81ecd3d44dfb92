"""``rollarc train`` and ``rollarc eval``: set up a run directory and Ray, run the controller, write the report."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rollarc.agent.local_eval import evaluate_local
from rollarc.config import Config, load_train_config
from rollarc.config.io import ConfigError
from rollarc.models.checkpoint import checkpoint_adapter, load_policy, remove_partial_directories
from rollarc.models.device import resolve_device, resolve_dtype
from rollarc.rayproc.deadline import ActorHung
from rollarc.report.disk_full import DiskFull
from rollarc.report.metrics import MetricsWriter
from rollarc.report.trackers import open_trackers
from rollarc.runtime import stop_signals
from rollarc.runtime.controller import Controller, RunError
from rollarc.runtime.ray_cluster import plugin_pythonpath, start_ray, stop_ray
from rollarc.runtime.resume import ResumePoint, prepare_resume
from rollarc.runtime.run_dir import finished, new_run_dir, partial_summary, record_new_run, stop_summary, write_summary
from rollarc.runtime.stop_signals import RunStopped
from rollarc.runtime.workers import Workers
from rollarc.train.preflight import eval_policy_dir, preflight_train
from rollarc.train.sft_entry import SFT_META, read_sft_meta, run_sft


def initial_policy(cfg: Config, log: Callable[[str], None] = print) -> tuple[str, dict[str, Any] | None]:
    """The directory RL starts from: ``model.path`` as given, or the SFT warm start (trained if missing)."""
    if cfg.model.path is not None:
        return cfg.model.path, None
    sft_dir = cfg.sft_checkpoint()
    if not (sft_dir / "config.json").is_file():
        log(f"no SFT checkpoint at {sft_dir}: training the warm start first")
        run_sft(cfg, log=log)
    return str(sft_dir), read_sft_meta(sft_dir)


def train_main(config_path: str, overrides: list[str], address: str | None = None) -> int:
    cfg = load_train_config(config_path, overrides)
    return run_training(cfg, address=address)


def run_training(cfg: Config, address: str | None = None) -> int:
    """Run (or resume) RL training; returns a process exit code (``128 + signal`` when stopped by a signal)."""
    start = time.time()
    plugin_pythonpath(cfg.plugin_paths)  # plugin envs must import here too (SFT demos, evaluation)
    preflight_train(cfg, resuming=cfg.resume is not None, warn=lambda m: print(m, file=sys.stderr))
    resume: ResumePoint | None = None
    if cfg.resume is not None:
        resume = prepare_resume(cfg)  # refuses a config that differs from the run's in an unsafe key
        run_dir = resume.run_dir
        policy_dir = str(resume.checkpoint / "policy")
        sft_meta = read_sft_meta(run_dir)
        print(f"resuming {run_dir} from {resume.checkpoint.name} (version {resume.state['version']})", file=sys.stderr)
    else:
        remove_partial_directories(cfg.sft_checkpoint().parent, cfg.sft_checkpoint().name)
        policy_dir, sft_meta = initial_policy(cfg, log=lambda m: print(m, file=sys.stderr))
        run_dir = new_run_dir(cfg.run.dir, cfg.name)
        if sft_meta is not None:
            (run_dir / SFT_META).write_text(json.dumps(sft_meta, indent=1))
        record_new_run(run_dir, cfg)
    resume_state = resume.state if resume is not None else None
    version = int(resume_state["version"]) if resume_state else 0
    resumes = resume.resumes if resume is not None else 0
    if address is not None:  # joining a cluster: pools are real resources there (see ray_cluster)
        cfg = cfg.model_copy(update={"cluster": cfg.cluster.model_copy(update={"address": address})})
    workers: Workers | None = None
    controller: Controller | None = None
    stopped: RunStopped | None = None
    startup: dict[str, float] = {}
    try:
        ray_start = time.time()
        start_ray(cfg.cluster, address, cfg.plugin_paths, device=cfg.model.device)
        stop_signals.install()  # ray.init replaced the SIGTERM handler with one that exits mid-step
        ray_up = time.time()
        workers = Workers(
            cfg, policy_dir, start_version=version, checkpoint=str(resume.checkpoint) if resume is not None else None
        )
        # summary.json: how long Ray took to start (or join), then every actor to start and register, after which
        # the first step's work can be sent
        startup = {"ray_start_s": round(ray_up - ray_start, 3), "startup_s": round(time.time() - ray_up, 3)}
        trackers = open_trackers(
            list(cfg.run.trackers), run_dir, run_dir.name, cfg.run.project, cfg.model_dump(mode="json", by_alias=True)
        )
        metrics = MetricsWriter(
            run_dir,
            tensorboard=cfg.run.tensorboard,
            truncate_after_step=version if resume_state else None,
            trackers=trackers,
        )
        controller = Controller(
            cfg,
            run_dir,
            workers,
            start_version=version,
            group_index=int(resume_state["group_index"]) if resume_state else 0,
            metrics=metrics,
        )
        if resume_state is not None:
            controller.restore(resume_state)
        try:
            summary = controller.run()
        except (RunError, ActorHung, DiskFull) as err:  # DiskFull: appending a step's metrics (disk_full_guard.py)
            print(f"rollarc: run stopped: {err}", file=sys.stderr)
            controller.collect_spans()
            write_summary(run_dir, stopped_summary(cfg, controller, str(err), version, sft_meta, start, resumes))
            print(f"run directory: {run_dir} (summary.json: counts and examples of every failure)", file=sys.stderr)
            return 1
        finally:
            metrics.close()
            controller.timeline.close()
    except RunStopped as err:  # a stop signal: summary.json and one line below, after Ray is stopped
        stopped = err
    except ActorHung as err:  # while starting: an actor that never answered (no controller counted anything yet)
        print(f"rollarc: run stopped: {err}", file=sys.stderr)
        write_summary(run_dir, stopped_summary(cfg, controller, str(err), version, sft_meta, start, resumes))
        return 1
    except BaseException as err:  # recorded in summary.json, then re-raised: a dead trainer, a bug
        write_summary(
            run_dir, stopped_summary(cfg, controller, f"{type(err).__name__}: {err}", version, sft_meta, start, resumes)
        )
        raise
    finally:
        if workers is not None:
            workers.shutdown()
        stop_ray()
    if stopped is not None:
        return stop_summary(
            run_dir, stopped, stopped_summary(cfg, controller, stopped.name, version, sft_meta, start, resumes)
        )
    summary["sft"] = sft_meta
    summary.update(startup)
    summary = finished(summary, start, resumes)
    write_summary(run_dir, summary)
    from rollarc.report.build import build_report  # deferred: matplotlib is heavy

    build_report(run_dir)
    _print_result(run_dir, summary)
    return 0


def stopped_summary(
    cfg: Config,
    controller: Controller | None,
    reason: str,
    version: int,
    sft_meta: dict[str, Any] | None,
    start: float,
    resumes: int,
) -> dict[str, Any]:
    """``summary.json`` of a run that stopped before its last step: the reason and the counts so far."""
    # with no controller it stopped while starting (Ray, the workers): nothing was counted yet
    counts = controller.stopped_summary(reason) if controller is not None else {"steps": version}
    return {**partial_summary(counts, cfg.name, reason, start, resumes), "sft": sft_meta}


def _print_result(run_dir: Path, summary: dict[str, Any]) -> None:
    before, after = summary.get("heldout_success_before_rl"), summary.get("heldout_success_after_rl")
    print(f"run directory: {run_dir}")
    if before is not None and after is not None:
        print(
            f"held-out success: {before:.3f} before RL -> {after:.3f} after RL "
            f"({summary['heldout_episodes']} episodes, {summary['steps']} steps, {summary['wall_s']:.0f} s)"
        )


def eval_main(
    config_path: str, overrides: list[str], checkpoint: str | None = None, episodes: int | None = None
) -> int:
    cfg = load_train_config(config_path, overrides)
    n = episodes if episodes is not None else cfg.train.eval_episodes
    if n < 1:
        raise ConfigError("train.eval_episodes is 0, so there is nothing to evaluate; pass --episodes N")
    plugin_pythonpath(cfg.plugin_paths)
    torch.set_num_threads(cfg.train.eval_threads)
    path = eval_policy_dir(cfg, checkpoint)
    model, tokenizer = load_policy(path)
    if checkpoint is not None and (adapter := checkpoint_adapter(path)) is not None:  # a LoRA checkpoint's base
        from rollarc.train.lora import merge_saved_adapter  # deferred: peft, needed only for a LoRA checkpoint

        model = merge_saved_adapter(model, adapter)
        print(f"evaluating {path} with the LoRA adapter {adapter} merged", file=sys.stderr)
    model = model.to(resolve_device(cfg.model.device), resolve_dtype(cfg.engine.dtype or cfg.model.dtype))  # type: ignore[arg-type]  # transformers' typed .to rejects a device
    engine = cfg.engine.model_copy(update={"num_threads": cfg.train.eval_threads})
    result = evaluate_local(
        model,
        tokenizer,
        list(cfg.tasks),
        n,
        cfg.train.eval_seed_base,
        cfg.sampling,
        engine,
        temperature=cfg.train.eval_temperature,
    )
    print(json.dumps({"checkpoint": path, **result}))
    return 0
