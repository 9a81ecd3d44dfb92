"""Text environments on the gymnasium API (Sokoban, FrozenLake, Countdown), their registry and the
env-latency model. Any gymnasium env with ``Text`` observation and action spaces plugs in by import path.
"""

from rollarc.envs.base import CHARSET, GenerationFailed, Outcome, TextEnv, TextEnvConfig
from rollarc.envs.countdown import CountdownConfig, CountdownEnv
from rollarc.envs.demonstration import ExpertEpisode, play_expert
from rollarc.envs.frozen_lake import FrozenLakeConfig, FrozenLakeEnv
from rollarc.envs.grid_moves import Move, parse_move
from rollarc.envs.latency import PRESETS as LATENCY_PRESETS
from rollarc.envs.latency import LatencyConfig, LatencyModel
from rollarc.envs.registry import (
    EnvLoadError,
    EnvSpec,
    expert_action,
    instructions,
    make_env,
    register,
    registered_ids,
)
from rollarc.envs.safe_arith import ArithError, Evaluation, evaluate
from rollarc.envs.sokoban import SokobanConfig, SokobanEnv

__all__ = [
    "CHARSET",
    "LATENCY_PRESETS",
    "ArithError",
    "CountdownConfig",
    "CountdownEnv",
    "EnvLoadError",
    "EnvSpec",
    "Evaluation",
    "ExpertEpisode",
    "FrozenLakeConfig",
    "FrozenLakeEnv",
    "GenerationFailed",
    "LatencyConfig",
    "LatencyModel",
    "Move",
    "Outcome",
    "SokobanConfig",
    "SokobanEnv",
    "TextEnv",
    "TextEnvConfig",
    "evaluate",
    "expert_action",
    "instructions",
    "make_env",
    "parse_move",
    "play_expert",
    "register",
    "registered_ids",
]
