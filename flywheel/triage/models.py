"""Failure buckets (the guide's seven plus custom ones) and reviews of trajectories."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from flywheel.core.models import TimestampedModel

# The guide's failure modes, in its order; created by a data migration and never deleted.
BUILT_IN_BUCKETS: list[tuple[str, str, str, str]] = [
    ("format_error", "Format error", "Malformed output or tool call: invalid JSON, missing arguments.", "#e8590c"),
    ("wrong_tool", "Wrong tool", "A tool was called that does not serve the request.", "#f59f00"),
    ("bad_planning", "Bad planning", "Steps in the wrong order, redundant or missing steps.", "#7048e8"),
    ("unsafe_action", "Unsafe action", "An action the policy forbids or that needed confirmation first.", "#c92a2a"),
    ("retrieval_failure", "Retrieval failure", "The needed information was not found or was ignored.", "#1c7ed6"),
    ("hallucinated_api", "Hallucinated API", "A call to a tool or argument that does not exist.", "#d6336c"),
    ("incomplete_execution", "Incomplete execution", "Left unfinished, often after a tool error.", "#495057"),
]


class Bucket(TimestampedModel):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    colour = models.CharField(
        max_length=7, default="#868e96", validators=[RegexValidator(r"^#[0-9a-fA-F]{6}$", "a colour such as #1c7ed6")]
    )
    built_in = models.BooleanField(default=False)
    position = models.PositiveSmallIntegerField(default=100, help_text="Order on pages and number-key shortcuts.")

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name
