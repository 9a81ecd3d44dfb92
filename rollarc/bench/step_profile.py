"""Break a sampled profile of RL steps into the phases of a step (the breakdown in docs/performance.md).

Input: py-spy's ``raw`` (collapsed-stack) output, one line per distinct stack, ``frame;frame;...;leaf COUNT``
with each frame written ``function (path:line)``, e.g. from the driver and every Ray worker at once::

    py-spy record -f raw -o step.txt --subprocesses -r 100 -- rollarc train configs/short_task.yaml ...
    python -m rollarc.bench.step_profile step.txt

Each sample goes to one phase: the phase of the innermost frame that names one (``PHASES``, first match
wins within a frame). Frames of generic code (torch, the HF model's layers, the standard library) name no
phase, so a matmul counts under whoever called the model: the engine's model runner (forward passes), HF
``generate``, or the trainer (training). Samples that reach no phase-naming frame are ``other``.
py-spy leaves idle samples (threads blocked in a wait) out unless ``--idle`` is given, so the fractions
are of busy CPU time.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterable


# (phase, pattern on "function (path:line)"); checked in this order for each frame, innermost frame first.
def _files(package: str, *names: str) -> str:
    """Frames in these files of rollarc ``package``: Ray workers report paths relative to their cwd, bare."""
    alternatives = "|".join(names)
    return rf"\((rollarc/{package}/)?({alternatives})\.py:"


_ENGINE = _files("engine", "engine", "scheduler", "kv_cache", "async_engine", "request", "prefix_cache", "types")
PHASES: list[tuple[str, str]] = [
    (
        "sync",
        r"^(update_weights|publish|latest_payload|receive|engine_weights) |rollarc/sync/|"
        + _files("runtime", "weight_sync", "weight_handoff")
        + "|"
        + _files("sync", "versions", "codec", "shard"),
    ),
    ("sampling", _files("engine", "sampling")),
    ("forward passes", _files("engine", "model_runner")),
    ("engine scheduling", _ENGINE),
    ("HF generate (baseline)", r"transformers/generation/"),
    ("tokenisation and chat templating", _files("agent", "chat") + r"|transformers/tokenization|tokenizers/|jinja2/"),
    ("env steps", r"rollarc/envs/|reverse_word_env\.py|gymnasium/"),
    ("agent loop", _files("agent", "loop", "runner", "trajectory", "daemon_pool", "seeds")),
    (
        "batching",
        _files("train", "batch") + "|" + _files("runtime", "scheduling") + r"|rollarc/policy/|_form_batch|_batch_info",
    ),
    ("training", _files("train", "policy_trainer") + r"|rollarc/algo/|torch/optim/|torch/autograd/"),
    ("Ray calls", r"\(ray/|_raylet|cloudpickle|pickle|msgpack|grpc"),
    ("metrics and timeline", r"rollarc/report/|\((metrics|timeline|run_dir)\.py:|psutil/"),
    (
        "runtime (actors, controller)",
        r"rollarc/runtime/|\((controller|router|rollout_worker|env_worker|train_worker|workers)\.py:",
    ),
]
# When no frame names a phase: model code whose caller the sampler did not capture (a truncated stack).
FALLBACK = ("model layers (caller not sampled)", re.compile(r"transformers/models/|torch/nn/"))
_COMPILED = [(phase, re.compile(pattern)) for phase, pattern in PHASES]
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


STARTUP = re.compile(
    r"_find_and_load|matplotlib/|build_report|^main_loop |ray/_private/(node|services)\.py|init \(ray/"
)


# A stack whose innermost frame waits (py-spy's idle detection misses some waits of Ray's threads), or whose
# only frames are py-spy's ``process N:"command"`` labels (native code of Ray's own daemons), is not work.
IDLE = re.compile(
    r"^(DaemonThreadPool\._work|Condition\.wait|Event\.wait|\w*Selector\.select|BaseServer\.serve_forever|_worker|Queue\.get|sleep) |"
    r"^Worker\.main_loop \(ray/|^main \(.*ray_reaper\.py|^Thread\.run |^LogMonitor\.run |^process \d+:"
)


def phase_of(frames: list[str]) -> str:
    """The phase of one sampled stack (frames root first); ``start-up`` for imports and Ray's own start, ``idle``."""
    if any(STARTUP.search(frame) for frame in frames):
        return "start-up"  # and the end-of-run report
    if not frames or IDLE.search(frames[-1]):
        return "idle"
    for frame in reversed(frames):
        if frame.startswith("process "):  # py-spy's label of the process; its command line names paths too
            continue
        for phase, pattern in _COMPILED:
            if pattern.search(frame):
                return phase
    if any(FALLBACK[1].search(frame) for frame in frames):
        return FALLBACK[0]
    return "other"


def breakdown(lines: Iterable[str]) -> dict[str, float]:
    """Fraction of the step's samples per phase (summing to 1), largest first; start-up and idle samples are left out."""
    counts: Counter[str] = Counter()
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None:
            continue
        phase = phase_of(match["stack"].split(";"))
        if phase not in ("start-up", "idle"):
            counts[phase] += int(match["count"])
    total = sum(counts.values())
    return {phase: n / total for phase, n in counts.most_common()} if total else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rollarc.bench.step_profile", description=__doc__.split("\n")[0])
    parser.add_argument("raw", nargs="+", help="py-spy raw profiles (-f raw); several are summed")
    args = parser.parse_args(argv)
    lines: list[str] = []
    for path in args.raw:
        with open(path) as f:
            lines += f.readlines()
    print(json.dumps({phase: round(share, 4) for phase, share in breakdown(lines).items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
