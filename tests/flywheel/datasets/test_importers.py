from __future__ import annotations

import pytest

from flywheel.datasets.models import RegressionTask
from tests.flywheel.datasets.conftest import BFCL, EXTERNAL, WORKBENCH, import_file

pytestmark = pytest.mark.django_db
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple"]


@pytest.mark.slow
def test_bfcl_loads_1000_tasks_into_train_and_refuses_them_task_by_task_into_heldout():
    reports = [import_file(BFCL / f"BFCL_v4_{category}.json", "bfcl", "train") for category in CATEGORIES]
    assert [r["imported"] for r in reports] == [400, 200, 200, 200]
    assert sum(r["refused"] + r["rejected"] for r in reports) == 0
    again = import_file(BFCL / "BFCL_v4_parallel.json", "bfcl", "heldout")
    assert (again["imported"], again["refused"]) == (0, 200)
    assert again["errors"][0]["reason"] == "parallel_0: leaks into Train: same prompt as task parallel_0"


def test_a_known_bfcl_task_keeps_its_id_expected_call_alternatives_and_converted_schema(bfcl_simple):
    import_file(bfcl_simple, "bfcl", "train")
    task = RegressionTask.objects.get(external_id="simple_python_0")
    assert task.content["expected_calls"] == [
        {"name": "calculate_triangle_area", "arguments": {"base": [10], "height": [5], "unit": ["units", ""]}}
    ]
    parameters = task.content["tools"][0]["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["properties"]["base"]["type"] == "integer"
    assert task.category == "simple_python" and task.source_ref == "BFCL_v4_simple_python.json:1"


def test_bfcl_types_that_are_not_json_schema_are_converted_and_kept(bfcl_simple):
    import_file(BFCL / "BFCL_v4_parallel_multiple.json", "bfcl", "train")
    kinds = {
        (spec.get("type"), spec.get("x-bfcl-type"))
        for task in RegressionTask.objects.all()
        for tool in task.content["tools"]
        for spec in tool["function"]["parameters"].get("properties", {}).values()
    }
    assert ("number", None) in kinds and ("object", None) in kinds
    assert not {kind for kind, _ in kinds} & {"float", "dict", "tuple", "any"}


def test_irrelevance_tasks_expect_no_call():
    report = import_file(BFCL / "BFCL_v4_irrelevance.json", "bfcl", "heldout")
    assert report["imported"] == 240
    assert all(task.content["no_call_expected"] for task in RegressionTask.objects.all())


@pytest.mark.slow
def test_all_six_workbench_files_load_690_tasks_with_their_answers():
    reports = [import_file(path, "workbench", "heldout") for path in sorted(WORKBENCH.glob("*.csv"))]
    assert sum(r["imported"] for r in reports) == 690
    assert sum(r["refused"] + r["rejected"] for r in reports) == 0
    first = RegressionTask.objects.get(external_id="calendar_0")
    assert first.content["expected_calls"] == [
        {"name": "calendar_delete_event", "arguments": {"event_id": ["00000256"]}}
    ]
    assert first.leakage_text == "template: cancel my first meeting on {natural_language_date}"
    assert len(first.content["tools"]) == 27 and first.environment == "workbench"
    no_call = RegressionTask.objects.filter(content__no_call_expected=True)
    assert no_call.count() == 122 and all(t.content["expected_calls"] == [] for t in no_call)


def test_same_template_tasks_in_one_split_are_flagged_not_dropped():
    report = import_file(WORKBENCH / "calendar_queries_and_answers.csv", "workbench", "heldout")
    assert report["imported"] == 110 and report["flagged"] > 0
    second = RegressionTask.objects.get(external_id="calendar_1")
    assert second.duplicate_of.external_id == "calendar_0"


def test_nemo_gym_examples_import_in_each_ground_truth_shape():
    shapes = ["workplace_assistant", "xlam_fc", "single_step_tool_use_with_argument_comparison"]
    reports = [import_file(EXTERNAL / "nemo_gym" / shape / "example.jsonl", "nemo-gym", "train") for shape in shapes]
    assert [r["imported"] for r in reports] == [5, 5, 5]
    parallel = RegressionTask.objects.filter(category="xlam_fc").order_by("external_id").first()
    assert [c["name"] for c in parallel.content["expected_calls"]] == ["live_giveaways_by_type"] * 2


def test_broken_lines_are_rejected_with_their_number_and_the_good_ones_imported(tmp_path, bfcl_simple):
    lines = bfcl_simple.read_text().splitlines()
    broken = tmp_path / "possible_answer"
    broken.mkdir()
    (tmp_path / "BFCL_v4_simple_python.json").write_text("\n".join([lines[0], "{oops", lines[1], '{"id": "x"}']) + "\n")
    answers = (BFCL / "possible_answer" / "BFCL_v4_simple_python.json").read_text().splitlines()
    (broken / "BFCL_v4_simple_python.json").write_text("\n".join(answers[:2]) + "\n")
    report = import_file(tmp_path / "BFCL_v4_simple_python.json", "bfcl", "train")
    assert (report["imported"], report["rejected"]) == (2, 2)
    assert [e["line"] for e in report["errors"]] == [2, 4]
    assert "not valid JSON" in report["errors"][0]["reason"]
