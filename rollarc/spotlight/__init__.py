"""Spotlight: seed exploration on stale weights, contrastive group selection, and the contrast planner (pure parts)."""
