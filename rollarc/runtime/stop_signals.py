"""Ctrl-C and SIGTERM end a command cleanly: one line, a saved state, and the shell's exit code.

Python's default turns SIGINT into a ``KeyboardInterrupt`` that unwinds as a long traceback through Ray's
and torch's frames, and ``ray.init`` installs a SIGTERM handler that exits from wherever the driver is.
:func:`stop_on_signals` replaces both with one handler that raises :class:`RunStopped` in the main thread.
The command's own code catches it where it knows what was saved, and the CLI prints one line and exits
``128 + signal`` (130 for SIGINT, 143 for SIGTERM), as a shell does. A second signal while the first is
being handled exits at once, for a user who does not want to wait for the clean-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(KeyboardInterrupt):
    """A stop signal arrived; a ``KeyboardInterrupt`` so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_stopping = threading.Event()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _stopping.is_set():  # the second signal: the user does not want to wait for the clean-up
        print(f"rollarc: {signal.Signals(signum).name} again: exiting without cleaning up", file=sys.stderr)
        os._exit(128 + signum)
    _stopping.set()
    raise RunStopped(signum)


def install() -> None:
    """(Re)install the stop handler; call again after ``ray.init``, which replaces the SIGTERM handler."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, _handler)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM raise :class:`RunStopped`; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    _stopping.clear()
    install()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stopping.clear()
