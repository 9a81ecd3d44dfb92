"""The DiT's weights reach samplers through rollarc.sync: bit-exact, deltas when one version behind, full otherwise."""

import torch

from rollarc.diffusion.model import build_policy
from rollarc.diffusion.weight_sync import DiTReceiver, dit_publisher
from rollarc.diffusion.workers import load_weights
from rollarc.sync.versions import WHOLE

VOCAB = ["a", "red", "blue", "square", "circle"]


def _policy():
    return build_policy(VOCAB, 16, 16, 1, 2, seed=0).eval()


def _train_step(policy, opt, seed):
    """One real AdamW step on a random objective: nearly every fp32 weight changes."""
    g = torch.Generator().manual_seed(seed)
    loss = sum((p * torch.randn(p.shape, generator=g)).sum() for p in policy.transformer.parameters())
    opt.zero_grad()
    loss.backward()
    opt.step()


def _bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name].view(torch.uint8), b[name].contiguous().view(torch.uint8)), name


def test_sampler_equals_trainer_bitwise_after_each_delta_and_a_replacement_catches_up_with_a_full_copy():
    trainer, sampler = _policy(), _policy()
    opt = torch.optim.AdamW(trainer.transformer.parameters(), lr=1e-2, weight_decay=0.0)
    publisher = dit_publisher(trainer.transformer.state_dict(), 0)
    receiver = DiTReceiver(sampler.transformer.state_dict(), 0)
    fetched = []

    def fetch(have):
        fetched.append(have)
        return publisher.fetch(WHOLE, have)

    full_bytes = publisher.full_nbytes(WHOLE)
    for version in (1, 2, 3):
        _train_step(trainer, opt, version)
        publisher.publish(trainer.transformer.state_dict(), version)
        got = receiver.sync(publisher.latest(WHOLE), fetch)
        load_weights(sampler, receiver.state)
        assert (got.version, got.full) == (version, False)  # a delta: the sampler held the version before
        assert got.nbytes > 0
        _bitwise_equal(sampler.transformer.state_dict(), trainer.transformer.state_dict())
    assert fetched == []  # every delta fitted: nothing was fetched

    # a spot replacement joins with the run's start weights (version 0): the newest delta does not fit
    replacement = _policy()
    joiner = DiTReceiver(replacement.transformer.state_dict(), 0)
    got = joiner.sync(publisher.latest(WHOLE), lambda have: publisher.fetch(WHOLE, None))
    load_weights(replacement, joiner.state)
    assert (got.version, got.full) == (3, True)
    assert got.nbytes == publisher.latest(WHOLE)[0].nbytes + full_bytes  # the refused delta, then the full copy
    _bitwise_equal(replacement.transformer.state_dict(), trainer.transformer.state_dict())


def test_a_receiver_two_versions_behind_and_a_damaged_base_each_catch_up_with_a_full_copy():
    trainer = _policy()
    opt = torch.optim.AdamW(trainer.transformer.parameters(), lr=1e-2, weight_decay=0.0)
    publisher = dit_publisher(trainer.transformer.state_dict(), 0)
    behind = DiTReceiver(_policy().transformer.state_dict(), 0)
    for version in (1, 2):
        _train_step(trainer, opt, version)
        publisher.publish(trainer.transformer.state_dict(), version)
    latest = publisher.latest(WHOLE)
    got = behind.sync(latest, lambda have: publisher.fetch(WHOLE, have))
    # the chain 0->1->2 is kept (history 2), but two dense fp32 deltas cost more than one full copy
    assert 2 * latest[0].nbytes > publisher.full_nbytes(WHOLE)
    assert (got.version, got.full) == (2, True)
    assert got.nbytes == latest[0].nbytes + publisher.full_nbytes(WHOLE)
    _bitwise_equal(behind.state, trainer.transformer.state_dict())

    # a receiver at version 1 whose weights are not version 1's: the delta's base checksum refuses it
    damaged_policy = _policy()
    damaged = DiTReceiver(damaged_policy.transformer.state_dict(), 1)
    got = damaged.sync(latest, lambda have: publisher.fetch(WHOLE, have))
    assert (got.version, got.full) == (2, True)
    assert got.nbytes == latest[0].nbytes + publisher.full_nbytes(WHOLE)
    _bitwise_equal(damaged.state, trainer.transformer.state_dict())
