"""Text-to-image RL: a tiny DiT (a ``diffusers`` class), synthetic tasks with programmatic rewards, Flow-GRPO."""
