"""FSDP2 training on two CPU ranks (gloo) gives the one-rank step; the work split loses and duplicates no row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.agent.trajectory import Segment, Trajectory
from rollarc.algo.config import LossConfig
from rollarc.algo.masking import aggregate
from rollarc.models import new_policy
from rollarc.train.batch import build_batch
from rollarc.train.fsdp import free_port, init_process_group
from rollarc.train.fsdp_split import balanced_partition, part_costs
from rollarc.train.policy_trainer import NonFiniteError, PolicyTrainer

# Each scenario: loss settings and trainer settings. Together they exercise token- and sequence-mean
# normalisers, the proximal and the reference log-prob passes, duplicate rows, several micro-batches per rank
# (uneven counts, so padding passes) and several minibatches.
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "token_mean_decoupled_kl": (
        {"correction": "decoupled_ppo", "kl_coef": 0.1, "entropy_coef": 0.01},
        {"micro_batch_tokens": 44, "dedup": True},
    ),
    "seq_mean_two_minibatches": (
        {"agg": "seq_mean", "correction": "tis"},
        {"micro_batch_tokens": 64, "dedup": False, "minibatches": 2},
    ),
}
# SGD with lr 1 makes the update the gradient itself: parameters then differ by exactly the gradient's rounding.
# Two ranks add the same per-token terms in another order (each rank sums its rows, then FSDP sums the ranks),
# so float32 gradients agree to a few ulps of their magnitude (< 1e-3 here), i.e. about 1e-7; 1e-6 leaves room.
# Adam is avoided on purpose: its first step is about lr * sign(grad), which turns rounding of a near-zero
# gradient into a whole step.
ATOL = 1e-6


def make_traj(renderer: ChatRenderer, traj_id: str, prompt: str, action: str, reward: float) -> Trajectory:
    seg = Segment()
    seg.extend_context(renderer.prompt_ids([Message("user", prompt)]))
    reply = renderer.encode_reply(action)
    seg.extend_generated(reply, [-1.0 - 0.1 * i for i in range(len(reply))], [0] * len(reply))
    return Trajectory(traj_id=traj_id, task="t", seed=0, segments=[seg], reward=reward)


def make_groups(renderer: ChatRenderer) -> list[list[Trajectory]]:
    """Three groups of different prompt lengths; group 0 holds duplicate rows (same tokens, other rewards)."""
    spec = [
        ("PFH\nFFG", [("R", 1.0), ("R", 0.0), ("D", 0.5), ("R", 1.0)]),
        ("PFFFH\nFFFFG\nHHFF", [("U", 1.0), ("LLD", 0.0), ("R", 0.2)]),
        ("PG", [("D", 0.0), ("RRRR", 1.0), ("U", 0.3), ("L", 0.9)]),
    ]
    return [
        [make_traj(renderer, f"g{g}t{i}", prompt, a, r) for i, (a, r) in enumerate(acts)]
        for g, (prompt, acts) in enumerate(spec)
    ]


def train_once(loss: dict[str, Any], opts: dict[str, Any], sharded: bool) -> tuple[dict[str, torch.Tensor], dict]:
    model, tok = new_policy("nano", max_position_embeddings=64, seed=3)
    groups = make_groups(ChatRenderer(tok))
    kwargs = dict(pad_id=tok.pad_token_id, seed=5, **opts)
    if sharded:
        from rollarc.train.fsdp_trainer import ShardedPolicyTrainer

        trainer: PolicyTrainer = ShardedPolicyTrainer(model, LossConfig(**loss), 1e-2, **kwargs)
    else:
        trainer = PolicyTrainer(model, LossConfig(**loss), 1e-2, **kwargs)
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    stats = trainer.train_step(groups)
    return trainer.named_weights(), stats


def rank_main(rank: int, world_size: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    init_process_group(rank, world_size, "127.0.0.1", port, torch.device("cpu"))
    try:
        results = {name: train_once(loss, opts, sharded=True) for name, (loss, opts) in SCENARIOS.items()}
        results["nan"] = nan_step_is_refused_on_every_rank()
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def nan_step_is_refused_on_every_rank() -> tuple[str, bool]:
    """A NaN weight in one rank's forward pass: every rank refuses the step (none hangs in a collective)."""
    from rollarc.train.fsdp_trainer import ShardedPolicyTrainer

    model, tok = new_policy("nano", max_position_embeddings=64, seed=3)
    trainer = ShardedPolicyTrainer(model, LossConfig(), 1e-2, pad_id=tok.pad_token_id)
    before = {k: v.clone() for k, v in trainer.named_weights().items()}
    groups = make_groups(ChatRenderer(tok))
    groups[0][0].segments[0].logprobs[-1] = float("nan")  # a NaN behaviour log-prob: the loss of its rank is NaN
    try:
        trainer.train_step(groups)
    except NonFiniteError as err:
        after = trainer.named_weights()
        return str(err), all(torch.equal(before[k], after[k]) for k in before)
    return "no error", False


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fsdp") / "rank0.pt"
    mp.spawn(rank_main, args=(2, free_port(), str(out)), nprocs=2, join=True)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_ranks_give_the_one_rank_step(two_rank_results, name):
    loss, opts = SCENARIOS[name]
    plain_weights, plain_stats = train_once(loss, opts, sharded=False)
    weights, stats = two_rank_results[name]
    assert weights.keys() == plain_weights.keys()
    initial, _ = new_policy("nano", max_position_embeddings=64, seed=3)
    moved = 0
    for key, value in plain_weights.items():
        assert weights[key].dtype == value.dtype and weights[key].shape == value.shape, key
        torch.testing.assert_close(weights[key], value, atol=ATOL, rtol=0, msg=key)
        moved += int(not torch.equal(value, initial.state_dict()[key]))
    assert moved == len(plain_weights)  # the step changed every tensor: the comparison is not vacuous
    assert stats["rows"] == plain_stats["rows"] and stats["optimizer_steps"] == plain_stats["optimizer_steps"]
    for key in ("loss", "pg_loss", "grad_norm", "unique_rows_frac"):
        assert stats[key] == pytest.approx(plain_stats[key], abs=1e-5), key


def test_the_first_scenario_runs_padding_passes():
    """Rank 0 has 3 micro-batches of the whole batch and rank 1 has 2: rank 1 must run one padding pass."""
    model, tok = new_policy("nano", max_position_embeddings=64, seed=3)
    loss, opts = SCENARIOS["token_mean_decoupled_kl"]
    trainer = PolicyTrainer(model, LossConfig(**loss), 1e-2, pad_id=tok.pad_token_id, **opts)
    batch = build_batch(make_groups(ChatRenderer(tok)), "grpo", 1e-6, tok.pad_token_id)
    reps, _ = trainer._unique_rows(batch)
    assert len(reps) < batch.num_rows  # duplicate rows: dedup is exercised
    parts = balanced_partition(batch.attention_mask[reps].sum(dim=1).tolist(), 2)
    counts = [len(trainer._micro_batches(batch, reps[torch.tensor(part)])) for part in parts]
    assert counts == [3, 2]


def test_a_non_finite_loss_on_one_rank_refuses_the_step_on_all(two_rank_results):
    message, unchanged = two_rank_results["nan"]
    assert "the step is refused" in message and unchanged


def test_partition_of_a_hand_case():
    # longest first: 9 -> part 0, 7 -> part 1, 5 -> part 1 (7 < 9), 3 -> part 0 (9 < 12), 1 -> part 0 (12 = 12: lower)
    assert balanced_partition([3, 9, 1, 5, 7], 2) == [[0, 1, 2], [3, 4]]
    assert part_costs([3, 9, 1, 5, 7], [[0, 1, 2], [3, 4]]) == [13, 12]
    assert balanced_partition([4], 3) == [[0], [], []]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), max_size=40), st.integers(1, 8))
def test_partition_covers_every_row_once_and_is_balanced(costs, parts):
    partition = balanced_partition(costs, parts)
    assert len(partition) == parts
    assert sorted(i for part in partition for i in part) == list(range(len(costs)))
    loads = part_costs(costs, partition)
    assert max(loads) <= sum(costs) / parts + max(costs, default=0)  # greedy bound
    assert max(loads) - min(loads) <= max(costs, default=0)
    assert balanced_partition(costs, parts) == partition  # deterministic: every rank computes the same


@pytest.mark.parametrize("agg, whole", [("token_mean", 21 / 6), ("seq_mean", (1.5 + 3 + 5) / 3)])
def test_rank_shares_weighted_by_the_whole_minibatch_normaliser_add_up(agg, whole):
    """Hand case: per-token losses of 3 rows split over 2 ranks. Each rank weighs its own aggregate by its
    share of the whole minibatch normaliser (tokens: 5/6 and 1/6; rows with tokens: 2/3 and 1/3), as the
    trainer does per micro-batch; the shares add up to the one-rank loss."""
    values = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]).bool()
    assert aggregate(values, mask, agg).item() == pytest.approx(whole)
    total_tokens, total_rows = mask.sum().item(), (mask.sum(dim=1) > 0).sum().item()
    assert (total_tokens, total_rows) == (6, 3)
    parts = [torch.tensor([0, 2]), torch.tensor([1])]
    shares = []
    for rows in parts:
        part_mask = mask[rows]
        if agg == "token_mean":
            weight = part_mask.sum().item() / total_tokens
        else:
            weight = (part_mask.sum(dim=1) > 0).sum().item() / total_rows
        shares.append(aggregate(values[rows], part_mask, agg).item() * weight)
    expected = [18 / 5 * 5 / 6, 3 * 1 / 6] if agg == "token_mean" else [(1.5 + 5) / 2 * 2 / 3, 3 * 1 / 3]
    assert shares == pytest.approx(expected)
    assert sum(shares) == pytest.approx(whole)


def test_fsdp_device_check_runs_on_the_cpu(tmp_path: Path):
    """scripts/device_check_fsdp.py: one sharded step (world size 1, gloo) matches the plain step."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "device_check_fsdp.py"
    spec = importlib.util.spec_from_file_location("device_check_fsdp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(device="cpu", preset="nano")
    assert result["ok"] and result["loss_finite"] and result["max_abs_param_diff"] <= result["tolerance"] == 1e-6
    assert result["tensors_moved"] == result["tensors"]  # the step changed every tensor: the check is not vacuous
    assert not dist.is_initialized()  # the check leaves no process group behind
