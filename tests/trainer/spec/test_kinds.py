"""Each job kind's config (`trainer.spec`): one class per kind, shared training knobs, own defaults."""

from __future__ import annotations

import dataclasses

import pytest

from trainer.spec.config import SpecError, TrainingConfig, config_from_json
from trainer.spec.dpo import DpoConfig
from trainer.spec.environments import EpisodeBudget
from trainer.spec.grpo import GrpoConfig
from trainer.spec.kinds import CONFIGS, TRAINING_KINDS, config_class
from trainer.spec.sft import SftConfig


def test_every_job_kind_of_the_protocol_has_a_config_and_the_training_kinds_are_sft_dpo_and_grpo():
    from trainer.contracts import JOB_KINDS

    assert set(CONFIGS) == set(JOB_KINDS)
    assert TRAINING_KINDS == ("sft", "dpo", "grpo")
    with pytest.raises(KeyError, match="no job kind 'kto'"):
        config_class("kto")


def test_the_training_kinds_share_the_knobs_and_keep_their_own_defaults():
    shared = {item.name for item in dataclasses.fields(TrainingConfig)}
    assert shared <= {item.name for item in dataclasses.fields(SftConfig)}
    assert shared <= {item.name for item in dataclasses.fields(GrpoConfig)}
    assert shared <= {item.name for item in dataclasses.fields(DpoConfig)}
    assert SftConfig().learning_rate == 2e-4 and GrpoConfig().learning_rate == 1e-5
    assert SftConfig().checkpoint_interval == 50 and GrpoConfig().checkpoint_interval == 10



@pytest.mark.parametrize("config", [SftConfig, DpoConfig, GrpoConfig])
def test_every_training_kind_plays_episodes_only_in_an_environment(config):
    assert config().episode_budget(per_answer=64) is None
    assert config(environment="workbench", max_turns=4).episode_budget(per_answer=64) == EpisodeBudget(4, 256)
    assert config(environment="mcp:python -m x", max_turns=2, max_episode_tokens=100).episode_budget(64) == \
        EpisodeBudget(2, 100)
    with pytest.raises(ValueError, match="need an environment"):
        config(max_turns=3)
    with pytest.raises(ValueError, match="environment must be one of"):
        config(environment="single_step")


@pytest.mark.parametrize("config", [SftConfig, DpoConfig, GrpoConfig])
def test_a_shared_knob_is_checked_for_every_kind(config):
    with pytest.raises(SpecError, match="lora_dropout must be in"):
        config_from_json(config, {"lora_dropout": 1.5}, "hyperparameters")
    with pytest.raises(SpecError, match="eval_batch_size must be at least 1"):
        config_from_json(config, {"eval_batch_size": 0}, "hyperparameters")
