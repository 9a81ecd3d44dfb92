"""ROSE: rollouts that borrow the idle capacity of an online serving deployment without breaking its SLO.

See docs/rose.md. ``trace``/``slo``/``latency_model``/``guard``/``harvest`` are pure; ``coserve`` drives two
engines on one worker; ``loadgen`` replays a trace.
"""
