"""`DatasetEnv`: a dataset of prompts as a gymnasium text env (single-turn, or multi-turn with a tool), so the whole runtime applies unchanged.

Why an env: routing, asynchrony, redundancy, failure accounting, held-out evaluation and the SFT warm
start all run on gymnasium text envs; a dataset task that is one makes each of them work for datasets
with no second code path.

* ``reset(seed=s)`` plays row ``s mod n`` of the training split (visited in a seeded shuffled order);
  ``reset(seed=s, options={"heldout": True})`` plays a row of the held-out split (the runtime passes
  that for held-out evaluation of dataset tasks). The observation is the prompt; a chat-message
  prompt also comes whole in ``info["messages"]``, which the agent loop renders instead of one user turn.
  A plain-text prompt carries ``info["plain_prompt"] = True`` unless ``template_plain_prompts``: the agent
  loop then gives the model the conversation's text as it is (no chat template), as TRL does.
* ``step(answer)`` scores the answer with every reward function and ends the episode: the reward is
  the weighted sum of the scores, ``success`` is the first function's score reaching
  ``success_threshold``, and ``info["scores"]`` holds each function's score.
* ``expert_action()`` is the row's reference completion (``reference_column``), the SFT demonstration.
* A row that names a tool (``tool_column``, one of ``tools``) is multi-turn: a reply holding
  ``<tool>ARG</tool>`` calls it and gets ``<result>OUTPUT</result>`` as the next observation, with reward
  0 and ``info["tool_call"]`` set, up to ``max_tool_calls`` calls; the first reply without a call (or the
  one after the last allowed call) is the answer. A row naming a tool that ``tools`` lacks stops start-up.

With ``reward_placement: serverless`` the functions are still imported here (to check them and to read
their styles) but run in a Ray Serve deployment (:mod:`rollarc.data.reward_deployment`) that ``step``
calls through :class:`~rollarc.data.served_client.ServedRewards`; the rewards are bitwise the same.

A reward function that raises or returns a non-number (run here or served), or a served call that
times out or runs out of retries, raises :class:`RewardFunctionError` from ``step``; the env worker
fails that trajectory alone and counts it (``env_step_error:RewardFunctionError``). Observations are the dataset's text, which may hold
characters outside the ``Text`` space's charset (gymnasium does not check them).
"""

from __future__ import annotations

from typing import Any

import gymnasium
from gymnasium.spaces import Text

from rollarc.configio import validate
from rollarc.data.config import HELDOUT_OPTION, PLAIN_PROMPT, DatasetConfig
from rollarc.data.reward_fn import Answer, check_call, load_reward_function
from rollarc.data.served_client import ServedRewards
from rollarc.data.table import column, load_table
from rollarc.data.tools import Tool, ToolLoadError, load_tool, result_text, tool_call
from rollarc.envs.base import CHARSET

MAX_TEXT = 1 << 20


class DatasetEnv(gymnasium.Env[str, str]):
    """One row per episode, one answer per row; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, **kwargs: Any) -> None:
        self.config = validate(DatasetConfig, kwargs, source="dataset")
        self.functions = [load_reward_function(spec) for spec in self.config.reward]
        self.table = load_table(self.config, needs_ground_truth=any(f.style == "verl" for f in self.functions))
        for function in self.functions:
            check_call(function, self.table.splits[self.config.train_split].column_names)
        self.instructions = "" if self.table.conversational else self.config.system_prompt
        self.observation_space = Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.tools = {name: load_tool(name, path) for name, path in self.config.tools.items()}
        self._check_row_tools()
        self.served: ServedRewards | None = None  # connected at the first answer: start-up checks build this env too
        self._row: dict[str, Any] | None = None
        self._tool: Tool | None = None
        self._calls = 0
        self._turn = 0

    def _check_row_tools(self) -> None:
        """Every tool a row names must be in ``tools``: a misspelt one would silently make rows single-turn."""
        if self.config.tool_column is None:
            return
        named = {column(row, self.config.tool_column) for rows in self.table.splits.values() for row in rows} - {
            None,
            "",
        }
        unknown = sorted(str(n) for n in named if n not in self.tools)
        if unknown:
            raise ToolLoadError(
                f"dataset rows name tools {unknown[:5]} (column {self.config.tool_column!r}) that dataset.tools "
                f"does not define; it has {sorted(self.tools) or 'none'}"
            )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        cfg = self.config
        split = cfg.heldout_split if (options or {}).get(HELDOUT_OPTION, False) else cfg.train_split
        rows = self.table.splits[split]
        index = (seed if seed is not None else int(self.np_random.integers(len(rows)))) % len(rows)
        self._row = rows[index]
        prompt = column(self._row, cfg.prompt_column)
        name = column(self._row, cfg.tool_column) if cfg.tool_column else None
        self._tool = self.tools[name] if name else None
        self._calls = self._turn = 0
        info: dict[str, Any] = {"turn": 0, "split": split, "row": index}
        if isinstance(prompt, list):
            info["messages"] = [{"role": m["role"], "content": m["content"]} for m in prompt]
            users = [m["content"] for m in prompt if m["role"] == "user"]
            return (users[-1] if users else prompt[-1]["content"]), info
        if not cfg.template_plain_prompts:
            info[PLAIN_PROMPT] = True
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._row is None:
            raise RuntimeError("DatasetEnv.step() called before reset() or after the episode ended")
        if not isinstance(action, str):
            raise TypeError(f"DatasetEnv.step() takes the answer text (str), got {type(action).__name__}")
        cfg = self.config
        self._turn += 1
        argument = tool_call(action) if self._tool is not None and self._calls < cfg.max_tool_calls else None
        if self._tool is not None and argument is not None:
            self._calls += 1
            output = self._tool.call(argument)
            info = {"turn": self._turn, "invalid_action": False, "tool_call": self._tool.name}
            return result_text(output), 0.0, False, False, info
        row, self._row = self._row, None
        answer = Answer(
            prompt=column(row, cfg.prompt_column),
            completion=action,
            columns=row,
            data_source=column(row, cfg.data_source_column) if cfg.data_source_column else None,
            ground_truth=column(row, cfg.ground_truth_column) if cfg.ground_truth_column else None,
            extra_info=column(row, cfg.extra_info_column) if cfg.extra_info_column else None,
        )
        if cfg.reward_placement == "serverless":
            scores = self._served().scores(answer)
        else:
            scores = [f.score(answer) for f in self.functions]
        reward = sum(f.weight * s for f, s in zip(self.functions, scores, strict=True) if s is not None)
        success = scores[0] is not None and scores[0] >= cfg.success_threshold
        info = {"turn": self._turn, "invalid_action": False, "success": success, "scores": scores}
        return "", float(reward), True, False, info

    def _served(self) -> ServedRewards:
        """The client of the served functions, connected once (the driver deployed them before env workers start)."""
        if self.served is None:
            from rollarc.data.reward_deployment import connect  # deferred: Ray Serve is heavy

            self.served = connect(self.config)
        return self.served

    def expert_action(self) -> str | None:
        """The current row's reference completion (None without ``reference_column`` or after the answer)."""
        if self._row is None or self.config.reference_column is None:
            return None
        reference = column(self._row, self.config.reference_column)
        return None if reference is None else str(reference)
