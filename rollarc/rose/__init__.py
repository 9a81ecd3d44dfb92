"""ROSE: rollouts that borrow the idle capacity of an online serving deployment without breaking its SLO.

See docs/rose.md. ``trace``/``slo``/``latency_model``/``guard`` are pure; ``coserve`` drives two engines on one
worker. The actors that run them (``rollarc train``, ``rollarc bench rose``, ``rollarc loadgen``) are in
``rollarc.runtime``.
"""
