from __future__ import annotations

import json
import re
from io import BytesIO

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.rewards.models import Mark, OutputSource, ProfiledOutput, ProfileRun
from flywheel.rewards.services import profile_create, reverify
from tests.flywheel.rewards.conftest import (
    STRICT_POLICY,
    default_scoring,
    outputs_file,
    outputs_lines,
    strict_scoring,
)
from trainer.verifiers.safety import SafetyPolicy

pytestmark = pytest.mark.django_db


def new_run_data(snapshot, **overrides):
    data = {
        "snapshot": str(snapshot.pk), "source_kind": OutputSource.UPLOAD, "outputs": outputs_file(snapshot),
        "sample_size": 30, "seed": 5, "verifier": "tool_call", "environment": "",
        "policy": json.dumps(SafetyPolicy.default().to_json()), "note": "first look",
    }  # fmt: skip
    return {**data, **overrides}


@pytest.fixture
def run(bfcl):
    return profile_create(
        actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.UPLOAD, sample_size=20,
        seed=0, lines=outputs_lines(bfcl), source_name="bfcl-outputs.jsonl",
    )  # fmt: skip


def _file(text: str) -> BytesIO:
    data = BytesIO(text.encode())
    data.name = "outputs.jsonl"
    return data


def shown_order(page: str) -> list[int]:
    return [int(found) for found in re.findall(r'<li id="output-(\d+)"', page)]


def test_a_trainer_profiles_an_uploaded_file_and_sees_the_histogram_components_and_outputs(client, make_user, bfcl):
    client.force_login(make_user(Role.TRAINER))
    form = client.get(reverse("rewards:run_new") + f"?snapshot={bfcl.pk}").context["form"]
    assert json.loads(form.initial["policy"])["name"] == "default"
    response = client.post(reverse("rewards:run_new"), new_run_data(bfcl))
    run = ProfileRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("rewards:run_detail", args=[run.pk])
    assert (run.source_name, run.sample_size, run.seed, run.outputs.count()) == ("bfcl-outputs.jsonl", 30, 5, 30)
    page = client.get(response["Location"]).content.decode()
    assert "Reward over 30 outputs" in page and "Reward components" in page and "Plotly.newPlot" in page
    assert len(shown_order(page)) == 30 and "unparseable output" in page
    assert "data-agreement-rate>—<" in page


def test_the_form_says_what_is_wrong(client, make_user, bfcl):
    client.force_login(make_user(Role.TRAINER))
    url = reverse("rewards:run_new")
    missing = new_run_data(bfcl)
    del missing["outputs"]
    assert "choose the outputs file" in client.post(url, missing).content.decode()
    assert "not valid JSON" in client.post(url, new_run_data(bfcl, policy="{nope")).content.decode()
    stranger = {"id": "no_such", "output": "x"}
    foreign = new_run_data(bfcl, outputs=_file(json.dumps(stranger)))
    assert "no output answers a task of the snapshot" in client.post(url, foreign).content.decode()
    assert not ProfileRun.objects.exists()


def test_marks_are_stored_and_the_page_shows_the_agreement_rate_disagreements_first(client, make_user, run):
    trainer = make_user(Role.TRAINER)
    client.force_login(trainer)
    outputs = list(run.outputs.order_by("position"))
    marks = [(outputs[0], "agree", ""), (outputs[1], "agree", ""), (outputs[5], "disagree", "wrong tool scored 0.6")]
    for output, verdict, note in marks:
        url = reverse("rewards:output_mark", args=[run.pk, output.pk])
        response = client.post(url, {"verdict": verdict, "note": note}, HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        body = response.content.decode()
        assert f'id="output-{output.pk}"' in body and 'hx-swap-oob="true"' in body
    assert body.count("data-agreement-rate") == 1 and ">67%<" in body

    stored = {(m.output_id, m.verdict, m.note) for m in Mark.objects.filter(reviewer=trainer)}
    assert stored == {(o.pk, v, n) for o, v, n in marks}
    page = client.get(reverse("rewards:run_detail", args=[run.pk])).content.decode()
    assert ">67%<" in page and "2 agree, 1 disagree" in page and "3/20 outputs marked" in page
    order = shown_order(page)
    assert order[0] == outputs[5].pk and order[-2:] == [outputs[0].pk, outputs[1].pk]
    assert "wrong tool scored 0.6" in page and 'aria-pressed="true"' in page


def test_a_mark_without_htmx_redirects_back_to_the_output(client, make_user, run):
    client.force_login(make_user(Role.ADMIN))
    output = run.outputs.first()
    response = client.post(reverse("rewards:output_mark", args=[run.pk, output.pk]), {"verdict": "disagree"})
    assert response.status_code == 302 and response["Location"].endswith(f"#output-{output.pk}")
    assert client.post(reverse("rewards:output_mark", args=[run.pk, output.pk]), {"verdict": "?"}).status_code == 400


def test_reverify_under_a_stricter_policy_opens_the_comparison_with_the_reasons_side_by_side(client, make_user, run):
    client.force_login(make_user(Role.TRAINER))
    url = reverse("rewards:run_reverify", args=[run.pk])
    form = client.get(url).context["form"]
    assert json.loads(form.initial["policy"]) == run.policy
    data = {"verifier": "tool_call", "environment": "", "policy": json.dumps(STRICT_POLICY), "note": "stricter"}
    response = client.post(url, data)
    child = ProfileRun.objects.get(parent=run)
    assert response.status_code == 302 and response["Location"] == reverse("rewards:run_compare", args=[child.pk])
    assert list(child.outputs.values_list("output_sha256", flat=True)) == list(
        run.outputs.values_list("output_sha256", flat=True)
    )
    page = client.get(response["Location"]).content.decode()
    changed = sum("denied-tool" in output.verdict["violations"] for output in child.outputs.all())
    assert changed > 0 and f"data-changed>{changed}<" in page
    assert "data-same-outputs>yes<" in page and "newly broken: <code>denied-tool</code>" in page
    assert "strict-no-calculators" in page and "safety 0.20→0.00" in page


def test_any_two_runs_of_one_family_compare_but_strangers_do_not(client, make_user, run, bfcl):
    client.force_login(make_user(Role.VIEWER))
    strict = reverify(actor=None, run=run, scoring=strict_scoring())
    binary = reverify(actor=None, run=strict, scoring=default_scoring("binary"))
    page = client.get(reverse("rewards:run_compare", args=[binary.pk]) + f"?base={run.pk}")
    assert page.status_code == 200 and page.context["comparison"].base == run
    stranger = profile_create(
        actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.UPLOAD, sample_size=5,
        lines=outputs_lines(bfcl),
    )  # fmt: skip
    assert client.get(reverse("rewards:run_compare", args=[binary.pk]) + f"?base={stranger.pk}").status_code == 400
    assert client.get(reverse("rewards:run_compare", args=[run.pk])).status_code == 404
    assert client.get(reverse("rewards:run_compare", args=[binary.pk]) + "?base=not-a-uuid").status_code == 404


def test_a_viewer_sees_runs_but_cannot_create_mark_or_reverify(client, make_user, run, bfcl):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("rewards:run_detail", args=[run.pk])).content.decode()
    assert "Reward over 20 outputs" in page
    assert "Re-verify these outputs" not in page and 'class="mark-form"' not in page
    assert client.get(reverse("rewards:run_list")).status_code == 200
    assert client.get(reverse("rewards:run_new")).status_code == 403
    assert client.post(reverse("rewards:run_new"), new_run_data(bfcl)).status_code == 403
    mark_url = reverse("rewards:output_mark", args=[run.pk, run.outputs.first().pk])
    assert client.post(mark_url, {"verdict": "agree"}).status_code == 403
    assert client.post(reverse("rewards:run_reverify", args=[run.pk]), {}).status_code == 403
    assert ProfileRun.objects.count() == 1 and not Mark.objects.exists()


def test_a_reviewer_cannot_mark_reward_scores(client, make_user, run):
    client.force_login(make_user(Role.REVIEWER))
    mark_url = reverse("rewards:output_mark", args=[run.pk, run.outputs.first().pk])
    assert client.post(mark_url, {"verdict": "agree"}).status_code == 403


def test_anonymous_visitors_are_sent_to_the_login_page(client, run):
    output: ProfiledOutput = run.outputs.first()
    for url in (
        reverse("rewards:run_list"), reverse("rewards:run_new"), reverse("rewards:run_detail", args=[run.pk]),
        reverse("rewards:run_reverify", args=[run.pk]), reverse("rewards:run_compare", args=[run.pk]),
    ):  # fmt: skip
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    response = client.post(reverse("rewards:output_mark", args=[run.pk, output.pk]), {"verdict": "agree"})
    assert response.status_code == 302 and not Mark.objects.exists()
