"""OpenAI-compatible serving of rollarc's engine (``rollarc serve``) and the wire format rollouts use to call it."""
