"""A DiT at a multiple of the tasks' 16×16 (``model.image_size: 32``): ground truth scaled up, rewards read
on block means, the config's checks, and a 32×32 policy's seeded sampling."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rollarc.config.io import ConfigError
from rollarc.diffusion.config import load_t2i_config
from rollarc.diffusion.model import build_policy
from rollarc.diffusion.sampling import sample_sde
from rollarc.diffusion.tasks.base import TASK_SIZE, to_task_size, upscale
from rollarc.diffusion.tasks.compositional import CompositionalTask
from rollarc.diffusion.workers import reward_table, score


def test_upscale_repeats_each_pixel_as_a_block_and_block_means_undo_it():
    image = np.arange(16 * 16 * 3, dtype=np.float32).reshape(16, 16, 3) / 768
    big = upscale(image, 32)
    assert big.shape == (32, 32, 3)
    assert (big[2:4, 6:8] == image[1, 3]).all() and (big[31, 31] == image[15, 15]).all()
    assert np.array_equal(to_task_size(big[None])[0], image)
    assert np.array_equal(to_task_size(image[None]), image[None])  # 16×16 is left as it is
    block = np.zeros((1, 32, 32, 3), dtype=np.float32)
    block[0, 0, 1] = block[0, 1, 0] = 1.0  # two of the four pixels of the top-left block lit
    assert to_task_size(block)[0, 0, 0].tolist() == [0.5, 0.5, 0.5] and to_task_size(block)[0, 0, 1].sum() == 0
    with pytest.raises(ValueError, match="not a multiple of the tasks' 16"):
        upscale(image, 24)


def test_scaled_up_ground_truth_scores_as_the_original():
    task = CompositionalTask()
    prompts = ["two red squares left and one blue plus right", "one green plus left"]
    small = np.stack([task.render(p, random.Random(0)) for p in prompts])
    big = np.stack([upscale(x, 32) for x in small])
    table = reward_table([task])
    assert score(table, prompts, big) == score(table, prompts, small) == [1.0, 1.0]


def test_image_size_must_be_a_multiple_of_the_tasks_size():
    cfg = load_t2i_config("configs/t2i_bench.yaml")
    assert cfg.model.image_size == 2 * TASK_SIZE
    with pytest.raises(ConfigError, match=r"model.image_size 24: the tasks render 16×16 images; use a multiple of 16"):
        load_t2i_config("configs/t2i_bench.yaml", ["model.image_size=24"])
    with pytest.raises(ConfigError, match=r"must divide model.heads 4 and the 256 image tokens"):
        load_t2i_config("configs/t2i_bench.yaml", ["cluster.sp_degree=3"])


def test_a_32_pixel_policy_samples_256_tokens_repeatably():
    policy = build_policy(["one", "red", "square", "left"], 32, 16, 1, 2, seed=0).eval()
    assert policy.image_size == 32
    a = sample_sde(policy, ["one red square left"], [7], 2, 0.7, version=0)
    b = sample_sde(policy, ["one red square left"], [7], 2, 0.7, version=0)
    assert a.states.shape == (1, 3, 3, 32, 32) and torch.equal(a.states, b.states)
    assert a.images().shape == (1, 32, 32, 3)
