"""Spotlight: seed exploration on stale weights, contrastive group selection, and a bandit planner (pure parts)."""
