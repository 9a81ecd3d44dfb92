"""Synthetic text-to-image tasks: each a prompt sampler, a held-out split, a renderer and a reward."""
