"""Forms of the triage app: they parse input into the services' and selectors' types."""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django import forms
from django.contrib.auth.models import User
from django.db.models import Q
from django.forms import BoundField

from flywheel.core.jsonbody import JsonInputError, json_parse
from flywheel.core.roles import Perm
from flywheel.datasets.models import Split
from flywheel.ingest.forms import TrajectoryFilterForm
from flywheel.ingest.models import Outcome
from flywheel.monitoring.models import Scorer
from flywheel.triage.models import Bucket, CorrectionKind, Queue, ReviewState
from flywheel.triage.queue_rules import NegativeFeedback, OnlineScoreBelow, QueueRule, rules_json, rules_parse
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import BucketChoice, CorrectionInput
from flywheel.triage.suggestions import NEEDS_REVIEW
from trainer.contracts import ToolCall

# A verdict is 1 for a pass and 0 for a fail: below 1, the scorer failed it.
FAILED_BELOW = 1.0


def _bucket_choices(first: str) -> list[tuple[str, str]]:
    return [("", first), *Bucket.objects.values_list("slug", "name")]


def _online_scorer_field() -> forms.ChoiceField:
    """One of the monitoring app's scorers, for a filter or a rule on an online score."""
    return forms.ChoiceField(required=False, label="Online score of", choices=[("", "—"), *Scorer.choices])


class TriageFilterForm(TrajectoryFilterForm):
    """The trajectory list's filters plus bucket, suggested bucket, review state and an online score."""

    bucket = forms.ChoiceField(required=False)
    suggested = forms.ChoiceField(required=False, label="Suggested")
    state = forms.ChoiceField(required=False, label="Review", choices=[("", "any"), *ReviewState.choices])
    online_scorer = _online_scorer_field()
    online_below = forms.FloatField(
        required=False, label="below", help_text="Blank: below 1, the scorer failed it (a pass is 1, a fail 0)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["bucket"]).choices = _bucket_choices("any")
        suggested = cast(forms.ChoiceField, self.fields["suggested"])
        suggested.choices = [*_bucket_choices("any"), (NEEDS_REVIEW, "needs review")]

    def clean(self) -> dict[str, Any]:
        super().clean()
        if self.cleaned_data.get("online_below") is not None and not self.cleaned_data.get("online_scorer"):
            self.add_error("online_scorer", "Choose the scorer whose score must be below the threshold.")
        return self.cleaned_data

    def triage_filters(self) -> TriageFilters:
        data: dict[str, Any] = self.cleaned_data if self.is_valid() else {}
        scorer, below = data.get("online_scorer") or "", data.get("online_below")
        return TriageFilters(
            base=self.filters(),
            bucket=data.get("bucket") or "",
            suggested=data.get("suggested") or "",
            state=data.get("state") or "",
            online_scorer=scorer,
            online_below=(FAILED_BELOW if below is None else below) if scorer else None,
        )


def _reviewers() -> Any:
    codename = Perm.TRIAGE.codename
    can_triage = Q(groups__permissions__codename=codename) | Q(user_permissions__codename=codename)
    return User.objects.filter(can_triage | Q(is_superuser=True), is_active=True).distinct().order_by("username")


class QueueForm(TriageFilterForm):
    """A queue: its name, reviewers, and the filter that picks its trajectories (review state aside).

    Its rules are a formset beside it (`queue_rule_formset`); a queue needs a filter or a rule,
    which the view checks with both in hand (`needs_filter_or_rule`).
    """

    name = forms.CharField(max_length=100)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    reviewers = forms.ModelMultipleChoiceField(
        queryset=User.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Nobody ticked: every reviewer may take items.",
    )
    field_order = ["name", "description", "reviewers"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.fields["state"]  # a queue's members keep their place whatever their review state
        cast(forms.ModelMultipleChoiceField, self.fields["reviewers"]).queryset = _reviewers()

    def filter_fields(self) -> list[BoundField]:
        return [self[name] for name in self.fields if name not in ("name", "description", "reviewers")]

    def needs_filter_or_rule(self, rules: list[QueueRule]) -> None:
        """A queue with neither would never gather anything but what is added by hand: say so."""
        if self.triage_filters().is_empty() and not rules:
            self.add_error(None, "Choose at least one filter or rule, or add trajectories by hand from the list.")

    @classmethod
    def initial_for(cls, queue: Queue) -> dict[str, Any]:
        """The form's fields from a stored queue (its filter JSON uses the selectors' names)."""
        data: dict[str, Any] = {"name": queue.name, "description": queue.description}
        data["reviewers"] = list(queue.reviewers.all())
        renamed = {"text": "q", "has_error": "error"}
        for key, value in queue.filters.items():
            data[renamed.get(key, key)] = str(value).lower() if key == "has_error" else value
        return data


class QueueRuleForm(forms.Form):
    """One queue rule: a name and its conditions, all of which must hold; left blank, no rule."""

    name = forms.CharField(max_length=100, required=False)
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *Outcome.choices])
    model_version = forms.CharField(
        max_length=100, required=False, label="Version", help_text="A tag, or a glob such as support-bot:v3*"
    )
    suggested_bucket = forms.MultipleChoiceField(required=False, label="Suggested bucket, any of")
    thumbs_down = forms.BooleanField(required=False, label="A thumbs down")
    score_below = forms.FloatField(required=False, label="Or a score below")
    online_scorer = _online_scorer_field()
    online_below = forms.FloatField(
        required=False, label="below", help_text="A verdict is 1 for a pass and 0 for a fail: below 1 is a fail"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        bucket = cast(forms.MultipleChoiceField, self.fields["suggested_bucket"])
        bucket.choices = [*Bucket.objects.values_list("slug", "name"), (NEEDS_REVIEW, "needs review")]
        bucket.widget.attrs["size"] = 4

    def rule_json(self) -> dict[str, Any]:
        """The rule as `queue_rules` reads it, from the fields that are set."""
        data = self.cleaned_data
        rule: dict[str, Any] = {"name": data.get("name") or ""}
        for kind in ("outcome", "model_version", "suggested_bucket"):
            if data.get(kind):
                rule[kind] = data[kind]
        if data.get("thumbs_down") or data.get("score_below") is not None:
            rule["negative_feedback"] = {"thumbs_down": bool(data.get("thumbs_down")),
                                         "score_below": data.get("score_below")}  # fmt: skip
        if data.get("online_scorer") or data.get("online_below") is not None:
            rule[OnlineScoreBelow.KIND] = {"scorer": data.get("online_scorer"), "below": data.get("online_below")}
        return rule

    def clean(self) -> dict[str, Any]:
        super().clean()
        if self.errors or self.cleaned_data.get("DELETE") or self.rule_json() == {"name": ""}:
            return self.cleaned_data
        try:
            self.cleaned_data["rule"] = QueueRule.from_json(self.rule_json())
        except forms.ValidationError as error:
            raise forms.ValidationError(error.messages) from error
        return self.cleaned_data

    @staticmethod
    def initial_for(rule: QueueRule) -> dict[str, Any]:
        data = rule.to_json()
        data.update(data.pop(NegativeFeedback.KIND, {}))  # its thumbs_down and score_below are fields here
        online = data.pop(OnlineScoreBelow.KIND, None)
        if online:
            data.update(online_scorer=online["scorer"], online_below=online["below"])
        return data


class BaseQueueRuleFormSet(forms.BaseFormSet):  # type: ignore[type-arg]
    def rules(self) -> list[QueueRule]:
        return [form.cleaned_data["rule"] for form in self.forms if "rule" in getattr(form, "cleaned_data", {})]

    def clean(self) -> None:
        super().clean()
        if not any(form.errors for form in self.forms):
            rules_parse(rules_json(self.rules()))  # names unique, not too many: a ValidationError shows on top


QueueRuleFormSet = forms.formset_factory(QueueRuleForm, formset=BaseQueueRuleFormSet, extra=1, can_delete=True)
RULES_PREFIX = "rules"


def queue_rule_formset(data: Any, queue: Queue | None) -> BaseQueueRuleFormSet:
    """The rules part of the queue page; bound only where the post carries it (a post without rule fields
    leaves the queue's rules as they are)."""
    initial = [QueueRuleForm.initial_for(rule) for rule in rules_parse(queue.rules)] if queue else []
    bound = data is not None and f"{RULES_PREFIX}-TOTAL_FORMS" in data
    return cast(BaseQueueRuleFormSet, QueueRuleFormSet(data if bound else None, initial=initial, prefix=RULES_PREFIX))


class ReviewForm(forms.Form):
    """A reviewer's buckets (each with an optional step, posted as `step-<slug>`), note and action."""

    bucket = forms.MultipleChoiceField(required=False)
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=10_000)
    action = forms.ChoiceField(choices=[("save", "save"), ("skip", "skip")], required=False)
    queue = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, buckets: list[Bucket], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buckets = {bucket.slug: bucket for bucket in buckets}
        choices = [(slug, bucket.name) for slug, bucket in self.buckets.items()]
        cast(forms.MultipleChoiceField, self.fields["bucket"]).choices = choices

    def choices(self) -> list[BucketChoice]:
        return [BucketChoice(self.buckets[slug], self._step(slug)) for slug in self.cleaned_data["bucket"]]

    def _step(self, slug: str) -> int | None:
        raw = self.data.get(f"step-{slug}", "")
        if raw in ("", None):
            return None
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise forms.ValidationError(f"step-{slug} must be a step number") from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        for slug in self.cleaned_data.get("bucket", []):
            self._step(slug)
        return self.cleaned_data


class TrajectoryIdsField(forms.Field):
    """Trajectory ids posted as repeated `ids` values (the list's checkboxes)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[UUID]:
        try:
            return [UUID(str(item)) for item in value or []]
        except ValueError:
            raise forms.ValidationError("that is not a trajectory id") from None


class BulkForm(forms.Form):
    """A bulk action on the selected trajectories or on everything the list's filter matches."""

    ACTIONS = [("set_bucket", "Set bucket"), ("add_to_queue", "Add to queue"), ("mark_reviewed", "Mark reviewed")]
    action = forms.ChoiceField(choices=ACTIONS)
    scope = forms.ChoiceField(choices=[("selected", "the selected"), ("all", "everything matching the filter")])
    ids = TrajectoryIdsField(required=False)
    target_bucket = forms.ModelChoiceField(queryset=Bucket.objects.all(), required=False, to_field_name="slug")
    target_queue = forms.ModelChoiceField(queryset=Queue.objects.all(), required=False)

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if cleaned.get("action") == "set_bucket" and not cleaned.get("target_bucket"):
            self.add_error("target_bucket", "Choose the bucket to set.")
        if cleaned.get("action") == "add_to_queue" and not cleaned.get("target_queue"):
            self.add_error("target_queue", "Choose the queue.")
        if cleaned.get("scope") == "selected" and not cleaned.get("ids"):
            raise forms.ValidationError("Select trajectories first, or apply to everything matching the filter.")
        return self.cleaned_data


TASK_CHOICES = [("", "no task"), (Split.TRAIN, "an SFT example (train task)"),
                (Split.HELDOUT, "a regression task (held-out)")]  # fmt: skip


class CorrectionForm(forms.Form):
    """A reviewer's fix of the agent's turn: a call (a tool of the catalogue, arguments as a JSON object) or an
    answer, and what it becomes. Only the JSON's syntax is checked here; the call against the catalogue's
    schemas is the service's check (`services.correction_create`)."""

    step = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    kind = forms.ChoiceField(choices=CorrectionKind.choices, widget=forms.RadioSelect, initial=CorrectionKind.CALL)
    tool = forms.CharField(required=False, widget=forms.Select)
    arguments = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
                                help_text="A JSON object.")  # fmt: skip
    answer = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}))
    make_pair = forms.BooleanField(required=False, initial=True, label="Preference pair",
                                   help_text="Chosen: the correction; rejected: what the agent did.")  # fmt: skip
    task = forms.ChoiceField(choices=TASK_CHOICES, required=False, label="Task")
    pair_split = forms.ChoiceField(choices=Split.choices, initial=Split.TRAIN, label="Pair split",
                                   help_text="With a task, the pair goes to the task's split.")  # fmt: skip
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, tools: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool"].widget.choices = [(name, name) for name in tools]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("kind") == CorrectionKind.CALL:
            if not data.get("tool"):
                self.add_error("tool", "choose the tool the agent should have called")
            try:
                arguments = json_parse(data.get("arguments") or "{}", what="arguments")
            except JsonInputError as exc:
                self.add_error("arguments", exc.message)
            else:
                if not isinstance(arguments, dict):
                    self.add_error("arguments", "arguments are a JSON object")
                data["parsed_arguments"] = arguments
        elif not (data.get("answer") or "").strip():
            self.add_error("answer", "write the answer the agent should have given")
        return data

    def correction_input(self) -> CorrectionInput:
        data = self.cleaned_data
        is_call = data["kind"] == CorrectionKind.CALL
        return CorrectionInput(
            step_index=data["step"], call=ToolCall(data["tool"], data["parsed_arguments"]) if is_call else None,
            answer="" if is_call else data["answer"], note=data["note"], make_pair=data["make_pair"],
            task_split=data["task"], pair_split=data["pair_split"],
        )  # fmt: skip
