"""Run observability: metrics.jsonl + TensorBoard, the timeline, progress display, plots and summary."""
