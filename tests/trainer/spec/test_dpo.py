"""The `dpo` job's config: TRL's DPO knobs that matter, each checked with a message that says what to do."""

from __future__ import annotations

import pytest

from trainer.spec.config import SpecError, config_from_json
from trainer.spec.dpo import DpoConfig


def parsed(**hyperparameters) -> DpoConfig:
    return config_from_json(DpoConfig, hyperparameters, "dpo hyperparameters")


def test_the_defaults_are_the_dpo_paper_s_loss_and_beta_with_a_lora_learning_rate():
    config = parsed()
    assert (config.loss_type, config.beta, config.learning_rate, config.max_length) == ("sigmoid", 0.1, 5e-5, None)
    assert config.losses() == (["sigmoid"], [1.0])
    assert config.describe() == "sigmoid loss, beta 0.1"


@pytest.mark.parametrize(("hyperparameters", "message"), [
    ({"loss_type": "kto"}, "unknown loss_type 'kto'; known: sigmoid, ipo, hinge, robust, exo_pair"),
    ({"beta": 0.0}, "beta must be above 0"),
    ({"beta": -0.1}, "beta must be above 0"),
    ({"label_smoothing": 0.1}, "label_smoothing acts only on the robust and exo_pair losses; with sigmoid it must"),
    ({"loss_type": "robust", "label_smoothing": 0.5}, "must be in \\[0, 0.5\\)"),
    ({"loss_type": "exo_pair"}, "the exo_pair loss needs label_smoothing above 0"),
    ({"sft_weight": -1.0}, "sft_weight must be 0 or more"),
    ({"max_length": 1}, "max_length must be at least 2"),
    ({"max_steps": 0}, "max_steps must be at least 1, or -1"),
    ({"num_train_epochs": 0}, "num_train_epochs must be above 0"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size must be at least 1"),
    ({"warmup_ratio": 1.0}, "warmup_ratio must be in \\[0, 1\\)"),
    ({"lora_r": 0}, "lora_r must be at least 1"),
    ({"beta": "high"}, "'beta' must be float, got \"high\""),
    ({"max_prompt_length": 128}, "unknown field\\(s\\) max_prompt_length"),
])  # fmt: skip
def test_a_bad_knob_is_refused_with_a_message_naming_it(hyperparameters, message):
    with pytest.raises(SpecError, match=f"^dpo hyperparameters: .*{message}"):
        parsed(**hyperparameters)


def test_the_variants_set_what_their_knobs_name():
    assert parsed(loss_type="robust", label_smoothing=0.1).describe() == "robust loss, beta 0.1, label smoothing 0.1"
    assert parsed(loss_type="exo_pair", label_smoothing=1e-3).label_smoothing == 1e-3
    rpo = parsed(sft_weight=0.5, beta=0.2)
    assert rpo.losses() == (["sigmoid", "sft"], [1.0, 0.5])
    assert rpo.describe() == "sigmoid loss, beta 0.2, chosen NLL weight 0.5"
