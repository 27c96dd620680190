"""The `mine` job's config (`trainer.spec.mine.MineConfig`): its bounds and what it refuses."""

from __future__ import annotations

import pytest

from trainer.spec.config import SpecError, config_from_json, config_help
from trainer.spec.kinds import TRAINING_KINDS, config_class
from trainer.spec.mine import MineConfig


def test_by_default_it_keeps_tasks_solved_at_least_once_and_not_every_time():
    config = MineConfig()
    assert (config.samples, config.upper_bound) == (8, 7)
    assert [config.keeps(solved) for solved in range(9)] == [False] + [True] * 7 + [False]
    assert MineConfig(samples=4).upper_bound == 3


def test_it_is_the_mine_kind_and_trains_nothing():
    assert config_class("mine") is MineConfig
    assert "mine" not in TRAINING_KINDS


def test_its_sampling_draws_k_completions_per_prompt_with_the_seed():
    sampling = MineConfig(samples=6, temperature=0.8, max_new_tokens=64).sampling(seed=3)
    assert (sampling.num_samples, sampling.temperature, sampling.seed, sampling.max_new_tokens) == (6, 0.8, 3, 64)


@pytest.mark.parametrize(("fields", "message"), [
    ({"temperature": 0.0}, "temperature must be above 0"),
    ({"samples": 0}, "samples must be at least 1"),
    ({"min_solved": 5, "max_solved": 3}, "need 0 <= min_solved <= max_solved <= samples"),
    ({"max_solved": 9}, "need 0 <= min_solved <= max_solved <= samples"),
    ({"verifier": "vibes"}, "unknown verifier"),
    ({"environment": "single_step"}, "environment must be one of workbench"),
    ({"sample_size": 0}, "sample_size must be at least 1"),
    ({"top_p": 0.0}, "top_p"),
])  # fmt: skip
def test_it_refuses_settings_that_cannot_mine(fields, message):
    with pytest.raises(SpecError, match=message):
        config_from_json(MineConfig, fields, "mine hyperparameters")


def test_every_field_has_a_help_text():
    assert all(text for text in config_help(MineConfig).values())
