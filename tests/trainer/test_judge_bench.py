"""The judge-agreement bench: which tau-bench trajectories it judges, and its verdict line on the app's rule."""

from __future__ import annotations

import json

from bench import judge_agreement
from trainer.verifiers.judge import judge_agreement as agreement_of


def test_the_sample_is_balanced_seeded_and_the_same_each_time():
    records = json.loads(judge_agreement.TAU_BENCH.read_text())
    chosen = judge_agreement.sample(records, per_label=50, seed=0)
    assert len(chosen) == 100 and sum(float(record["reward"]) == 1.0 for record in chosen) == 50
    assert chosen == judge_agreement.sample(records, per_label=50, seed=0)
    assert chosen != judge_agreement.sample(records, per_label=50, seed=1)
    assert len({judge_agreement.item_id(record) for record in chosen}) == 100


def test_the_report_refuses_below_the_threshold_or_the_minimum_of_labels():
    low = agreement_of([(True, True)] * 45 + [(True, False)] * 55)
    assert judge_agreement.report(low, 0.8).endswith("refused") and "45.0% [" in judge_agreement.report(low, 0.8)
    high = agreement_of([(True, True)] * 45 + [(False, False)] * 5)
    assert judge_agreement.report(high, 0.8).endswith("approved")
    assert judge_agreement.report(agreement_of([(True, True)] * 49), 0.8).endswith("refused")
