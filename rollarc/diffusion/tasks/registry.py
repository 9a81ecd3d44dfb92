"""Task plugins by name; ``tasks:`` in a t2i config lists them, and prompts carry their task's name."""

from __future__ import annotations

from pathlib import Path

from rollarc.config.io import ConfigError
from rollarc.diffusion.tasks.base import Task
from rollarc.diffusion.tasks.compositional import CompositionalTask
from rollarc.diffusion.tasks.digit_reader import load_or_train_reader
from rollarc.diffusion.tasks.glyph import GlyphTask

TASKS = ("compositional", "glyph")


def make_task(name: str, cache_dir: Path) -> Task:
    """The task ``name``; the glyph task trains (once, cached under ``cache_dir``) its digit reader."""
    if name == "compositional":
        return CompositionalTask()
    if name == "glyph":
        return GlyphTask(load_or_train_reader(cache_dir))
    raise ConfigError(f"tasks: unknown task {name!r} (known: {', '.join(TASKS)})")


def vocabulary(tasks: list[Task]) -> list[str]:
    """Every word of every prompt of ``tasks``, sorted (the prompt encoder's vocabulary)."""
    return sorted({word for task in tasks for prompt in task.prompts() for word in prompt.split()})


def template_of(prompt: str) -> str:
    """The bandit arm of ``prompt``: its task's template (glyph prompts are the ones starting ``write``)."""
    if prompt.startswith("write "):
        return GlyphTask.template(prompt)
    return CompositionalTask.template(prompt)
