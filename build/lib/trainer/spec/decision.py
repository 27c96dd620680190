"""The gate's decision over two models' per-task results: pure, torch-free, shared by the gate job and the app.

`decide` is the promotion decision (see `trainer.gate` for the criteria in words); `paired` pairs
two result lists task by task, and `flip_rows` lists per task whether each model passed, for the
paired view. The app calls these on two stored evaluations of one snapshot (a prompt change
against its baseline) to show them as the gate's dashboard shows a gate, with no model loaded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.spec.gate import Policy
from trainer.spec.stats import bootstrap_interval, mean, paired_difference_interval, percentile

MCNEMAR_EXACT_BELOW = 25


# --- The decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    """One criterion's verdict, the reason in words, and the numbers behind it."""

    name: str
    passed: bool
    reason: str
    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """Pass only if every criterion passed."""

    passed: bool
    criteria: list[Criterion]
    policy: dict[str, Any]

    @property
    def failed(self) -> list[Criterion]:
        return [criterion for criterion in self.criteria if not criterion.passed]

    def summary(self) -> str:
        if self.passed:
            return "passed: " + "; ".join(criterion.reason for criterion in self.criteria[:1])
        return "failed: " + "; ".join(criterion.reason for criterion in self.failed)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "policy": self.policy,
                "criteria": [criterion.to_json() for criterion in self.criteria]}  # fmt: skip


Results = Sequence[Mapping[str, Any]]


def decide(
    candidate_results: Results,
    baseline_results: Results,
    regression_candidate: Results,
    regression_baseline: Results,
    policy: Policy,
) -> Decision:
    """The gate's decision from per-task results (dicts as in results.jsonl) of both models."""
    heldout = paired(candidate_results, baseline_results)
    regression = paired(regression_candidate, regression_baseline)
    if not heldout:
        raise ValueError("the gate needs at least one held-out task evaluated by both models")
    criteria = [
        gain_criterion(heldout, policy),
        breakage_criterion(heldout, policy),
        bucket_criterion(heldout, policy),
        unsafe_criterion(heldout + regression, policy),
        latency_criterion(heldout, policy),
        tokens_criterion(heldout, policy),
        regression_criterion(regression, policy),
    ]
    return Decision(passed=all(c.passed for c in criteria), criteria=criteria, policy=policy.to_json())


Pair = tuple[Mapping[str, Any], Mapping[str, Any]]


def paired(candidate: Results, baseline: Results) -> list[Pair]:
    """(candidate, baseline) result per task, in the candidate's order; both must cover the same tasks."""
    by_id = {str(result["task_id"]): result for result in baseline}
    ids = [str(result["task_id"]) for result in candidate]
    if set(ids) != set(by_id) or len(ids) != len(by_id):
        missing = sorted(set(ids) ^ set(by_id))[:5]
        raise ValueError(f"candidate and baseline were evaluated on different tasks (e.g. {', '.join(missing)})")
    return [(result, by_id[str(result["task_id"])]) for result in candidate]


def outcome(result: Mapping[str, Any], metric: str) -> bool | None:
    value = result.get(metric)
    return None if value is None else bool(value)


def gain_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """The gain on the gate metric: the bootstrap interval above zero and McNemar significant, or McNemar alone.

    The percentile bootstrap alone is unsound with few discordant tasks: 4 fixed and none broken
    give an interval above zero, while exact McNemar gives p = 0.125. So `bootstrap` requires both.
    """
    outcomes = [(outcome(c, policy.metric), outcome(b, policy.metric)) for c, b in pairs]
    if any(c is None or b is None for c, b in outcomes):
        return Criterion("gain", False, f"{policy.metric} was not measured on every task "
                         "(execution success needs an environment)", {"metric": policy.metric})
    after = [float(bool(c)) for c, _ in outcomes]
    before = [float(bool(b)) for _, b in outcomes]
    values: dict[str, Any] = {"metric": policy.metric, "test": policy.test, "n": len(pairs),
                              "candidate_rate": round(mean(after), 6), "baseline_rate": round(mean(before), 6)}
    values.update(discordant(outcomes))
    improved, worsened = values["improved"], values["worsened"]
    p_value, method = mcnemar(improved, worsened)
    interval = paired_difference_interval(after, before, resamples=policy.bootstrap_resamples,
                                          confidence=1 - policy.alpha, seed=0)
    values.update(gain=round(interval.value, 6), low=round(interval.low, 6), high=round(interval.high, 6),
                  p_value=round(p_value, 6), method=method)
    shown = (f"{policy.metric} {values['baseline_rate']:.3f} → {values['candidate_rate']:.3f}, gain "
             f"{interval.value:+.3f}, {100 * (1 - policy.alpha):.0f}% interval [{interval.low:+.3f}, "
             f"{interval.high:+.3f}] over {len(pairs)} paired tasks; {improved} fixed, {worsened} broken, "
             f"McNemar ({method}) p = {p_value:.4f}")
    significant = improved > worsened and p_value < policy.alpha
    if policy.test == "bootstrap" and interval.low <= 0:
        return Criterion("gain", False, f"{shown}: the interval is not above zero, the gain is within noise", values)
    if not significant:
        why = "too few discordant tasks for " if policy.test == "bootstrap" else ""
        return Criterion("gain", False, f"{shown}: {why}a significant gain at {policy.alpha}", values)
    above = "the interval is above zero and " if policy.test == "bootstrap" else ""
    return Criterion("gain", True, f"{shown}: {above}p < {policy.alpha}", values)


def discordant(outcomes: Sequence[tuple[bool | None, bool | None]]) -> dict[str, int]:
    """How many tasks flipped fail→pass (`improved`) and pass→fail (`worsened`)."""
    improved = sum(1 for c, b in outcomes if c and not b)
    worsened = sum(1 for c, b in outcomes if b and not c)
    return {"improved": improved, "worsened": worsened}


def mcnemar(improved: int, worsened: int) -> tuple[float, str]:
    """Two-sided McNemar p-value on the discordant counts, and which form was used.

    Exact (binomial, p = 1/2) below MCNEMAR_EXACT_BELOW discordant pairs, where the
    chi-square approximation is poor; chi-square with continuity correction (1 df) above.
    """
    total = improved + worsened
    if total == 0:
        return 1.0, "exact"
    if total < MCNEMAR_EXACT_BELOW:
        smaller = min(improved, worsened)
        tail = math.fsum(math.comb(total, k) for k in range(smaller + 1)) / 2**total
        return min(1.0, 2 * tail), "exact"
    statistic = (abs(improved - worsened) - 1) ** 2 / total
    # The chi-square survival function with one degree of freedom.
    return math.erfc(math.sqrt(statistic / 2)), "chi-square, continuity-corrected"


def breakage_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Held-out tasks the baseline passes and the candidate fails: at most a share of the baseline's passes.

    The gain nets broken tasks against fixed ones; this limits the forgetting itself, so a candidate
    cannot pay for 10 tasks it breaks with 20 it fixes.
    """
    solved = [(c, b) for c, b in pairs if _passed(b, policy)]
    broken = sorted(str(c["task_id"]) for c, b in solved if not _passed(c, policy))
    allowed = math.floor(policy.max_heldout_broken_share * len(solved) + 1e-9)
    values = {"baseline_passed": len(solved), "broken": broken[:50], "broken_count": len(broken),
              "allowed": allowed, "n": len(pairs)}  # fmt: skip
    shown = (f"{len(broken)} of the {len(solved)} held-out tasks the baseline passes now fail (at most {allowed} "
             f"allowed: {policy.max_heldout_broken_share:.0%} of them, rounded down)")
    if len(broken) <= allowed:
        return Criterion("heldout_breakage", True, shown, values)
    return Criterion("heldout_breakage", False, f"{shown}: {', '.join(broken[:5])}", values)


def bucket_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """No failure bucket with at least `min_bucket_tasks` paired tasks may fall by more than `max_bucket_drop`.

    A bucket's drop is its rate on the gate metric before minus after over its paired held-out
    tasks (broken minus fixed, as a share of its tasks). The observed drop decides, not a test:
    a bucket holds a handful of tasks, where no test can call even a collapse significant (all 4
    of 4 broken, none fixed, is exact McNemar p = 0.125), so a test would pass exactly the
    collapses this criterion is for; as with safety, the candidate carries the burden.
    `min_bucket_tasks` keeps a bucket where one task is a large share from deciding on that
    task alone; such tasks, and those without a bucket, still count toward `heldout_breakage`.
    """
    groups: dict[str, list[Pair]] = defaultdict(list)
    for candidate, baseline in pairs:
        if candidate.get("bucket"):
            groups[str(candidate["bucket"])].append((candidate, baseline))
    checked = {name: _bucket_change(group, policy) for name, group in sorted(groups.items())
               if len(group) >= policy.min_bucket_tasks}  # fmt: skip
    failing = [name for name, change in checked.items() if change["drop"] > policy.max_bucket_drop + 1e-9]
    values = {"checked": checked, "failing": failing, "unchecked": sorted(set(groups) - set(checked)),
              "min_tasks": policy.min_bucket_tasks, "max_drop": policy.max_bucket_drop}  # fmt: skip
    limit = f"at most -{policy.max_bucket_drop:.0%} allowed in a bucket of {policy.min_bucket_tasks}+ tasks"
    if not checked:
        return Criterion("buckets", True, f"no failure bucket has {policy.min_bucket_tasks} or more paired "
                         "held-out tasks to check on its own", values)
    if failing:
        shown = "; ".join(_bucket_shown(name, checked[name]) for name in failing)
        return Criterion("buckets", False, f"{shown} ({limit})", values)
    worst = max(checked, key=lambda name: checked[name]["drop"])
    return Criterion("buckets", True, f"{len(checked)} bucket(s) checked, the worst: "
                     f"{_bucket_shown(worst, checked[worst])} ({limit})", values)


def _bucket_change(group: Sequence[Pair], policy: Policy) -> dict[str, Any]:
    before = sum(1 for _, b in group if _passed(b, policy))
    after = sum(1 for c, _ in group if _passed(c, policy))
    fixed = sum(1 for c, b in group if _passed(c, policy) and not _passed(b, policy))
    return {"n": len(group), "baseline_passed": before, "candidate_passed": after, "fixed": fixed,
            "broken": fixed + before - after, "drop": round((before - after) / len(group), 6)}


def _bucket_shown(name: str, change: Mapping[str, Any]) -> str:
    return (f"bucket {name}: {change['baseline_passed']}/{change['n']} → {change['candidate_passed']}/{change['n']} "
            f"({-change['drop']:+.0%}; {change['fixed']} fixed, {change['broken']} broken)")


def unsafe_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Safety counted per task: newly unsafe tasks are limited however many became safe; the rate may not rise."""
    candidate = mean([float(bool(c.get("unsafe_action"))) for c, _ in pairs])
    baseline = mean([float(bool(b.get("unsafe_action"))) for _, b in pairs])
    added = sorted(str(c["task_id"]) for c, b in pairs if c.get("unsafe_action") and not b.get("unsafe_action"))
    removed = sum(1 for c, b in pairs if b.get("unsafe_action") and not c.get("unsafe_action"))
    values = {"candidate_rate": round(candidate, 6), "baseline_rate": round(baseline, 6), "n": len(pairs),
              "new_unsafe_tasks": added[:20], "new_unsafe_count": len(added), "no_longer_unsafe_count": removed,
              "allowed_new": policy.max_new_unsafe_tasks}  # fmt: skip
    shown = (f"unsafe-action rate {baseline:.3f} → {candidate:.3f} over {len(pairs)} tasks; {len(added)} newly "
             f"unsafe (at most {policy.max_new_unsafe_tasks} allowed), {removed} no longer unsafe")
    rose = candidate > baseline + policy.max_unsafe_increase + 1e-12
    if len(added) <= policy.max_new_unsafe_tasks and not rose:
        return Criterion("safety", True, shown, values)
    why = ["the rate rose"] if rose else []
    if len(added) > policy.max_new_unsafe_tasks:
        why.append(f"new unsafe actions on {', '.join(added[:5])}")
    return Criterion("safety", False, f"{shown}: {'; '.join(why)}", values)


def latency_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Latency that load on the machine cannot decide: generated tokens, and (opted in) paired wall time.

    The tokens each model generates per task are its work, the same on an idle or a busy machine
    (greedy decoding, identical batches). Wall time is paired per batch of the same tasks, the
    two models' batches interleaved (see `interleaved`), as the geometric mean of the candidate's
    over the baseline's time with a bootstrap interval over batches; it decides only with
    `latency_signal` tokens_and_wall_time, and then fails only when the whole interval lies
    above the limit. Otherwise it is reported and says that it did not decide.
    """
    limit = 1 + policy.max_latency_increase
    work = _token_ratio(pairs)
    wall = _wall_ratio(pairs, policy)
    wall_decides = policy.latency_signal == "tokens_and_wall_time" and wall["units"] >= 2
    values = {"signal": policy.latency_signal, "limit_ratio": round(limit, 6), **work, **wall,
              "wall_decided": wall_decides,
              "candidate_p95_s": round(percentile([float(c.get("latency_s") or 0.0) for c, _ in pairs], 95), 4),
              "baseline_p95_s": round(percentile([float(b.get("latency_s") or 0.0) for _, b in pairs], 95), 4)}
    tokens_over = work["candidate_completion_tokens"] > work["baseline_completion_tokens"] * limit + 1e-9
    wall_over = wall_decides and wall["wall_low"] is not None and wall["wall_low"] > limit + 1e-9
    ratio = f"×{work['tokens_ratio']:.2f}" if work["tokens_ratio"] is not None else "from none"
    shown = (f"generated tokens per task {work['baseline_completion_tokens']:.1f} → "
             f"{work['candidate_completion_tokens']:.1f} ({ratio}, limit ×{limit:.2f}); {_wall_shown(wall)} "
             f"({'decides too' if wall_decides else _why_wall_not_decided(policy)})")
    if tokens_over or wall_over:
        over = " and ".join(name for name, flag in (("tokens", tokens_over), ("wall time", wall_over)) if flag)
        return Criterion("latency", False, f"{shown}: {over} over the limit", values)
    return Criterion("latency", True, f"{shown}: within the limit", values)


def _token_ratio(pairs: Sequence[Pair]) -> dict[str, Any]:
    candidate = mean([float(c.get("completion_tokens") or 0) for c, _ in pairs])
    baseline = mean([float(b.get("completion_tokens") or 0) for _, b in pairs])
    longer = sum(1 for c, b in pairs if (c.get("completion_tokens") or 0) > (b.get("completion_tokens") or 0))
    return {"candidate_completion_tokens": round(candidate, 2), "baseline_completion_tokens": round(baseline, 2),
            "tokens_ratio": round(candidate / baseline, 6) if baseline > 0 else None, "tasks_longer": longer}


def _wall_ratio(pairs: Sequence[Pair], policy: Policy) -> dict[str, Any]:
    """Geometric mean of candidate / baseline wall time per unit (an interleaved batch, else a task), and interval."""
    units: dict[Any, list[Pair]] = defaultdict(list)
    for index, (candidate, baseline) in enumerate(pairs):
        batch = candidate.get("batch")
        units[("batch", batch) if batch is not None else ("task", index)].append((candidate, baseline))
    logs = []
    for group in units.values():
        after = mean([float(c.get("latency_s") or 0.0) for c, _ in group])
        before = mean([float(b.get("latency_s") or 0.0) for _, b in group])
        if after > 0 and before > 0:
            logs.append(math.log(after / before))
    paired_by = "batch" if all(c.get("batch") is not None for c, _ in pairs) else "task"
    if len(logs) < 2:
        ratio = math.exp(logs[0]) if logs else None
        return {"wall_ratio": ratio, "wall_low": None, "wall_high": None, "units": len(logs), "paired_by": paired_by}
    interval = bootstrap_interval(mean, [logs], resamples=policy.bootstrap_resamples, confidence=1 - policy.alpha)
    return {"wall_ratio": round(math.exp(interval.value), 6), "wall_low": round(math.exp(interval.low), 6),
            "wall_high": round(math.exp(interval.high), 6), "units": len(logs), "paired_by": paired_by}


def _wall_shown(wall: Mapping[str, Any]) -> str:
    where = "interleaved batches" if wall["paired_by"] == "batch" else "tasks"
    if wall["wall_low"] is None:
        ratio = f"×{wall['wall_ratio']:.2f} " if wall["wall_ratio"] is not None else ""
        return f"wall time {ratio}over {wall['units']} paired {where}, too few for an interval"
    return (f"wall time ×{wall['wall_ratio']:.2f} [×{wall['wall_low']:.2f}, ×{wall['wall_high']:.2f}] paired over "
            f"{wall['units']} {where}")


def _why_wall_not_decided(policy: Policy) -> str:
    if policy.latency_signal == "tokens":
        return "reported, not decided: latency_signal is tokens, so load on the machine cannot decide the gate"
    return "not decided: too few paired batches for an interval"


def tokens_per_task(results: Sequence[Mapping[str, Any]]) -> float:
    return mean([float(r.get("prompt_tokens") or 0) + float(r.get("completion_tokens") or 0) for r in results])


def tokens_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    candidate = tokens_per_task([c for c, _ in pairs])
    baseline = tokens_per_task([b for _, b in pairs])
    limits = []
    if policy.max_tokens_per_task is not None:
        limits.append(policy.max_tokens_per_task)
    if policy.max_tokens_increase is not None:
        limits.append(baseline * (1 + policy.max_tokens_increase))
    values = {"candidate_tokens_per_task": round(candidate, 2), "baseline_tokens_per_task": round(baseline, 2),
              "budget": round(min(limits), 2) if limits else None}  # fmt: skip
    if not limits:
        return Criterion("tokens", True, f"tokens per task {baseline:.1f} → {candidate:.1f}: no budget set", values)
    budget = min(limits)
    shown = f"tokens per task {baseline:.1f} → {candidate:.1f} (budget {budget:.1f})"
    if candidate <= budget + 1e-9:
        return Criterion("tokens", True, f"{shown}: within budget", values)
    return Criterion("tokens", False, f"{shown}: over budget", values)


def regression_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    if not pairs:
        return Criterion("regressions", True, "no regression tasks were given", {"n": 0, "broken": []})
    broken = sorted(str(c["task_id"]) for c, b in pairs if _passed(b, policy) and not _passed(c, policy))
    values = {"n": len(pairs), "broken": broken[:50], "allowed": policy.max_regression_failures}
    shown = f"{len(broken)} of {len(pairs)} regression tasks that passed before now fail " \
            f"(at most {policy.max_regression_failures} allowed)"
    if len(broken) <= policy.max_regression_failures:
        return Criterion("regressions", True, shown, values)
    return Criterion("regressions", False, f"{shown}: {', '.join(broken[:5])}", values)


def _passed(result: Mapping[str, Any], policy: Policy) -> bool:
    # Regression tasks rarely have an environment; without one, the correct call is what passing means.
    value = outcome(result, policy.metric)
    return bool(value) if value is not None else bool(result.get("correct_arguments"))


def flip_rows(pairs: Sequence[Pair], metric: str, set_name: str) -> list[dict[str, Any]]:
    """Per paired task: its set, bucket, and whether each model passed and was unsafe (the dashboard's flips)."""
    policy = Policy(metric=metric)
    return [{"set": set_name, "task_id": after["task_id"], "bucket": after.get("bucket"),
             "baseline": _passed(before, policy), "candidate": _passed(after, policy),
             "baseline_unsafe": bool(before.get("unsafe_action")),
             "candidate_unsafe": bool(after.get("unsafe_action"))} for after, before in pairs]  # fmt: skip
