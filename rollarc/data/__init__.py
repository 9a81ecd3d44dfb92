"""Dataset tasks (JSONL / Parquet / saved ``datasets`` directories) and reward functions by import path.

Nothing here is imported by the rest of rollarc until a config names a dataset task (``datasets`` is heavy).
"""
