"""The ``rollarc`` command.

Subcommands import their implementation lazily, so ``rollarc config show`` does not pay for torch or
Ray. ``bench NAME``, ``plan`` and ``simulate`` hand their remaining arguments to the module that owns
them (``rollarc.bench.NAME``, ``rollarc.sim.plan_cli``, ``rollarc.sim.cli``), each with its own
argparse, so that adding a benchmark never touches this file's logic.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rollarc.config.docs import render, stale_message
from rollarc.config.io import ConfigError, dump_yaml, read_yaml
from rollarc.rayproc.loopback import keep_local_ray_on_loopback
from rollarc.report.disk_full import DiskFull
from rollarc.runtime.stop_signals import RunStopped, stop_on_signals

BENCHMARKS = {
    "engine": "built-in engine vs HF generate and generate_batch",
    "async": "trajectory-level asynchrony vs synchronous and monolithic",
    "reward": "serverless reward vs dedicated pools",
    "weightsync": "sparse bf16 delta vs full weight copies",
    "sim": "simulator speed at 3,072 GPUs",
    "chaos": "training through env failures and killed workers vs a clean run",
    "spotlight": "t2i Flow-GRPO: stale-weight seed exploration (+ a budget planner) vs random seeds",
    "ditstep": "t2i: one DiT denoising step's compute vs the per-call overhead (Ray round trip, dispatch)",
    "spot": "preemption: pull scheduler vs push, elastic SP regroup vs cold restart, spot cost",
    "rose": "rollouts on dedicated plus borrowed serving capacity vs dedicated only, serving SLO kept",
    "step": "short single-turn steps: rollarc sync and async vs an in-process HF-generate GRPO loop",
    "demo": "the quickstart on N seeds: held-out gain of the final policy and wall time per seed",
    "lora": "LoRA vs full fine-tuning on the RLVR demo's policy: bytes per weight sync, train step time",
    "table": "regenerate the README's headline table from docs/benchmarks/*.json (--check: only compare)",
}


def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file (see configs/)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.steps=5")


def _positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``--episodes -5`` used to print ``"success": NaN`` and exit 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _passthrough(module: str, func: str = "main") -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        return int(getattr(importlib.import_module(module), func)(argv) or 0)

    return run


def _cmd_config(args: argparse.Namespace) -> int:
    from rollarc.config import load_train_config  # deferred: the training config imports torch
    from rollarc.diffusion.config import is_t2i, load_t2i_config

    t2i = is_t2i(args.config)  # `kind: t2i` files validate as the text-to-image config
    cfg = load_t2i_config(args.config, args.overrides) if t2i else load_train_config(args.config, args.overrides)
    print(dump_yaml(cfg), end="")
    return 0


def _cmd_config_docs(args: argparse.Namespace) -> int:
    out, expected = Path(args.out), render()
    if args.check:
        message = stale_message(out, out.read_text() if out.is_file() else None, expected)
        print(f"rollarc: {message}" if message else f"{out} is up to date", file=sys.stderr if message else sys.stdout)
        return 1 if message else 0
    if not out.parent.is_dir():
        raise ConfigError(
            f"--out {out}: directory {out.parent} does not exist (run from the repository root, or pass --out PATH)"
        )
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(expected)
    tmp.replace(out)
    print(out)
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from rollarc.diffusion.config import is_t2i, load_t2i_config  # deferred: the t2i config imports torch

    if is_t2i(args.config):  # `kind: t2i`: text-to-image Flow-GRPO (docs/diffusion.md)
        if args.address is None and load_t2i_config(args.config, args.overrides).cluster.address is None:
            keep_local_ray_on_loopback()  # before Ray is imported (rollarc.rayproc.loopback says why)
        from rollarc.runtime.t2i_entry import train_t2i_main  # deferred: Ray, torch and diffusers are heavy

        return train_t2i_main(args.config, args.overrides, address=args.address)
    from rollarc.config import load_train_config  # deferred: the training config imports torch

    if args.address is None and load_train_config(args.config, args.overrides).cluster.address is None:
        keep_local_ray_on_loopback()  # before Ray is imported (rollarc.rayproc.loopback says why)
    from rollarc.runtime.entry import train_main  # deferred: Ray and torch are heavy

    return train_main(args.config, args.overrides, address=args.address)


def _cmd_sft(args: argparse.Namespace) -> int:
    from rollarc.train.sft_entry import sft_main  # deferred: torch and transformers are heavy

    return sft_main(args.config, args.overrides)


def _cmd_eval(args: argparse.Namespace) -> int:
    from rollarc.runtime.entry import eval_main  # deferred: Ray and torch are heavy

    return eval_main(args.config, args.overrides, checkpoint=args.checkpoint, episodes=args.episodes)


def _cmd_report(args: argparse.Namespace) -> int:
    from rollarc.report.build import ReportError, build_report  # deferred: matplotlib is heavy

    config = Path(args.run_dir) / "config.yaml"
    if config.is_file() and read_yaml(str(config)).get("kind") == "t2i":  # a t2i run's own report
        from rollarc.diffusion.report import build_t2i_report  # deferred: matplotlib is heavy

        for path in build_t2i_report(Path(args.run_dir)):
            print(path)
        return 0
    try:
        paths = build_report(args.run_dir)
    except ReportError as err:
        print(f"rollarc report: {err}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollarc", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("config", help="inspect configs")
    config_sub = p.add_subparsers(dest="action", required=True)
    show = config_sub.add_parser("show", help="print the resolved config")
    _config_args(show)
    show.set_defaults(func=_cmd_config)
    docs = config_sub.add_parser("docs", help="write the configuration reference generated from the config models")
    docs.add_argument("--out", default="docs/configuration.md", help="where to write it (default: %(default)s)")
    docs.add_argument("--check", action="store_true", help="only check that --out is up to date (exit 1 if not)")
    docs.set_defaults(func=_cmd_config_docs)

    p = sub.add_parser("train", help="RL training run (SFT warm start first if needed)")
    _config_args(p)
    p.add_argument("--address", default=None, help="join an existing Ray cluster instead of starting a local one")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("sft", help="train the SFT warm start from solver demonstrations")
    _config_args(p)
    p.set_defaults(func=_cmd_sft)

    p = sub.add_parser("eval", help="held-out evaluation of a checkpoint")
    _config_args(p)
    p.add_argument("--checkpoint", default=None, help="HF-format directory (default: the config's policy)")
    p.add_argument(
        "--episodes", type=_positive_int, default=None, help="held-out episodes (default: train.eval_episodes)"
    )
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("report", help="rebuild a run's plots, bubble fractions and report.md")
    p.add_argument("run_dir")
    p.set_defaults(func=_cmd_report)

    bench_help = "; ".join(f"{name}: {what}" for name, what in BENCHMARKS.items())
    p = sub.add_parser("bench", help=f"benchmarks against their baselines ({bench_help})")
    p.add_argument("name", choices=sorted(BENCHMARKS))
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("plan", help="hardware-affinity placement plan", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: _passthrough("rollarc.sim.plan_cli")(a.rest))

    p = sub.add_parser(
        "reward", help="model-based reward: train the judge (rollarc reward train CONFIG)", add_help=False
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: _passthrough("rollarc.cli.reward")(a.rest))

    p = sub.add_parser(
        "serve", help="OpenAI-compatible completions server of a model (rollarc serve MODEL_DIR)", add_help=False
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: _passthrough("rollarc.serve.cli")(a.rest))

    p = sub.add_parser(
        "loadgen",
        help="replay a serving trace, record TTFT/TPOT and SLO attainment (rollarc loadgen --trace FILE)",
        add_help=False,
    )
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: _passthrough("rollarc.bench.loadgen")(a.rest))

    p = sub.add_parser("simulate", help="discrete-event simulation of a cluster", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: _passthrough("rollarc.sim.cli")(a.rest))
    return parser


PASSTHROUGH = {
    "plan": "rollarc.sim.plan_cli",
    "simulate": "rollarc.sim.cli",
    "reward": "rollarc.cli.reward",
    "serve": "rollarc.serve.cli",
    "loadgen": "rollarc.bench.loadgen",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # plan/simulate/bench own their flags (which argparse.REMAINDER would not pass on when they start with --).
    if argv and argv[0] in PASSTHROUGH:
        return _guarded(lambda: _passthrough(PASSTHROUGH[argv[0]])(argv[1:]))
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in BENCHMARKS:
        _start_load_monitor(argv[1])
        return _guarded(lambda: _passthrough(f"rollarc.bench.{_bench_module(argv[1])}")(argv[2:]))
    args = build_parser().parse_args(argv)
    return _guarded(lambda: args.func(args))


def _cmd_bench(args: argparse.Namespace) -> int:
    _start_load_monitor(args.name)
    return _passthrough(f"rollarc.bench.{_bench_module(args.name)}")(args.rest)


def _start_load_monitor(name: str) -> None:
    """A benchmark's JSON says whether the machine was quiet while it ran (``rollarc.bench.machine_load``)."""
    if name != "table":
        from rollarc.bench import machine_load  # deferred: psutil, which only a benchmark needs

        machine_load.start()


def _bench_module(name: str) -> str:
    return "async_" if name == "async" else name


def _guarded(run: Callable[[], int]) -> int:
    """Config errors and stop signals end in one line on stderr, not a traceback.

    ``rollarc train`` handles its own stop (it knows what it saved); a signal that reaches here stopped a
    command that saves only when it finishes (``sft``, ``eval``, a benchmark), so nothing is left to resume.
    """
    try:
        with stop_on_signals():
            return run()
    except ConfigError as err:
        print(f"rollarc: {err}", file=sys.stderr)
        return 2
    except RunStopped as err:
        print(f"rollarc: stopped by {err.name}; nothing was saved (this command saves when it ends)", file=sys.stderr)
        return err.exit_code
    except DiskFull as err:  # a run's records or checkpoint: what is intact and how to resume
        print(f"rollarc: {err.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
