"""The config layer and the router import without torch or transformers (rollarc.lazy_exports says why).

Each check runs in a fresh interpreter: this one has long imported torch."""

from __future__ import annotations

import subprocess
import sys

import pytest


def heavy_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(' '.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()


@pytest.mark.parametrize(
    "statement",
    [
        "import rollarc.config",
        "import rollarc.runtime.router",  # answers its first call sooner (registering replicas: workers.py says)  # every config section, the algo's LossConfig and the model size presets among them
        "from rollarc.engine import Completion, EngineDeadError, SamplingParams",
        "from rollarc.models import PRESETS",
    ],
)
def test_light_modules_load_neither_torch_nor_transformers(statement):
    assert heavy_after(statement) == []


def test_a_lazy_name_is_the_name_even_after_its_submodule_was_imported():
    from rollarc import algo, engine, models
    from rollarc.algo.minibatch_loss import policy_loss
    from rollarc.engine.engine import LLMEngine
    from rollarc.models.checkpoint import load_policy

    assert (algo.policy_loss, engine.LLMEngine, models.load_policy) == (policy_loss, LLMEngine, load_policy)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = algo.nope  # type: ignore[attr-defined]
