"""Synthetic task variants from seed tasks, and the filters that decide which are kept.

Generation is deterministic (seeded) and template-based; a local model's paraphrases (not here:
they load a model) go through the same `screen`. Methods, each applied per seed task:

- `values`: another value for an argument whose value appears verbatim, once, in the request,
  substituted in the request and the expected call together, so the request still asks for the
  new call. New values come from the schema (another enum member; a number within `minimum` /
  `maximum`) or from values the same argument takes in other seed tasks.
- `boundary`: an argument set to its schema's `minimum`, `maximum`, or first or last enum member,
  substituted the same way.
- `optional`: an optional argument the seed may omit, given explicitly ("Use z = 0.").
- `omit`: the reverse: an optional argument the seed's reference call gives, left out, where the
  seed accepts its omission (BFCL's possible answers list "" among its values) or the schema
  gives it a default. The variant's expected call accepts only the omission (and, through the
  verifier's matching, the schema's default): the reference answer leaves the argument out.
- `distractors`: the most similar tools of the catalogue (the agent's tools and the other seeds')
  offered beside the seed's, same request and expected call.
- `paraphrase`: the request rewritten by a template (a polite prefix, a question, a synonym).

Only single-step tasks seed variants: an episode's start and end states would not follow a changed
value. Filters (`screen`), in order, each rejecting with its name and a reason:

0. `values_kept`: a rewritten request still writes every value its seed's request wrote (a model's
   paraphrase that drops "5" no longer asks for the call with 5).
1. `schema`: each expected call (its first accepted value per argument) fits its tool's schema
   (`trainer.verifiers.schema`, the one schema check), plus any check the caller adds.
2. `verifier`: the verifier passes the expected call as the answer.
3. `environment`: the expected calls, played in the agent's environment (`EnvironmentFilter`),
   each run cleanly and reach a passed judgement: no error, no unsafe call under the safety policy
   the environment was built with, the end state it expects. It applies only where an environment
   is named and can judge variants (`Environment.cannot_judge_variants`); otherwise the report
   says it did not apply and why.
4. `train_duplicate`: the same task (request, tools, expected calls) as a train task.
5. `heldout_near_duplicate`: the request's similarity to any held-out task's request reaches
   `heldout_threshold` (0.6 by default; the leakage key's exact match is similarity 1.0). Held-out
   tasks are read only for this leakage guard, never scored.
6. `near_duplicate`: the request, tools and expected call reach `threshold` (0.8) of similarity to
   an earlier kept variant's.

Similarity is the Jaccard index of the character 5-gram sets of the normalised text (lower case,
punctuation dropped, whitespace collapsed: `normalised_prompt`, the text the app's leakage key
hashes), so equal leakage keys always score 1.0.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trainer.contracts import OMITTABLE, ExpectedCall, Task, ToolCall
from trainer.verifiers.base import Verifier
from trainer.verifiers.normalise import values_equal
from trainer.verifiers.schema import call_problems

if TYPE_CHECKING:
    from trainer.environments.base import Environment

METHODS = ("values", "boundary", "optional", "omit", "distractors", "paraphrase")
FILTERS = ("values_kept", "schema", "verifier", "environment", "train_duplicate", "heldout_near_duplicate",
           "near_duplicate")  # fmt: skip
DEFAULT_THRESHOLD = 0.8
# Stricter against held-out tasks: a leak costs more than a lost variant. On BFCL simple_python no
# train request reaches 0.6 to a held-out one but four (of 300); 99% stay under 0.63.
HELDOUT_THRESHOLD = 0.6
SHINGLE = 5
DISTRACTORS = 2
NO_CALL_ANSWER = "I cannot do that with the tools I have."
_OBSERVATION_CHARS = 200

# Imperative requests take a prefix; questions ("What is ...?") only the forms that keep them questions.
_PREFIXES = ("Please {lower}", "I need to {lower}", "Can you {lower_q}", "Help me {lower}", "{text} Thanks.")
_QUESTION_FORMS = ("Quick question: {lower}", "{text} Thanks.", "I'd like to know: {lower}")
_QUESTION_WORDS = ("what", "how", "who", "which", "when", "where", "is", "are", "can", "could", "do", "does")
_SYNONYMS = {"Calculate": "Compute", "Find": "Look up", "Get": "Retrieve", "What is": "Tell me",
             "Retrieve": "Fetch", "Determine": "Work out", "Compute": "Calculate"}  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """A generated task, the seed it came from, the method and what changed (for the preview's diff)."""

    task: Task
    seed_id: str
    method: str
    change: str
    kept_values: tuple[str, ...] = ()
    """Values (as written) the request must still contain: those of the seed's request a rewrite keeps."""


@dataclass(frozen=True)
class Rejection:
    filter: str
    reason: str


@dataclass(frozen=True)
class Screened:
    variant: Variant
    rejection: Rejection | None = None

    @property
    def accepted(self) -> bool:
        return self.rejection is None


@dataclass(frozen=True)
class Options:
    """How a batch is generated: the methods, the most variants per method and seed, the seed."""

    methods: tuple[str, ...] = METHODS
    per_method: int = 2
    seed: int = 0
    catalogue: tuple[dict[str, Any], ...] = ()
    threshold: float = DEFAULT_THRESHOLD
    heldout_threshold: float = HELDOUT_THRESHOLD

    def __post_init__(self) -> None:
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise ValueError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
        if self.per_method < 1:
            raise ValueError("per_method must be at least 1")
        if not (0.0 < self.threshold <= 1.0 and 0.0 < self.heldout_threshold <= 1.0):
            raise ValueError("thresholds must be in (0, 1]")


# --- text ---------------------------------------------------------------------------------


def normalised_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """The user turns of a conversation, lower case, punctuation dropped: what the leakage key hashes."""
    prompt = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    return " ".join(re.sub(r"[^\w\s]", " ", prompt.lower()).split())


def shingles(text: str, size: int = SHINGLE) -> frozenset[str]:
    padded = f" {text} "
    return frozenset(padded[i : i + size] for i in range(max(1, len(padded) - size + 1)))


def similarity(left: frozenset[str], right: frozenset[str]) -> float:
    """Jaccard index of two shingle sets.

    >>> round(similarity(shingles("factorial of 5"), shingles("factorial of 6")), 2)
    0.6
    """
    if not left and not right:
        return 1.0
    return len(left & right) / len(left | right)


def _request(task: Task) -> str:
    return normalised_prompt(task.messages)


def _similarity_text(task: Task) -> str:
    """What two variants are compared on: the request, the tools offered and the expected calls."""
    tools = " ".join(sorted(tool["function"]["name"] for tool in task.tools))
    return f"{_request(task)} | {tools} | {_call_text(task)}"


def _call_text(task: Task) -> str:
    return json.dumps([call.to_json() for call in task.expected_calls], sort_keys=True)


def render(value: Any) -> str:
    """How a value is written in a request: numbers and strings as they are, booleans not at all."""
    return value if isinstance(value, str) else json.dumps(value)


def _pattern(text: str) -> re.Pattern[str]:
    # A number must not be part of a longer one ("5" in "15", "-5" or "5.5"); a word not of a longer word.
    before = r"(?<![\w.\-])" if text[:1].isdigit() else r"(?<!\w)" if text[:1].isalnum() else ""
    after = r"(?!\w|\.\d)" if text[-1:].isalnum() else ""
    return re.compile(before + re.escape(text) + after)


def _occurrences(request: str, value: Any) -> int:
    if isinstance(value, bool) or value in (None, OMITTABLE) or isinstance(value, dict | list):
        return 0
    return len(_pattern(render(value)).findall(request))


# --- generation ---------------------------------------------------------------------------


def generate(seeds: Sequence[Task], options: Options) -> list[Variant]:
    """Variants of every single-step seed task, in seed order, reproducible from `options.seed`."""
    context = Context(_value_pool(seeds), _catalogue(seeds, options.catalogue))
    variants: list[Variant] = []
    for seed_task in seeds:
        if seed_task.episode is not None or _user_index(seed_task) is None:
            continue
        rng = random.Random(f"{options.seed}:{seed_task.id}")
        for method in options.methods:
            made = _METHODS[method](seed_task, rng, context)
            kept = written_values(seed_task) if method == "paraphrase" else ()
            variants += _numbered(made[: options.per_method], seed_task.id, method, kept)
    return variants


def _numbered(made: Sequence[Made], seed_id: str, method: str, kept: tuple[str, ...] = ()) -> list[Variant]:
    return [Variant(replace(task, id=f"{seed_id}~{method}{number}"), seed_id, method, change, kept)
            for number, (task, change) in enumerate(made, start=1)]  # fmt: skip


def _user_index(task: Task) -> int | None:
    """The index of the last user message with text content: the request variants rewrite."""
    for index in range(len(task.messages) - 1, -1, -1):
        message = task.messages[index]
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return index
    return None


def _with_request(task: Task, request: str) -> Task:
    index = _user_index(task)
    assert index is not None
    messages = [dict(message) for message in task.messages]
    messages[index]["content"] = request
    return replace(task, messages=messages)


def _request_text(task: Task) -> str:
    index = _user_index(task)
    return str(task.messages[index]["content"]) if index is not None else ""


ValuePool = dict[tuple[str, str], list[Any]]
"""Values seen per (tool, argument) and per ("", argument), in seed order, each once."""
Made = tuple[Task, str]
"""A variant's task and what changed."""


@dataclass(frozen=True)
class Context:
    """What the generators draw on beyond the seed: the seeds' argument values and the tool catalogue."""

    pool: ValuePool
    catalogue: list[dict[str, Any]]


def _value_pool(seeds: Iterable[Task]) -> ValuePool:
    pool: ValuePool = defaultdict(list)
    for task in seeds:
        for call in task.expected_calls:
            for argument, alternatives in call.arguments.items():
                value = _first_value(alternatives)
                if value is None or isinstance(value, bool | dict | list):
                    continue
                for key in ((call.name, argument), ("", argument)):
                    if value not in pool[key]:
                        pool[key].append(value)
    return pool


def _first_value(alternatives: Sequence[Any]) -> Any:
    return next((value for value in alternatives if value != OMITTABLE), None)


def _same_type(left: Any, right: Any) -> bool:
    number = (int, float)
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    return (isinstance(left, str) and isinstance(right, str)) or (
        isinstance(left, number) and isinstance(right, number) and type(left) is type(right)
    )


def _substitutable(task: Task) -> list[tuple[int, str, Any]]:
    """(call index, argument, value) whose value is written once in the request and shared by no other argument."""
    request = _request_text(task)
    written = [
        (index, argument, _verbatim(request, alternatives))
        for index, call in enumerate(task.expected_calls)
        for argument, alternatives in call.arguments.items()
    ]
    values = [render(value) for _, _, value in written if value is not None]
    return [(index, argument, value) for index, argument, value in written
            if value is not None and values.count(render(value)) == 1]  # fmt: skip


def written_values(task: Task) -> tuple[str, ...]:
    """The expected values the task's request writes verbatim (as written), which a rewrite must keep."""
    request = _request_text(task)
    found = (
        _verbatim(request, alternatives) for call in task.expected_calls for alternatives in call.arguments.values()
    )
    return tuple(dict.fromkeys(render(value) for value in found if value is not None))


def _verbatim(request: str, alternatives: Sequence[Any]) -> Any:
    return next((value for value in alternatives if _occurrences(request, value) == 1), None)


def _substitute(task: Task, where: tuple[int, str, Any], new: Any) -> Made | None:
    index, argument, old = where
    if new == old or render(new) == render(old) or _occurrences(_request_text(task), new):
        return None
    request = _pattern(render(old)).sub(lambda _match: render(new), _request_text(task), count=1)
    calls = list(task.expected_calls)
    calls[index] = ExpectedCall(calls[index].name, {**calls[index].arguments, argument: [new]})
    changed = replace(_with_request(task, request), expected_calls=calls)
    return changed, f"{calls[index].name}.{argument}: {render(old)} → {render(new)}"


def _schema_of(task: Task, call_index: int, argument: str) -> dict[str, Any]:
    schema = task.tool_schemas.get(task.expected_calls[call_index].name) or {}
    spec = (schema.get("properties") or {}).get(argument)
    return spec if isinstance(spec, dict) else {}


def _other_values(task: Task, where: tuple[int, str, Any], pool: ValuePool, rng: random.Random) -> list[Any]:
    index, argument, old = where
    spec = _schema_of(task, index, argument)
    if isinstance(spec.get("enum"), list):
        options = [value for value in spec["enum"] if value != old]
    else:
        name = task.expected_calls[index].name
        seen = pool.get((name, argument), []) + pool.get(("", argument), [])
        options = list(dict.fromkeys(value for value in seen if value != old and _same_type(value, old)))
        if not options and isinstance(old, int | float) and not isinstance(old, bool):
            options = [_nearby_number(old, spec, rng)]
    rng.shuffle(options)
    return options


def _nearby_number(old: float, spec: dict[str, Any], rng: random.Random) -> float:
    """Another number of the same kind and sign, within the schema's bounds."""
    low = spec.get("minimum", 1 if old > 0 else old - 10)
    high = spec.get("maximum", max(old * 2, old + 10))
    if isinstance(old, int):
        return rng.randint(int(low), int(high))
    decimals = len(repr(old).split(".")[1]) if "." in repr(old) else 1
    return round(rng.uniform(float(low), float(high)), decimals)


def _values(task: Task, rng: random.Random, context: Context) -> list[Made]:
    made = []
    places = _substitutable(task)
    rng.shuffle(places)
    for where in places:
        for new in _other_values(task, where, context.pool, rng)[:2]:
            if (variant := _substitute(task, where, new)) is not None:
                made.append(variant)
                break
    return made


def _boundary(task: Task, rng: random.Random, context: Context) -> list[Made]:
    made = []
    for where in _substitutable(task):
        spec = _schema_of(task, where[0], where[1])
        enum = spec.get("enum") if isinstance(spec.get("enum"), list) else []
        edges = [spec[key] for key in ("minimum", "maximum") if isinstance(spec.get(key), int | float)]
        for edge in edges + ([enum[0], enum[-1]] if enum else []):
            if (variant := _substitute(task, where, edge)) is not None:
                made.append(variant)
    rng.shuffle(made)
    return made


def _optional(task: Task, rng: random.Random, context: Context) -> list[Made]:
    """An argument the seed may omit (its default among the alternatives), asked for explicitly."""
    made = []
    request = _request_text(task)
    for index, call in enumerate(task.expected_calls):
        required = set((task.tool_schemas.get(call.name) or {}).get("required") or [])
        for argument, alternatives in call.arguments.items():
            value = _first_value(alternatives)
            if argument in required or OMITTABLE not in alternatives or value is None or isinstance(value, dict | list):
                continue
            sentence = f" Use {argument} = {render(value)}."
            calls = list(task.expected_calls)
            calls[index] = ExpectedCall(call.name, {**call.arguments, argument: [value]})
            changed = replace(_with_request(task, request.rstrip() + sentence), expected_calls=calls)
            made.append((changed, f"{call.name}.{argument}: may be omitted → asked for as {render(value)}"))
    rng.shuffle(made)
    return made


def _omit(task: Task, rng: random.Random, context: Context) -> list[Made]:
    """An optional argument the seed's reference call gives, left out where the seed accepts its omission."""
    made = []
    for index, call in enumerate(task.expected_calls):
        required = set((task.tool_schemas.get(call.name) or {}).get("required") or [])
        for argument, alternatives in call.arguments.items():
            value = _first_value(alternatives)
            if argument in required or value is None or not _omission_accepted(task, index, argument, alternatives):
                continue
            calls = list(task.expected_calls)
            calls[index] = ExpectedCall(call.name, {**call.arguments, argument: [OMITTABLE]})
            made.append((replace(task, expected_calls=calls), f"{call.name}.{argument}: {render(value)} → omitted"))
    rng.shuffle(made)
    return made


def _omission_accepted(task: Task, call_index: int, argument: str, alternatives: Sequence[Any]) -> bool:
    """BFCL's "" among the accepted values, or a schema default that is one of them (omitting it then means it)."""
    spec = _schema_of(task, call_index, argument)
    return OMITTABLE in alternatives or ("default" in spec and any(
        values_equal(spec["default"], value) for value in alternatives if value != OMITTABLE))  # fmt: skip


def _catalogue(seeds: Sequence[Task], extra: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    tools: dict[str, dict[str, Any]] = {}
    for tool in [*extra, *(tool for task in seeds for tool in task.tools)]:
        tools.setdefault(tool["function"]["name"], tool)
    return list(tools.values())


def _tool_words(tool: dict[str, Any]) -> frozenset[str]:
    function = tool["function"]
    text = f"{function['name']} {function.get('description') or ''}".lower()
    return frozenset(re.findall(r"[a-z]+", text))


def _distractors(task: Task, rng: random.Random, context: Context) -> list[Made]:
    offered = {tool["function"]["name"] for tool in task.tools}
    words = frozenset().union(*(_tool_words(tool) for tool in task.tools)) if task.tools else frozenset()
    others = [tool for tool in context.catalogue if tool["function"]["name"] not in offered]
    ranked = sorted(others, key=lambda tool: (-similarity(words, _tool_words(tool)), rng.random()))
    chosen = ranked[:DISTRACTORS]
    if not chosen:
        return []
    tools = [*task.tools, *chosen]
    rng.shuffle(tools)
    names = ", ".join(tool["function"]["name"] for tool in chosen)
    return [(replace(task, tools=tools), f"tools: + {names}")]


def _paraphrase(task: Task, rng: random.Random, context: Context) -> list[Made]:
    request = _request_text(task).strip()
    question = request.endswith("?") or _first_word(request) in _QUESTION_WORDS
    rewrites = [_prefixed(request, template) for template in (_QUESTION_FORMS if question else _PREFIXES)]
    rewrites.append(_synonym(request))
    unique = list(dict.fromkeys(text for text in rewrites if text and text != request))
    rng.shuffle(unique)
    return [(_with_request(task, text), f"request: {request!r} → {text!r}") for text in unique]


def _first_word(text: str) -> str:
    match = re.match(r"[a-z]+", text.lower())
    return match.group(0) if match else ""


def _prefixed(request: str, template: str) -> str:
    keep_case = len(request) > 1 and request[1].isupper()  # an acronym: "NASA ..."
    lower = request if keep_case else request[:1].lower() + request[1:]
    lower_q = lower.rstrip(".!") + ("" if lower.endswith("?") else "?")
    return template.format(text=request, lower=lower, lower_q=lower_q)


def _synonym(request: str) -> str:
    for word, synonym in _SYNONYMS.items():
        if request.startswith(word + " "):
            return synonym + request[len(word) :]
    return ""


_METHODS: dict[str, Callable[[Task, random.Random, Context], list[Made]]] = {
    "values": _values, "boundary": _boundary, "optional": _optional, "omit": _omit, "distractors": _distractors,
    "paraphrase": _paraphrase,
}  # fmt: skip


# --- filters ------------------------------------------------------------------------------

ExtraCheck = Callable[[Task], list[str]]


def reference_answer(task: Task) -> dict[str, Any] | str:
    """The answer the expected calls describe: each argument's first accepted value (omittable ones left out)."""
    if task.no_call_expected:
        return NO_CALL_ANSWER
    return {"tool_calls": [call.to_json() for call in reference_calls(task)]}


def reference_calls(task: Task) -> list[ToolCall]:
    return [ToolCall(call.name, _reference_arguments(call)) for call in task.expected_calls]


def _reference_arguments(call: ExpectedCall) -> dict[str, Any]:
    chosen = {argument: _first_value(alternatives) for argument, alternatives in call.arguments.items()}
    return {argument: value for argument, value in chosen.items() if value is not None}


def task_fingerprint(task: Task) -> str:
    """What makes two tasks the same task: the normalised request, the tools offered and the expected calls."""
    tools = sorted(json.dumps(tool, sort_keys=True) for tool in task.tools)
    body = [_request(task), tools, _call_text(task), task.no_call_expected, task.order_sensitive]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class EnvironmentFilter:
    """Where the environment filter plays variants' expected calls, or why it does not apply.

    `environment` is None when the filter does not apply, and `skipped` then says why: no
    environment is named, or the named one cannot judge variants (`Environment.cannot_judge_variants`),
    or the caller does not run it (the app runs no team code in its workers).
    """

    name: str = ""
    environment: Environment | None = None
    skipped: str = "no environment is named"

    @classmethod
    def of(cls, name: str, environment: Environment) -> EnvironmentFilter:
        """The filter playing in `environment`, unless it says it cannot judge variants."""
        blind = environment.cannot_judge_variants()
        return cls(name, None, f"{name} cannot judge variants: {blind}") if blind else cls(name, environment, "")

    @classmethod
    def skipping(cls, name: str, why: str) -> EnvironmentFilter:
        return cls(name, None, f"{name}: {why}")

    @property
    def applies(self) -> bool:
        return self.environment is not None

    def report(self) -> dict[str, Any]:
        """What the batch report says of the filter: the environment, whether it applied, and why not."""
        return {"name": self.name, "applied": self.applies, "skipped": self.skipped}


NO_ENVIRONMENT = EnvironmentFilter()


def environment_rejection(task: Task, playing: EnvironmentFilter) -> Rejection | None:
    """Why the task's reference calls fail in the filter's environment (a call refused, an unsafe call, the end
    state not reached); None when they pass, or when the filter does not apply."""
    environment = playing.environment
    if environment is None:
        return None
    try:
        environment.reset(task)
        for number, call in enumerate(reference_calls(task), start=1):
            result = environment.step(call)
            if not result.ok:
                shown = str(result.observation)[:_OBSERVATION_CHARS]
                return Rejection("environment", f"call {number}, {call.name}, fails in {playing.name}: {shown}")
        judgement = environment.judge()
    except Exception as error:  # noqa: BLE001 - a team's environment may raise anything; the variant fails alone
        return Rejection("environment", f"{playing.name} failed: {type(error).__name__}: {error}")
    if judgement.unsafe:
        return Rejection("environment", f"unsafe under the safety policy in {playing.name}: {judgement.reason}")
    if not judgement.passed:
        return Rejection("environment", f"the expected calls do not pass in {playing.name}: {judgement.reason}")
    return None


@dataclass
class _Seen:
    """The kept variants' similarity texts, to compare each next one with."""

    shingles: list[tuple[str, frozenset[str]]] = field(default_factory=list)

    def closest(self, text: frozenset[str]) -> tuple[float, str]:
        return max(((similarity(text, other), name) for name, other in self.shingles), default=(0.0, ""))


def screen(
    variants: Sequence[Variant],
    *,
    verifier: Verifier,
    train: Sequence[Task] = (),
    heldout: Sequence[Task] = (),
    threshold: float = DEFAULT_THRESHOLD,
    heldout_threshold: float = HELDOUT_THRESHOLD,
    extra_check: ExtraCheck | None = None,
    environment: EnvironmentFilter = NO_ENVIRONMENT,
) -> list[Screened]:
    """Each variant with the first filter that rejects it (None: accepted), in the order of `FILTERS`."""
    train_prints = {task_fingerprint(task): task.id for task in train}
    held = _Seen([(task.id, shingles(_request(task))) for task in heldout])
    kept = _Seen()
    screened = []
    for variant in variants:
        rejection = _lost_values(variant) or _first_rejection(
            variant.task, verifier, train_prints, held, heldout_threshold, extra_check, environment
        )
        if rejection is None:
            text = shingles(_similarity_text(variant.task))
            score, twin = kept.closest(text)
            if score >= threshold:
                rejection = Rejection("near_duplicate", f"similarity {score:.2f} to variant {twin}")
            else:
                kept.shingles.append((variant.task.id, text))
        screened.append(Screened(variant, rejection))
    return screened


def _lost_values(variant: Variant) -> Rejection | None:
    request = _request_text(variant.task)
    lost = [value for value in variant.kept_values if not _pattern(value).search(request)]
    if not lost:
        return None
    return Rejection("values_kept", f"the request no longer writes {', '.join(map(repr, lost))}")


def _first_rejection(
    task: Task,
    verifier: Verifier,
    train_prints: dict[str, str],
    held: _Seen,
    threshold: float,
    extra_check: ExtraCheck | None,
    environment: EnvironmentFilter,
) -> Rejection | None:
    problems = [problem for call in reference_calls(task) for problem in call_problems(call, task.tool_schemas)]
    problems += extra_check(task) if extra_check is not None else []
    if problems:
        return Rejection("schema", "; ".join(dict.fromkeys(problems)))
    verdict = verifier.verify([task], [reference_answer(task)])[0]
    if not verdict.passed:
        return Rejection("verifier", f"the expected call fails the {verifier.name} verifier: {verdict.reason}")
    if (played := environment_rejection(task, environment)) is not None:
        return played
    if (twin := train_prints.get(task_fingerprint(task))) is not None:
        return Rejection("train_duplicate", f"the same task as train task {twin}")
    score, twin_id = held.closest(shingles(_request(task)))
    if score >= threshold:
        return Rejection("heldout_near_duplicate", f"similarity {score:.2f} to held-out task {twin_id}")
    return None


def counts(screened: Sequence[Screened], environment: EnvironmentFilter = NO_ENVIRONMENT) -> dict[str, Any]:
    """The batch report: generated, rejected by each filter (every filter that applied named, zero included),
    accepted, and the environment filter's `report` (the environment filter counts only where it applied)."""
    rejected = {name: 0 for name in FILTERS if name != "environment" or environment.applies}
    for item in screened:
        if item.rejection is not None:
            rejected[item.rejection.filter] = rejected.get(item.rejection.filter, 0) + 1
    by_method: dict[str, int] = defaultdict(int)
    for item in screened:
        by_method[item.variant.method] += item.accepted
    return {"generated": len(screened), "rejected": rejected, "accepted": sum(item.accepted for item in screened),
            "accepted_by_method": dict(sorted(by_method.items())), "environment": environment.report()}  # fmt: skip
