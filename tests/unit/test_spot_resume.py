"""In-flight commit on the real DiT: a sample committed mid-way and resumed elsewhere is the same image."""

import pickle

import pytest
import torch

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.resumable import advance, finish, prepare, start
from rollarc.diffusion.sampling import sample_sde

VOCAB = ["one", "red", "square", "left", "two", "blue"]
PROMPTS = ["one red square left", "two blue square left", "one blue square left"]
SEEDS = [11, 12, 13]


def tiny(seed: int = 0):
    return build_policy(VOCAB, 16, 16, 1, 2, seed=seed).eval()


@pytest.mark.parametrize("cut", [0, 1, 3, 5])
def test_resume_from_committed_latent_is_bitwise_the_uninterrupted_run(cut):
    """Worker A runs ``cut`` steps and commits (pickled, as it travels); worker B, its own copy of the weights, finishes."""
    worker_a, worker_b = tiny(), tiny()
    whole = sample_sde(worker_a, PROMPTS, SEEDS, 6, 0.7, version=3)
    committed = pickle.dumps(advance(worker_a, start(worker_a, PROMPTS, SEEDS, 6, 0.7, 3), cut))
    state = pickle.loads(committed)
    assert state.step == cut and len(state.states) == cut + 1 and len(state.logps) == cut
    resumed = finish(advance(worker_b, state, 6))
    assert torch.equal(resumed.states, whole.states) and torch.equal(resumed.logps, whole.logps)
    assert resumed.version == 3 and resumed.seeds == SEEDS


def test_resume_under_other_weights_differs_and_unfinished_state_is_refused():
    """The check can fail: the same commit finished by a worker on other weights is another image."""
    a, other = tiny(0), tiny(1)
    whole = sample_sde(a, PROMPTS, SEEDS, 4, 0.7, version=0)
    state = advance(a, start(a, PROMPTS, SEEDS, 4, 0.7, 0), 2)
    with pytest.raises(ValueError, match="at step 2 of 4"):
        finish(state)
    assert not torch.equal(finish(advance(other, state, 4)).states, whole.states)


def test_one_step_at_a_time_with_one_preparation_is_bitwise_the_uninterrupted_run():
    """A spot worker prepares a job once (noise, grid, context) and advances it step by step; a resuming worker
    prepares its own. Both give the image ``sample_sde`` gives in one call."""
    worker_a, worker_b = tiny(), tiny()
    whole = sample_sde(worker_a, PROMPTS, SEEDS, 6, 0.7, version=1)
    state = start(worker_a, PROMPTS, SEEDS, 6, 0.7, 1)
    ready = prepare(worker_a, state)
    for _ in range(3):
        advance(worker_a, state, 1, ready)
    state = pickle.loads(pickle.dumps(state))  # committed on a notice; the preparation stays behind
    ready_b = prepare(worker_b, state)
    while not state.finished:
        advance(worker_b, state, 1, ready_b)
    out = finish(state)
    assert torch.equal(out.states, whole.states) and torch.equal(out.logps, whole.logps)
