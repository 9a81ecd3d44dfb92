"""The t2i rewards on rendered ground truth: a perfect image scores high; empty, hazy or hacked ones score low."""

import random

import numpy as np
import pytest

from rollarc.diffusion.tasks.base import cleanliness, components, is_heldout, split
from rollarc.diffusion.tasks.compositional import CompositionalTask, parse
from rollarc.diffusion.tasks.digit_reader import train_reader
from rollarc.diffusion.tasks.font import render_digits
from rollarc.diffusion.tasks.glyph import GlyphTask
from rollarc.diffusion.tasks.registry import template_of

TASK = CompositionalTask()


def test_prompt_space_and_a_stable_split():
    prompts = TASK.prompts()
    assert len(prompts) == len(set(prompts)) == 176
    train, heldout = split(prompts)
    assert len(train) + len(heldout) == 176 and heldout and not set(train) & set(heldout)
    assert all(is_heldout(p) for p in heldout)
    assert all(sum(c.count for c in parse(p)) <= 3 for p in prompts)


@pytest.mark.parametrize(
    "prompt", ["one red square left", "two blue pluses right", "two green squares left and one yellow plus right"]
)
def test_ground_truth_scores_one(prompt):
    rng = random.Random(0)
    for _ in range(5):
        assert TASK.reward(prompt, TASK.render(prompt, rng)) == pytest.approx(1.0)


def test_empty_hazy_and_wrong_images_score_low():
    prompt = "two blue pluses right"
    image = TASK.render(prompt, random.Random(0))
    assert TASK.reward(prompt, np.zeros_like(image)) == 0.0
    assert TASK.reward(prompt, np.clip(image + 0.1, 0, 1)) < 0.4  # faint haze everywhere
    assert TASK.reward(prompt, np.clip(image + 0.04, 0, 1)) < 0.8  # haze too faint to count as drawn
    assert TASK.reward("two blue squares right", image) < 0.8  # the wrong shape
    assert TASK.reward("one blue plus right", image) < 0.8  # the wrong count
    assert TASK.reward("two blue pluses left", image) == 0.0  # the wrong side


def test_painting_the_whole_half_does_not_pay():
    image = np.zeros((16, 16, 3), dtype=np.float32)
    image[:, :8, 0] = 1.0
    assert TASK.reward("one red square left", image) < 0.4


def test_components_and_cleanliness_by_hand():
    mask = np.zeros((5, 5), dtype=bool)
    mask[0, 0:2] = True
    mask[3:5, 3:5] = True
    blobs = components(mask)
    assert [(b.area, b.box) for b in blobs] == [(2, (0, 0, 0, 1)), (4, (3, 3, 4, 4))]
    assert blobs[1].fill == 1.0
    image = np.zeros((10, 10, 3), dtype=np.float32)
    image[0, 0] = 0.5  # 1 stray drawn pixel of 100, mean stray level 0.5/100
    expected = np.zeros((10, 10), dtype=bool)
    assert cleanliness(image, expected) == pytest.approx((1 - 0.01 / 0.10) * (1 - 0.005 / 0.15))


def test_glyph_reward_reads_the_digits():
    task = GlyphTask(train_reader(steps=150, seed=0))
    rng = random.Random(1)
    right = [task.reward(p, task.render(p, rng)) for p in ["write 4 7", "write 0 3", "write 9 1"]]
    wrong = task.reward("write 4 7", render_digits((1, 2), rng))
    assert min(right) > 0.5 and wrong < 0.1
    assert task.reward("write 4 7", np.zeros((16, 16, 3), dtype=np.float32)) < 0.1
    hazy = np.clip(task.render("write 4 7", rng) + 0.15, 0, 1)
    assert task.reward("write 4 7", hazy) < 0.1


def test_templates_blank_the_free_attributes():
    assert template_of("two red squares left and one blue plus right") == "two * squares left and one * plus right"
    assert template_of("write 4 7") == "write 4 *"
    templates = {template_of(p) for p in CompositionalTask().prompts()}
    assert len(templates) == 20  # 176 prompts: each template recurs ~9 times
