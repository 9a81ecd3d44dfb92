"""A sandboxed Python interpreter tool, ``rollarc.data.sandbox:python`` (the tool of ReTool / SimpleTIR).

Why a process per call: the code is model output, so hostile. Each call runs in a fresh interpreter
(``python -I``: no environment variables, no user site) in its own process group, with a fresh scratch
directory (``tempfile.mkdtemp``, removed afterwards) as its working directory and a minimal environment.
Before the code runs, the child:

* sets resource limits: ``RLIMIT_CPU`` (``cpu_s``), ``RLIMIT_AS`` (``memory_mb``), ``RLIMIT_FSIZE`` (files
  it writes), ``RLIMIT_NOFILE``, ``RLIMIT_CORE`` 0 and ``RLIMIT_NPROC`` (``max_processes``);
* leaves the network: ``unshare(CLONE_NEWNET)`` (root), else ``unshare(CLONE_NEWUSER | CLONE_NEWNET)``
  (unprivileged user namespaces), gives a process with only a loopback device, so no host is reachable;
* installs an audit hook (:pep:`578`) that refuses sockets, process creation (fork, exec, spawn,
  subprocess, system) and opening files for writing, deleting or renaming outside the scratch directory.

The parent reads stdout and stderr with a cap (``max_output`` bytes: past it the group is killed), and
kills the whole process group (``os.killpg``) at the wall-clock limit (``wall_s``) or when the call ends,
so nothing the code started is left behind. Every way a call can end badly (an exception, the CPU,
memory, wall-clock or output limit, a signal) comes back to the model as text ending ``error: ...``; the
env worker is never at risk, since the code never runs in it.

What is a boundary and what is not: the process limits, the group kill and the network namespace are
enforced by the kernel. The audit hook is not a security boundary (code can get past it, e.g. through
``ctypes``); it turns the common mistakes into clear errors. As root (as in most containers)
``RLIMIT_NPROC`` does not apply, so a fork bomb that gets past the hook is bounded only by the wall-clock
group kill and the CPU limit of each process; run rollarc as a non-root user for the process limit to
hold (the limit counts all processes of that user). Files the code writes outside its scratch directory
are refused by the hook only: as root, directory permissions do not stop them.

Session mode (``session=True``, e.g. ``tools: {python: {function: rollarc.data.sandbox:python, kwargs:
{session: true}}}``): the variables of earlier cells of the same trajectory are kept by re-running the
trajectory's earlier successful cells (their output discarded) before the new one, in a fresh process.
That is simple and deterministic (no long-lived process per trajectory to clean up), at the cost of
re-running earlier cells' compute on every call (limits apply to the whole run).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from rollarc.data.tools import MAX_OUTPUT

POLL_S = 0.05  # how often the reader checks whether the interpreter has exited
CELLS = "python_cells"  # the episode state's key for session mode: the earlier successful cells

# Runs in the child: limits, network namespace and audit hook first, then the cells; errors go to stderr.
RUNNER = r"""
import ctypes, json, os, resource, sys, traceback
spec = json.loads(sys.stdin.read())
limits = spec["limits"]
for name, value in limits.items():
    resource.setrlimit(getattr(resource, name), (value, value))
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
    libc.unshare(0x10000000 | 0x40000000)  # CLONE_NEWUSER | CLONE_NEWNET (unprivileged); else the hook alone
del ctypes, libc
scratch = os.path.realpath(os.getcwd())
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PROCESS = ("os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
           "pty.spawn")
PATHS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink", "os.link",
         "os.truncate", "shutil.rmtree", "shutil.copyfile", "shutil.move", "os.utime")
def inside(path):
    if isinstance(path, int):
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == scratch or real.startswith(scratch + os.sep)
def hook(event, args):
    if event.startswith("socket."):
        raise PermissionError("network access is blocked in the sandbox")
    if event in PROCESS:
        raise PermissionError("starting processes is blocked in the sandbox")
    if event == "open" and args[2] is not None and args[2] & WRITE and not inside(args[0]):
        raise PermissionError(f"writing outside the sandbox's directory is blocked: {args[0]}")
    if event == "open" and args[1] is not None and set(str(args[1])) & set("wax+") and not inside(args[0]):
        raise PermissionError(f"writing outside the sandbox's directory is blocked: {args[0]}")
    if event in PATHS and args and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes))):
        raise PermissionError(f"changing files outside the sandbox's directory is blocked: {args[0]}")
quiet = open(os.devnull, "w")  # earlier cells' output goes here (opened before the hook would refuse it)
sys.addaudithook(hook)
scope = {"__name__": "__main__"}
cells = spec["cells"]
for i, cell in enumerate(cells):
    last = i == len(cells) - 1
    sys.stdout = sys.__stdout__ if last else quiet
    try:
        exec(compile(cell, "<cell>", "exec"), scope)
    except SystemExit as err:
        if err.code not in (0, None):
            sys.stdout.flush()
            sys.stderr.write(f"SystemExit: {err.code}")
            sys.exit(1)
    except BaseException as err:
        sys.stdout.flush()
        lines = traceback.format_exception_only(type(err), err)
        sys.stderr.write(lines[-1].strip() if lines else type(err).__name__)
        sys.exit(1)
sys.stdout.flush()
"""


def python(
    code: str,
    *,
    state: dict[str, Any] | None = None,
    wall_s: float = 5.0,
    cpu_s: int = 5,
    memory_mb: int = 1024,
    max_output: int = 8192,
    max_file_mb: int = 16,
    max_processes: int = 8,
    session: bool = False,
) -> str:
    """Run Python code in a sandbox and return what it prints (stdout and stderr), or the error it ends with.

    Args:
        code: the Python program to run; print what you want to see
    """
    cells = [*(state or {}).get(CELLS, []), code] if session else [code]
    out, err, failure = run(cells, wall_s, cpu_s, memory_mb, max_output, max_file_mb, max_processes)
    if session and failure is None and state is not None:
        state[CELLS] = cells
    if failure is None:
        return (out + (f"\n{err}" if err else "")).strip()
    ending = f"error: {failure}"  # kept whole: the tool's output is cut to MAX_OUTPUT characters
    return f"{out.strip()[: max(MAX_OUTPUT - len(ending) - 1, 0)]}\n{ending}".strip()


def run(
    cells: list[str], wall_s: float, cpu_s: int, memory_mb: int, max_output: int, max_file_mb: int, max_processes: int
) -> tuple[str, str, str | None]:
    """Run ``cells`` in one sandboxed process: (stdout, stderr, why it failed or None)."""
    limits = {
        "RLIMIT_CPU": cpu_s,
        "RLIMIT_AS": memory_mb << 20,
        "RLIMIT_FSIZE": max_file_mb << 20,
        "RLIMIT_NOFILE": 64,
        "RLIMIT_CORE": 0,
        "RLIMIT_NPROC": max_processes,
    }
    scratch = tempfile.mkdtemp(prefix="rollarc-sandbox-")
    env = {"PATH": os.path.dirname(sys.executable), "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
    env |= dict.fromkeys(
        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"
    )  # threads count as processes
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", RUNNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scratch,
        env=env,
        process_group=0,
    )
    try:
        out, err, failure = _collect(proc, json.dumps({"limits": limits, "cells": cells}), wall_s, max_output)
    finally:
        _kill_group(proc)
        shutil.rmtree(scratch, ignore_errors=True)
    code = proc.returncode
    if failure is None and code != 0:
        failure = _exit_reason(code, err, cpu_s, memory_mb)
    return out, err, failure


def _collect(proc: subprocess.Popen[bytes], spec: str, wall_s: float, max_output: int) -> tuple[str, str, str | None]:
    """Feed the spec, then read both pipes until EOF, the output cap or the wall-clock limit."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(spec.encode())
        proc.stdin.close()
    except BrokenPipeError:  # the child died before reading: its exit status says why
        pass
    chunks: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    deadline = time.monotonic() + wall_s
    failure = None
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdout, proc.stderr):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                failure = f"timed out after {wall_s:g} s (wall clock); the process was killed"
                break
            events = selector.select(min(remaining, POLL_S))
            if not events and proc.poll() is not None:
                break  # the interpreter exited and its pipes are drained (children it left may hold them open)
            for key, _ in events:
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                chunks[key.fd] += data
            if sum(len(c) for c in chunks.values()) > max_output:
                failure = f"output over {max_output} bytes; the process was killed"
                break
    if failure is None:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            failure = f"timed out after {wall_s:g} s (wall clock); the process was killed"
    out, err = (bytes(chunks[p.fileno()][:max_output]).decode(errors="replace") for p in (proc.stdout, proc.stderr))
    return out, err, failure


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill everything in the call's process group and reap the interpreter (closing its pipes)."""
    with contextlib.suppress(ProcessLookupError):  # the group is empty: every process of it has exited
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _exit_reason(code: int, err: str, cpu_s: int, memory_mb: int) -> str:
    """Why the interpreter exited non-zero, for the model."""
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return f"CPU time limit ({cpu_s} s) exceeded; the process was killed"
    if code < 0:
        return f"the process was killed by signal {signal.Signals(-code).name}"
    last = err.strip().splitlines()[-1] if err.strip() else f"exit status {code}"
    if last.startswith("MemoryError"):
        return f"{last} (memory limit {memory_mb} MiB)"
    return last
