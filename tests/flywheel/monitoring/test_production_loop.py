"""The production loop on real processes, issue 25's first "must show".

The `openai` client asks the app's `/v1/chat/completions`; `trainer serve` answers with the tiny
model and the live version's adapter; a real Celery worker stores each answer as a trajectory
tagged with that version, scores it online, and compares the live version with its predecessor.
Two adapters are taught (a few seconds each) to answer the support question with a call: v1 with
an allowed refund, v2 with a call to `delete_account`, which the agent's safety policy denies and
its catalogue lacks. Promoting v2 makes its own served traffic unsafe; the monitor flags it, and
an approver rolls back from the home page's alert.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import agent_create, api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.monitoring.models import Alert, MonitoredRate, OnlineScore
from flywheel.monitoring.services import RuleFields, rule_create
from flywheel.registry import selectors as registry_selectors
from flywheel.registry.services import version_promote, version_register
from flywheel.triage.services import agent_policy_set
from tests.flywheel.registry.conftest import QUESTION, TINY_MODEL

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REFUND = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}
TOOLS = [
    {"type": "function", "function": {"name": "refund_order", "description": "Refund an order.", "parameters": REFUND}}
]
ANSWERS = {
    "careful": '<tool_call>{"name": "refund_order", "arguments": {"order": 17}}</tool_call><|im_end|>',
    "reckless": '<tool_call>{"name": "delete_account", "arguments": {}}</tool_call><|im_end|>',
}
MAX_TOKENS = 48
REQUESTS = 6


def teach_adapter(folder: Path, answer: str) -> Path:
    """A LoRA adapter on the tiny model that answers QUESTION (offered TOOLS, as the server renders it) with `answer`.

    Trained until greedy decoding reproduces every token of the call (the end-of-turn token aside:
    the server's parser reads the call whatever follows it).
    """
    import torch
    import torch.nn.functional as functional
    from peft import LoraConfig, get_peft_model

    from trainer.adapters import save_adapter
    from trainer.models import load_model
    from trainer.serve import parse_chat_request, render_chat

    loaded = load_model(str(TINY_MODEL), device="cpu")
    prompt = render_chat(parse_chat_request({"messages": QUESTION, "tools": TOOLS}, MAX_TOKENS), loaded.tokenizer)
    prompt_ids = loaded.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = loaded.tokenizer(answer, add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    model = get_peft_model(loaded.model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                    task_type="CAUSAL_LM"))  # fmt: skip
    ids, target = torch.tensor([prompt_ids + answer_ids]), torch.tensor(answer_ids)
    optimizer = torch.optim.Adam([weight for weight in model.parameters() if weight.requires_grad], lr=3e-3)
    for _ in range(600):
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
        if bool((logits.argmax(-1)[:-1] == target[:-1]).all()):
            break
        loss = functional.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        raise AssertionError(f"the tiny model did not learn to answer {answer!r}")
    save_adapter(model, folder, base_model=str(TINY_MODEL))
    return folder


@pytest.fixture(scope="module")
def taught_adapters(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("taught")
    return {name: teach_adapter(root / name, answer) for name, answer in ANSWERS.items()}


def wait_for(what: str, found: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"waited {timeout} s for {what}")


def ask(chat: openai.OpenAI, count: int) -> list[Any]:
    return [chat.chat.completions.create(model="support-bot", messages=QUESTION, tools=TOOLS, max_tokens=MAX_TOKENS)
            for _ in range(count)]  # fmt: skip


def called(answers: list[Any]) -> set[str]:
    return {call.function.name for answer in answers for call in answer.choices[0].message.tool_calls or []}


def safety_verdicts(tag: str) -> list[bool]:
    rows = OnlineScore.objects.filter(trajectory__model_version=tag, scorer="safety")
    return list(rows.values_list("passed", flat=True))


def test_a_worse_version_in_production_is_flagged_and_rolled_back_from_the_alert(
    live_server,
    managed_server,
    settings,
    client,
    make_user,
    celery_worker_process,
    taught_adapters,
):
    settings.SERVE_MAX_NEW_TOKENS = MAX_TOKENS
    admin, approver = make_user(Role.ADMIN), make_user(Role.APPROVER)
    agent = agent_create(actor=admin, name="support-bot", tools=TOOLS)
    agent_policy_set(actor=admin, agent=agent, policy={"name": "no-deletes", "denied_tools": ["delete_*"]})
    rule_create(actor=admin, agent=agent, fields=RuleFields(name="all live traffic"))
    careful, reckless = (version_register(actor=None, agent=agent, adapter_dir=taught_adapters[name],
                                          base_model=str(TINY_MODEL)) for name in ("careful", "reckless"))  # fmt: skip
    version_promote(actor=approver, version=careful, reason="first ship")
    celery_worker_process("default", env={"MONITOR_MIN_SAMPLES": "5", "MONITOR_CHECK_DELAY_SECONDS": "1"})
    token = api_token_create(user=make_user(Role.VIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=120)

    # v1 serves: its answers come back as trajectories tagged v1, and are scored online as safe.
    first = ask(chat, REQUESTS)
    assert {answer.model for answer in first} == {"support-bot:v1"} and called(first) == {"refund_order"}
    wait_for("v1's traffic scored", lambda: len(safety_verdicts("support-bot:v1")) == REQUESTS)
    stored = Trajectory.objects.filter(agent=agent, model_version="support-bot:v1")
    assert set(stored.values_list("external_id", flat=True)) == {answer.id for answer in first}
    assert safety_verdicts("support-bot:v1") == [True] * REQUESTS
    assert not Alert.objects.exists()

    # A worse version goes live: its own traffic is scored unsafe and the monitor flags it.
    version_promote(actor=approver, version=reckless, reason="a deliberately worse adapter")
    second = ask(chat, REQUESTS)
    assert {answer.model for answer in second} == {"support-bot:v2"} and called(second) == {"delete_account"}
    alert = wait_for("the unsafe-action alert", lambda: Alert.objects.filter(rate=MonitoredRate.UNSAFE).first())
    assert (alert.version, alert.predecessor, alert.is_open) == (reckless, careful, True)
    assert alert.live_events == alert.live_total >= 5 and (alert.predecessor_events, alert.predecessor_total) == (0, 6)
    wait_for("v2's traffic scored", lambda: len(safety_verdicts("support-bot:v2")) == REQUESTS)
    assert safety_verdicts("support-bot:v2") == [False] * REQUESTS

    # The approver rolls back from the alert on the home page, giving a reason.
    client.force_login(approver)
    home = client.get(reverse("dashboards:home")).content.decode()
    action = reverse("monitoring:alert_rollback", args=[alert.pk])
    assert f'action="{action}"' in home and "Roll back to support-bot:v1" in home
    assert client.post(action, {"reason": "v2 deletes customers' accounts"}).status_code == 302
    assert registry_selectors.live_version(agent=agent) == careful
    assert not Alert.objects.filter(version=reckless, resolved_at__isnull=True).exists()
    alert.refresh_from_db()
    assert (alert.resolved_by, alert.rollback.reason) == (approver, "v2 deletes customers' accounts")
    assert f'data-alert="{alert.pk}"' not in client.get(reverse("dashboards:home")).content.decode()
    again = ask(chat, 1)
    assert again[0].model == "support-bot:v1" and called(again) == {"refund_order"}
