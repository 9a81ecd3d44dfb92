"""The sandboxed Python tool: hostile code ends its own call with an error message; the caller and the next call live on."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from rollarc.agent.runner import EpisodeSpec
from rollarc.config import AgentConfig, TaskConfig
from rollarc.data.sandbox import CELLS, python
from rollarc.data.tools import MAX_OUTPUT
from tests.unit.test_data_rewards import TOKENIZER, env_of, run_episodes

LIMITS = {"wall_s": 2.0, "cpu_s": 1, "memory_mb": 256, "max_output": 2000}


def sandboxed(code: str) -> str:
    return python(code, **LIMITS)  # type: ignore[arg-type]


def benign_still_works() -> None:
    assert sandboxed("print(sum(range(10)))") == "45"


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("while True: pass", "error: CPU time limit (1 s) exceeded; the process was killed"),
        ("import time\ntime.sleep(30)", "error: timed out after 2 s (wall clock); the process was killed"),
        ("import os\nwhile True: os.fork()", "error: PermissionError: starting processes is blocked in the sandbox"),
        (
            "import subprocess\nsubprocess.run(['true'])",
            "error: PermissionError: starting processes is blocked in the sandbox",
        ),
        ("x = bytearray(10**10)", "error: MemoryError (memory limit 256 MiB)"),
        ("x = []\nwhile True: x.append(' ' * 10**7)", "error: MemoryError (memory limit 256 MiB)"),
        (
            "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
            "error: PermissionError: network access is blocked in the sandbox",
        ),
        ("1/0", "error: ZeroDivisionError: division by zero"),
    ],
)
def test_hostile_code_ends_with_an_error_and_the_next_call_works(code, error):
    assert sandboxed(code) == error
    benign_still_works()


def test_a_huge_print_is_cut_and_killed():
    out = sandboxed("while True: print('x' * 100)")
    assert out.endswith("\nerror: output over 2000 bytes; the process was killed")
    assert len(out) <= MAX_OUTPUT and out.startswith("x" * 100)
    benign_still_works()


def test_writes_outside_the_scratch_directory_are_refused_and_inside_it_work():
    with tempfile.TemporaryDirectory() as outside:
        target = Path(outside) / "evil.txt"
        assert sandboxed(f"open({str(target)!r}, 'w').write('x')") == (
            f"error: PermissionError: writing outside the sandbox's directory is blocked: {target}"
        )
        assert sandboxed(f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)").startswith(
            "error: PermissionError: writing outside"
        )
        assert sandboxed("import os\nos.remove('/etc/hostname')").startswith(
            "error: PermissionError: changing files outside the sandbox's directory is blocked"
        )
        assert not target.exists()
    # the scratch directory is the working directory, fresh for each call
    assert sandboxed("open('a.txt', 'w').write('hi')\nprint(open('a.txt').read())") == "hi"
    assert sandboxed("import os\nprint(os.listdir('.'))") == "[]"


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace without user namespaces needs root")
def test_the_code_runs_without_a_network_device():
    devices = sandboxed("print(open('/proc/net/dev').read())").splitlines()[2:]
    assert [line.split(":")[0].strip() for line in devices] == ["lo"]


def test_processes_the_code_leaves_behind_are_killed_with_its_group():
    # ctypes gets past the audit hook (it is no boundary): the process-group kill is what cleans up
    code = (
        "import ctypes, os, time\nprint(os.getpgid(0), flush=True)\n"
        "for _ in range(3):\n    if ctypes.CDLL(None).fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "print('parent done')"
    )
    out = sandboxed(code)
    group, done = out.splitlines()
    assert done == "parent done" and int(group) != os.getpgid(0)
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously: wait (bounded) for the group to die
    while living(int(group)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert living(int(group)) == []  # dead; zombies wait for PID 1 to reap them


def living(group: int) -> list[int]:
    """The processes of ``group`` that are not zombies."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # not a process, or it exited meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def test_a_session_keeps_the_trajectorys_variables_by_rerunning_its_cells():
    state: dict[str, list[str]] = {}
    assert python("a = 5\nprint('set')", state=state, session=True) == "set"
    assert python("print(a * 2)", state=state, session=True) == "10"  # the first cell's output is not repeated
    assert python("b = 1/0", state=state, session=True) == "error: ZeroDivisionError: division by zero"
    assert state[CELLS] == ["a = 5\nprint('set')", "print(a * 2)"]  # a failed cell is not kept
    assert python("print(a)") == "error: NameError: name 'a' is not defined"  # per-call mode keeps nothing


def test_the_python_tool_in_a_hermes_dataset_task(tmp_path):
    rows = [{"prompt": "6*7=", "ground_truth": "42", "tool": "python"}] * 4
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tool = {"function": "rollarc.data.sandbox:python", "kwargs": {"session": True, "wall_s": 2}}
    env = env_of(
        str(path),
        {"function": "rollarc.data.math_reward:accuracy"},
        tool_column="tool",
        tools={"python": tool},
        tool_format="hermes",
    )
    _, info = env.reset(seed=0)
    assert info["tools"][0]["function"]["parameters"]["properties"] == {
        "code": {"type": "string", "description": "the Python program to run; print what you want to see"}
    }  # the bound kwargs and the env's state are not the model's to set
    call = '<tool_call>{"name": "python", "arguments": {"code": %s}}</tool_call>'
    _, _, _, _, info = env.step(call % json.dumps("x = 6 * 7"))
    _, _, _, _, info = env.step(call % json.dumps("print(x)"))
    assert info["messages"] == [{"role": "tool", "content": "42"}]
    _, reward, done, _, _ = env.step("\\boxed{42}")
    assert (reward, done) == (1.0, True)
    env.reset(seed=0)  # a new episode starts a new session
    _, _, _, _, info = env.step(call % json.dumps("print(x)"))
    assert info["messages"] == [{"role": "tool", "content": "error: NameError: name 'x' is not defined"}]


def test_hostile_calls_through_the_episode_runner_leave_its_trajectories_ok(tmp_path):
    rows = [{"prompt": f"{i}*7=", "ground_truth": str(i * 7), "tool": ["python"]} for i in range(4)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TaskConfig(
        name="d",
        dataset={
            "path": str(path),
            "ground_truth_column": "ground_truth",
            "reward": [{"function": "rollarc.data.math_reward:accuracy"}],
            "tool_column": "tool",
            "tool_format": "hermes",
            "tools": {
                "python": {"function": "rollarc.data.sandbox:python", "kwargs": {"wall_s": 10, "cpu_s": 1}}
            },  # wall well above cpu: a loaded machine must still hit the CPU limit first
            "template_plain_prompts": True,
        },
        agent=AgentConfig(max_tokens_per_turn=128, max_turns=3),
    )
    call = '<tool_call>{"name": "python", "arguments": {"code": %s}}</tool_call>'
    replies = [call % json.dumps("while True: pass") + call % json.dumps("import os\nwhile True: os.fork()"), "0"]
    trajs, stats = run_episodes(task, replies, [EpisodeSpec(f"t{s}", "d", s) for s in range(2)])
    assert [(t.status, t.num_turns, t.finish, t.invalid_actions) for t in trajs] == [("ok", 2, "terminated", 0)] * 2
    assert sum(stats.failures.counts.values()) == 0
    seen = TOKENIZER.decode(trajs[0].segments[-1].token_ids)  # the results, as user turns (no tool role here)
    assert "<|user|>error: CPU time limit (1 s) exceeded; the process was killed<|end|>" in seen
    assert "<|user|>error: PermissionError: starting processes is blocked in the sandbox<|end|>" in seen
