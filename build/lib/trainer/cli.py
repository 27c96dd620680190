"""The `python -m trainer` command line: one sub-command per job kind or tool.

Each sub-command is registered by a small `add_<name>` function that builds its parser
and sets `handler`; the handler returns the process exit code. Job kinds read a
`run.json` spec and write one JSON event per line to stdout (DESIGN.md, the job protocol).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from trainer.contracts import ContractError
from trainer.environments import EnvironmentUnavailable, environment_names, make_environment
from trainer.environments.batch import episode_lines
from trainer.environments.entry_point import is_entry_point
from trainer.environments.mcp import is_mcp
from trainer.jobs import die_with_parent, run_job
from trainer.spec.bfcl import import_bfcl
from trainer.spec.config import config_help
from trainer.spec.eval import EvalConfig
from trainer.spec.kinds import config_class
from trainer.spec.workbench import episode_tasks, single_call_tasks
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier, verifier_names
from trainer.verifiers.batch import Summary, read_tasks, verify_lines
from trainer.verifiers.safety import SafetyPolicy

EXIT_INPUT_ERRORS = 1
EXIT_USAGE = 2
DEFAULT_EXTERNAL = Path(__file__).resolve().parents[1].parent / "shared" / "external"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description=(
            "agent-flywheel's trainer: verify tool calls, evaluate, and train LoRA adapters. "
            "Plain Python; the web app drives it through the job protocol."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_tasks(sub)
    add_verify(sub)
    add_eval(sub)
    add_job(sub, "sft", "supervised fine-tuning of a LoRA adapter on a snapshot's expected calls", "trainer.sft")
    add_job(sub, "dpo", "DPO (or IPO, robust DPO ...) of a LoRA adapter on preference pairs", "trainer.dpo")
    add_job(sub, "grpo", "GRPO (or DAPO, Dr. GRPO, GSPO) on a LoRA adapter with a verifier's reward", "trainer.grpo")
    add_job(sub, "gate", "compare a candidate adapter with the live one and decide on promotion", "trainer.gate")
    add_job(sub, "mine", "keep the train tasks the model solves sometimes but not always (hard-task mining)",
            "trainer.mine")
    add_job(sub, "replay", "answer a failing step's conversation again with a version and score both answers",
            "trainer.replay")
    add_job(sub, "synth", "paraphrase seed tasks' requests with a local model and screen the variants",
            "trainer.synth")
    add_job(sub, "judge", "score trajectories or answers against the agent's rubric with a local judge model",
            "trainer.judge")
    add_serve(sub)
    add_chat_template(sub)
    add_models(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


def add_tasks(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser("tasks", help="import task sets as native task JSONL")
    kinds = tasks.add_subparsers(dest="tasks_command", metavar="SOURCE", required=True)
    bfcl = kinds.add_parser("from-bfcl", help="BFCL questions (+ possible answers) to native task JSONL on stdout")
    bfcl.add_argument("--questions", required=True, help="BFCL_v4_<category>.json")
    bfcl.add_argument("--answers", help="possible_answer/BFCL_v4_<category>.json; without it no call is expected")
    bfcl.add_argument("--strict", action="store_true",
                      help="write nothing and exit 1 when a question cannot be converted (by default it is skipped, "
                           "with its reason on stderr)")
    bfcl.set_defaults(handler=_tasks_from_bfcl)
    workbench = kinds.add_parser("from-workbench", help="WorkBench's tasks to native task JSONL on stdout")
    workbench.add_argument("--all", action="store_true",
                           help="all 690 tasks as episodes of the workbench environment (lookups, several calls); "
                                "by default only those one call answers with no lookup")
    workbench.add_argument("--external", type=Path, default=DEFAULT_EXTERNAL,
                           help="the folder holding workbench/ and nemo_gym/ (default: ../shared/external)")
    workbench.set_defaults(handler=_tasks_from_workbench)


def _tasks_from_bfcl(args: argparse.Namespace) -> int:
    try:
        imported = import_bfcl(args.questions, args.answers)
    except (OSError, ContractError, KeyError) as error:
        print(f"tasks from-bfcl: {error}", file=sys.stderr)
        return EXIT_USAGE
    for skipped in imported.skipped:
        print(f"tasks from-bfcl: skipped {skipped.reason}", file=sys.stderr)
    if imported.skipped:
        total = len(imported.tasks) + len(imported.skipped)
        print(f"tasks from-bfcl: skipped {len(imported.skipped)} of {total} questions", file=sys.stderr)
        if args.strict or not imported.tasks:
            return EXIT_INPUT_ERRORS
    for task in imported.tasks:
        sys.stdout.write(task.to_json_line() + "\n")
    return 0


def _tasks_from_workbench(args: argparse.Namespace) -> int:
    try:
        tasks = list(episode_tasks(args.external) if args.all else single_call_tasks(args.external))
    except (OSError, ValueError, KeyError) as error:
        print(f"tasks from-workbench: {error}", file=sys.stderr)
        return EXIT_USAGE
    for task in tasks:
        sys.stdout.write(task.to_json_line() + "\n")
    return 0


def add_verify(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser("verify", help="score model outputs against tasks, one verdict line each")
    verify.add_argument("--tasks", required=True, help="native task JSONL")
    verify.add_argument("--outputs", required=True, help='JSONL of {"id", "output"}; "-" reads stdin')
    verify.add_argument("--verifier", choices=verifier_names(), default=DEFAULT_VERIFIER)
    verify.add_argument("--policy", help="safety policy JSON for the agent (default: the built-in policy)")
    verify.add_argument(
        "--env",
        type=_environment_name,
        help="run each output as an episode: single_step (the verifier), workbench (a list of calls per task, "
        "run in the workplace sandbox; data from $FLYWHEEL_WORKBENCH_DIR, default ../shared/external/workbench), "
        "a team's environment as package.module:factory, or an MCP server as mcp:<command>",
    )
    verify.set_defaults(handler=_verify)


def _environment_name(name: str) -> str:
    if name in environment_names() or is_entry_point(name) or is_mcp(name):
        return name
    raise argparse.ArgumentTypeError(f"unknown environment {name!r}: {', '.join(environment_names())}, "
                                     "package.module:factory or mcp:<command>")


def _verify(args: argparse.Namespace) -> int:
    try:
        tasks = read_tasks(args.tasks)
        policy = SafetyPolicy.load(args.policy) if args.policy else None
        environment = make_environment(args.env, args.verifier, policy) if args.env else None
        outputs = sys.stdin if args.outputs == "-" else open(args.outputs, encoding="utf-8")  # noqa: SIM115
    except (OSError, ContractError, json.JSONDecodeError, EnvironmentUnavailable) as error:
        print(f"verify: {error}", file=sys.stderr)
        return EXIT_USAGE
    summary = Summary(verifier=environment.label if environment else args.verifier)
    with outputs:
        rows = (
            episode_lines(environment, tasks, outputs, summary)
            if environment
            else verify_lines(get_verifier(args.verifier, policy), tasks, outputs, summary)
        )
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    sys.stdout.write(json.dumps({"summary": summary.to_json()}) + "\n")
    return EXIT_INPUT_ERRORS if summary.input_errors else 0


def add_eval(sub: argparse._SubParsersAction) -> None:
    fields = "\n".join(f"  {name}: {text}" for name, text in config_help(EvalConfig).items())
    evaluate = sub.add_parser(
        "eval", help="evaluate a model on a task snapshot (job protocol: JSON events on stdout)",
        epilog=f"hyperparameters in the spec:\n{fields}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("--spec", required=True, help="run.json: a RunSpec of kind eval (see docs/trainer.md)")
    evaluate.set_defaults(handler=_eval)


def _eval(args: argparse.Namespace) -> int:
    # Imported here so that `python -m trainer --help` and the light commands never load torch.
    from trainer.evaluate import run_eval

    die_with_parent()
    return run_job(args.spec, "eval", run_eval)


def add_job(sub: argparse._SubParsersAction, kind: str, summary: str, module: str) -> None:
    """A job kind whose module has `run(spec, events, stop)`; its hyperparameters are `config_class(kind)`."""
    parser = sub.add_parser(
        kind, help=f"{summary} (job protocol: JSON events on stdout)",
        description=f"{summary}. The spec's hyperparameters are the fields of {config_class(kind).__qualname__} "
                    f"in trainer.spec.{kind} (docs/trainer.md).",
    )  # fmt: skip
    parser.add_argument("--spec", required=True, help=f"run.json: a RunSpec of kind {kind} (see docs/trainer.md)")
    parser.set_defaults(handler=partial(_job, kind, module))


def _job(kind: str, module: str, args: argparse.Namespace) -> int:
    die_with_parent()
    body = importlib.import_module(module).run
    return run_job(args.spec, kind, body)


def add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="an OpenAI-compatible chat server for a base model and an adapter (CPU)")
    serve.add_argument("--base-model", required=True, help="a local folder, a .gguf file or 'demo'")
    serve.add_argument("--adapter", help="a LoRA adapter folder (verified against its manifest before loading)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8001, help="0 picks a free port (printed in the listening line)")
    serve.add_argument("--model-name", help="the name /v1/models lists and responses carry (default: the base model)")
    serve.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda ...")
    serve.add_argument("--max-new-tokens", type=int, default=256, help="the most tokens one answer may generate")
    serve.add_argument(
        "--admin-token-file",
        help="file holding the bearer token of POST /admin/adapter (default: $FLYWHEEL_SERVE_ADMIN_TOKEN; none: off)",
    )
    serve.add_argument("--exit-with-parent", action="store_true",
                       help="stop when the process that started this one exits (the web app's managed server)")
    serve.set_defaults(handler=_serve)


def add_chat_template(sub: argparse._SubParsersAction) -> None:
    template = sub.add_parser("chat-template", help="the Jinja chat template with which vLLM's server renders a chat "
                                                    "request as the trainer's prompt (ChatML models), on stdout")
    template.set_defaults(handler=_chat_template)


def _chat_template(args: argparse.Namespace) -> int:
    from trainer.prompts import served_chat_template

    print(served_chat_template())
    return 0


def _serve(args: argparse.Namespace) -> int:
    from trainer.serve import serve_forever

    return serve_forever(args)


def add_models(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser("models", help="manage local base models")
    actions = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    fetch = actions.add_parser("fetch-demo", help="download and convert the demo model (SmolLM2-135M-Instruct) once")
    fetch.set_defaults(handler=_fetch_demo)
    path = actions.add_parser("path", help="the local folder a model name resolves to ('demo', a .gguf converted "
                                           "once, a folder), on stdout: what another engine (vLLM) is given")
    path.add_argument("model")
    path.set_defaults(handler=_model_path)


def _model_path(args: argparse.Namespace) -> int:
    from trainer.models import ModelNotFoundError, resolve_model

    try:
        print(resolve_model(args.model))
    except ModelNotFoundError as error:
        print(f"models path: {error}", file=sys.stderr)
        return EXIT_INPUT_ERRORS
    return 0


def _fetch_demo(args: argparse.Namespace) -> int:
    from trainer.models import ModelNotFoundError, ensure_demo_model, model_cache_dir

    try:
        print(ensure_demo_model(model_cache_dir()))
    except ModelNotFoundError as error:
        print(f"models fetch-demo: {error}", file=sys.stderr)
        return EXIT_INPUT_ERRORS
    return 0
