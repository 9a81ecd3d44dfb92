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
* ``expert_action()`` is the row's reference completion (``reference_column``), the SFT demonstration; a
  list there is one reply per turn (e.g. a tool call, then the answer after its result).
* A row that names a tool (``tool_column``, one of ``tools``) is multi-turn: a reply holding
  ``<tool>ARG</tool>`` calls it and gets ``<result>OUTPUT</result>`` as the next observation, with reward
  0 and ``info["tool_call"]`` set, up to ``max_tool_calls`` calls; the first reply without a call (or the
  one after the last allowed call) is the answer. A row naming a tool that ``tools`` lacks stops start-up.
* With ``tool_format: hermes`` (or a parser by path) a row names one tool or a list of them; ``reset``
  puts their JSON schemas in ``info["tools"]`` (the agent loop passes them to the chat template), and a
  reply's calls, all run in order, come back as ``info["messages"]``: one ``tool``-role message each. A
  malformed call or an unknown tool gets ``error: ...`` as its result (counted in ``info["tool_errors"]``
  and as an invalid action); the trajectory goes on. Calls past ``max_tool_calls`` get an error too.

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

from rollarc.config.io import validate
from rollarc.data.config import HELDOUT_OPTION, PLAIN_PROMPT, DatasetConfig
from rollarc.data.reward_fn import Answer, check_call, load_reward_function
from rollarc.data.served_client import ServedRewards
from rollarc.data.table import column, load_table
from rollarc.data.tool_calls import ToolCall, load_parser
from rollarc.data.tools import Tool, ToolLoadError, load_tool, result_text
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
        self.tools = {name: load_tool(name, spec) for name, spec in self.config.tools.items()}
        self.parser = load_parser(self.config.tool_format)
        self._check_row_tools()
        self.served: ServedRewards | None = None  # connected at the first answer: start-up checks build this env too
        self._row: dict[str, Any] | None = None
        self._tools: dict[str, Tool] = {}  # the current row's
        self._state: dict[str, Any] = {}  # the episode's tool state (a tool taking `state` keeps what it needs)
        self._calls = 0
        self._turn = 0

    def _check_row_tools(self) -> None:
        """Every tool a row names must be in ``tools``: a misspelt one would silently make rows single-turn."""
        if self.config.tool_column is None:
            return
        named = {n for rows in self.table.splits.values() for row in rows for n in self._names(row)}
        unknown = sorted(str(n) for n in named if n not in self.tools)
        if unknown:
            raise ToolLoadError(
                f"dataset rows name tools {unknown[:5]} (column {self.config.tool_column!r}) that dataset.tools "
                f"does not define; it has {sorted(self.tools) or 'none'}"
            )

    def _names(self, row: dict[str, Any]) -> list[str]:
        """The tools ``row`` names: none, one (text), or (any format but `tag`) a list."""
        value = column(row, self.config.tool_column) if self.config.tool_column else None
        if value is None or value == "":
            return []
        if isinstance(value, list) and self.config.tool_format != "tag":
            return [str(v) for v in value]
        if not isinstance(value, str):
            raise ToolLoadError(
                f"dataset column {self.config.tool_column!r} holds {value!r}: give a tool name (or, with "
                "tool_format other than `tag`, a list of names)"
            )
        return [value]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        cfg = self.config
        split = cfg.heldout_split if (options or {}).get(HELDOUT_OPTION, False) else cfg.train_split
        rows = self.table.splits[split]
        index = (seed if seed is not None else int(self.np_random.integers(len(rows)))) % len(rows)
        self._row = rows[index]
        prompt = column(self._row, cfg.prompt_column)
        self._tools = {name: self.tools[name] for name in self._names(self._row)}
        self._state = {}
        self._calls = self._turn = 0
        info: dict[str, Any] = {"turn": 0, "split": split, "row": index}
        if self._tools and cfg.tool_format != "tag":
            info["tools"] = [tool.schema() for tool in self._tools.values()]
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
        calls = self.parser(action) if self._tools and self._calls < cfg.max_tool_calls else []
        if calls:
            return self._tool_turn(calls)
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

    def _tool_turn(self, calls: list[ToolCall]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run a reply's calls in order; each gets its output, or ``error: ...`` (malformed, unknown, over budget)."""
        outputs, names, errors = [], [], 0
        for call in calls:
            self._calls += 1
            name = call.name if call.name is not None or len(self._tools) != 1 else next(iter(self._tools))
            if call.error is not None:
                output = f"error: {call.error}"
            elif self._calls > self.config.max_tool_calls:
                output = f"error: no tool calls left (at most {self.config.max_tool_calls} per episode); answer now"
            elif name not in self._tools:
                output = f"error: unknown tool {name!r}; the tools are {sorted(self._tools)}"
            else:
                output = self._tools[name].call(call.arguments, state=self._state)
                names.append(name)
                outputs.append(output)
                continue
            errors += 1
            outputs.append(output)
        info: dict[str, Any] = {
            "turn": self._turn,
            "invalid_action": errors > 0,
            "tool_call": ",".join(names),
            "tool_calls": len(calls),
            "tool_errors": errors,
        }
        if self.config.tool_format == "tag":
            return result_text(outputs[0]), 0.0, False, False, info
        info["messages"] = [{"role": "tool", "content": output} for output in outputs]
        return "\n".join(outputs), 0.0, False, False, info

    def _served(self) -> ServedRewards:
        """The client of the served functions, connected once (the driver deployed them before env workers start)."""
        if self.served is None:
            from rollarc.data.reward_deployment import connect  # deferred: Ray Serve is heavy

            self.served = connect(self.config)
        return self.served

    def expert_action(self) -> str | None:
        """The current row's reference reply for this turn (None without ``reference_column``, after the answer,
        or past a list's last reply): a text is the one reply; a list holds one reply per turn, so a row can
        demonstrate a tool call first and the answer after its result."""
        if self._row is None or self.config.reference_column is None:
            return None
        reference = column(self._row, self.config.reference_column)
        if isinstance(reference, list):
            reference = reference[self._turn] if self._turn < len(reference) else None
        return None if reference is None else str(reference)
