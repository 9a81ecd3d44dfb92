"""The ``tasks[i].dataset`` section: a task made of dataset rows (prompts) and reward functions by path.

A dataset task is single-turn by default: each episode is one row; the policy answers its prompt once and
the reward functions score the answer. With ``tool_column``, a row that names a tool of ``tools`` is
multi-turn: the policy may call the tool (``rollarc.data.tools``) before it answers. The columns follow verl's layout by default (``prompt``,
``data_source``, ``reward_model.ground_truth``, ``extra_info``); a dotted column name reads a field
of a struct column. Every other column is passed, as it is, to TRL-style reward functions.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rollarc.config.io import FrozenModel

RewardStyle = Literal["auto", "trl", "verl"]
RewardPlacement = Literal["local", "serverless"]
HELDOUT_OPTION = "heldout"  # env.reset(options={HELDOUT_OPTION: True}) plays a held-out row
PLAIN_PROMPT = "plain_prompt"  # reset info key: render this conversation untemplated (rollarc.agent.chat)


class RewardFunctionConfig(FrozenModel):
    """One reward function, named by import path (``plugin_paths`` puts its directory on the path)."""

    function: str = Field(
        ...,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="'package.module:function', e.g. 'rollarc.data.math_reward:accuracy'",
    )
    weight: float = Field(1.0, description="the episode reward is the sum of weight x score over the functions")
    style: RewardStyle = Field(
        "auto",
        description="`trl`: f(prompts, completions, **columns) -> list[float], called with lists of one; "
        "`verl`: compute_score(data_source, solution_str, ground_truth, extra_info) -> float (or a dict with "
        "'score'); `auto`: told apart by the parameter names (completions vs solution_str)",
    )
    kwargs: dict[str, Any] = Field(
        {},
        description="keyword arguments bound to the function on every call, like functools.partial (they take "
        "precedence over a dataset column of the same name), e.g. {ground_truth_column: answer} for "
        "rollarc.data.math_reward:accuracy on a dataset whose answer column is `answer`",
    )


class ToolConfig(FrozenModel):
    """One tool with options: the function, keyword arguments bound to it, and its JSON schema."""

    function: str = Field(
        ..., pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="'package.module:function' returning text"
    )
    kwargs: dict[str, Any] = Field(
        {},
        description="keyword arguments bound to the function on every call, like functools.partial (left out "
        "of its schema), e.g. {wall_s: 5, session: true} for rollarc.data.sandbox:python",
    )
    parameters: dict[str, Any] | None = Field(
        None,
        description="the JSON schema of the call's arguments (OpenAI function `parameters`) passed to the chat "
        "template; null: read from the function's type hints and docstring (transformers' get_json_schema)",
    )


class DatasetConfig(FrozenModel):
    """Where the rows come from, which columns mean what, and how an answer is rewarded."""

    path: str | None = Field(
        None,
        description="a .jsonl/.json or .parquet file or a glob of them (one split, `train`); a directory "
        "written by datasets' save_to_disk (it holds dataset_dict.json or state.json: its splits); or a "
        "directory of .jsonl/.json/.parquet shards, split by file name as datasets does (train-*.parquet, "
        "test.jsonl, ...; no split name: all `train`); relative paths are relative to where rollarc runs",
    )
    files: dict[str, str | list[str]] = Field(
        {},
        description="split name -> a file, a glob, or a list of files/globs, e.g. {train: data/train-*.parquet, "
        "test: [a.jsonl, b.jsonl]} (instead of `path`); the files of a split share one format",
    )
    train_split: str = Field("train", description="the split training and SFT demonstrations draw rows from")
    heldout_split: str = Field(
        "test",
        description="the split held-out evaluation draws rows from; when the data has no such split, it is "
        "cut from train_split by a seeded split (heldout_fraction, split_seed)",
    )
    heldout_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="share of train_split held out when heldout_split is not in the data"
    )
    split_seed: int = Field(0, description="seed of the held-out cut and of the order training visits rows in")
    prompt_column: str = Field(
        "prompt", description="the prompt: a string, or chat messages (a list of {role, content})"
    )
    template_plain_prompts: bool = Field(
        False,
        description="false (TRL's way): a plain-text prompt goes to the model as it is, untemplated; true: it "
        "is rendered as a user message by the tokenizer's chat template (after system_prompt). Chat-message "
        "prompts always get the chat template",
    )
    system_prompt: str = Field(
        "",
        description="a system message put before plain-text prompts when template_plain_prompts is true "
        "(chat-message prompts bring their own)",
    )
    ground_truth_column: str | None = Field(
        "reward_model.ground_truth",
        description="the reference answer passed to verl-style functions as ground_truth (null: none); "
        "TRL-style functions get every column under its own name instead",
    )
    data_source_column: str | None = Field(
        "data_source", description="passed to verl-style functions as data_source (null: pass None)"
    )
    extra_info_column: str | None = Field(
        "extra_info", description="passed to verl-style functions as extra_info (null, or absent column: None)"
    )
    reference_column: str | None = Field(
        None,
        description="a reference completion per row, the SFT warm start's demonstration, or a list of replies, "
        "one per turn (e.g. a tool call, then the answer after its result); null: no expert, so set model.path "
        "or sft.steps: 0",
    )
    reward: list[RewardFunctionConfig] = Field(
        ..., min_length=1, description="the reward functions; the first one also decides success"
    )
    reward_placement: RewardPlacement = Field(
        "local",
        description="`local`: the reward functions run inside the env workers; `serverless`: they run in an "
        "autoscaled Ray Serve deployment (sized by reward.autoscaling, placed on cluster.roles.reward, "
        "retried as reward.timeout_s/max_retries/retry_backoff_s say) that the env workers call",
    )
    success_threshold: float = Field(
        1.0, description="an episode is a success when the first reward function scores at least this"
    )
    tool_column: str | None = Field(
        None,
        description="a column naming the tool (a key of `tools`) a row may call, or (tool_format other than "
        "`tag`) a list of them; a row whose value is null or empty is single-turn (null: every row is)",
    )
    tools: dict[str, ToolConfig] = Field(
        {},
        description="tool name -> 'package.module:function' returning text, or {function, kwargs, parameters}, "
        "e.g. {calculator: 'rollarc.data.tools:calculator', python: 'rollarc.data.sandbox:python'}; called "
        "with the call's text (tool_format `tag`) or its arguments as keywords (other formats)",
    )
    tool_format: str = Field(
        "tag",
        pattern=r"^(tag|hermes|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$",
        description="how the model calls tools: `tag` (<tool>ARG</tool> calls the row's one tool, the result "
        'comes back as <result>OUTPUT</result>); `hermes` (Qwen/Hermes <tool_call>{"name": ..., '
        '"arguments": {...}}</tool_call>, several per reply, results as tool-role messages, the tools\' '
        "schemas passed to the chat template); or a parser 'package.module:function' (reply -> list of "
        "rollarc.data.tool_calls.ToolCall)",
    )
    max_tool_calls: int = Field(
        4,
        ge=1,
        le=100,
        description="tool calls at most per episode; the reply after the last allowed call is the answer "
        "(agent.max_turns must leave room: calls + 1)",
    )
    max_malformed_fraction: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        description="malformed rows (a prompt that is not text or messages, a missing ground truth or "
        "reference) are skipped and counted; more than this share of a split stops the run at start-up",
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_paths(cls, tools: Any) -> Any:
        """A tool given as its path alone is a tool with no options."""
        if isinstance(tools, dict):
            return {name: {"function": spec} if isinstance(spec, str) else spec for name, spec in tools.items()}
        return tools

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        if (self.path is None) == (not self.files):
            raise ValueError("give exactly one of dataset.path (a file or a saved dataset directory) or dataset.files")
        if self.tools and self.tool_column is None:
            raise ValueError("dataset.tools needs dataset.tool_column: the column that names each row's tool")
        if self.system_prompt and not self.template_plain_prompts:
            raise ValueError(
                "dataset.system_prompt applies to plain-text prompts only when they are templated; set "
                "dataset.template_plain_prompts: true, or put the system message in chat-message prompts"
            )
        if self.train_split == self.heldout_split:
            raise ValueError(f"dataset.heldout_split must differ from train_split ({self.train_split!r})")
        return self
