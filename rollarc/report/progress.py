"""The rich progress display of a run: step, success, reward, tokens/s, staleness and ETA."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RunProgress:
    def __init__(self, total_steps: int, enabled: bool = True, description: str = "RL"):
        self.console = Console(stderr=True)
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "success {task.fields[success]}  reward {task.fields[reward]}  "
                "{task.fields[tok_s]} tok/s  staleness {task.fields[staleness]}"
            ),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task(
            description, total=total_steps, success="-", reward="-", tok_s="-", staleness="-"
        )

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()

    def update(self, completed: int, **fields: Any) -> None:
        formatted: dict[str, Any] = {k: _fmt(v) for k, v in fields.items()}  # rich's task fields, not its keywords
        self._progress.update(self._task, completed=completed, **formatted)

    def print(self, message: str) -> None:
        self._progress.console.print(message)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
