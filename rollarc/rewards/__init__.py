"""Rewards: rule-based (in-process) and model-based (a service: serverless Ray Serve, or a dedicated pool)."""
