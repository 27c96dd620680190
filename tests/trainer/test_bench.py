"""The benchmark scripts run without the reference checker, and agree with it when it is there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import bfcl_agreement
from bench import verify as bench_verify
from bench.bfcl_perturbations import FORMATS, answer_calls, as_bfcl_decoded, as_openai, as_python, variants
from trainer.parsing import parse_tool_calls

REFERENCE_PYTHON = os.environ.get("BFCL_REFERENCE_PYTHON", "/work/bfcl-ref-venv/bin/python")


def sample_tasks():
    return bfcl_agreement.load_tasks(bfcl_agreement.DEFAULT_BFCL_DIR, bfcl_agreement.CATEGORIES, limit=5)


def test_every_rendering_of_a_perturbation_reads_back_to_the_same_calls():
    for task in sample_tasks():
        for variant in [] if task.no_call_expected else variants(task):
            json_safe = json.loads(json.dumps(as_bfcl_decoded(variant.calls)))
            assert parse_tool_calls(as_python(variant.calls)).calls == variant.calls
            assert [{c.name: c.arguments} for c in parse_tool_calls(as_openai(variant.calls)).calls] == json_safe


def test_every_format_renders_a_correct_answer_our_verifier_passes():
    task = next(task for task in sample_tasks() if task.id == "parallel_0")
    for name, render in FORMATS.items():
        assert bfcl_agreement.score_ours([bfcl_agreement.Item(name, task, name, "python", render(answer_calls(task)),
                                                              None, None)])[0].passed, name  # fmt: skip


def test_the_agreement_script_says_when_the_reference_is_absent(capsys, tmp_path):
    assert bfcl_agreement.main(["--limit", "2", "--reference-python", str(tmp_path / "missing")]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["reference"].startswith("absent") and report["label_contradictions"] == 0


def test_the_speed_benchmark_measures_ours_without_the_reference(capsys):
    assert bench_verify.main(["--limit", "2", "--rounds", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reference"].startswith("absent") and report["from_text"]["ours_per_second"] > 0


@pytest.mark.skipif(not Path(REFERENCE_PYTHON).exists(), reason="no BFCL reference virtualenv (BFCL_REFERENCE_PYTHON)")
def test_it_agrees_with_bfcls_own_checker_on_a_sample(capsys):
    assert bfcl_agreement.main(["--limit", "6", "--reference-python", REFERENCE_PYTHON]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["agreement"] >= 0.99, report["disagreement_classes"]


def test_the_comparison_groups_disagreements_by_class():
    task = next(task for task in sample_tasks() if task.id == "simple_python_0")
    items = [bfcl_agreement.Item(f"k{i}", task, "wrong_function", "python", "[]", "[]", False) for i in range(3)]
    ours = bfcl_agreement.score_ours(items)
    reference = {"k0": {"valid": False, "error_type": "x"}, "k1": {"valid": True, "error_type": ""},
                 "k2": {"valid": True, "error_type": ""}}  # fmt: skip
    report = bfcl_agreement.compare(items, ours, reference)
    assert report["agreement"] == 1 / 3
    assert report["disagreement_classes"][0]["class"] == "wrong_function/python: ours=fail, bfcl=pass ()"
    assert report["disagreement_classes"][0]["count"] == 2
