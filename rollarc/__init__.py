"""rollarc: disaggregated, trajectory-asynchronous RL post-training of LLM agents on Ray."""

__version__ = "0.1.0"
