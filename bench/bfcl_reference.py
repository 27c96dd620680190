"""Run BFCL's own AST checker on prepared items; meant for the reference interpreter only.

Run it with the Python of a separate virtualenv holding `bfcl-eval` (installed with
--no-deps; never a project dependency). It stubs the provider SDKs and the model registry
that BFCL's checker module imports but does not need, then for each item does what
BFCL's evaluation runner does: decode the model output (the Python-call prompt format
with BFCL's decoder, or calls already decoded by a function-calling handler), check the
format, and run `ast_checker`, or for irrelevance tasks pass when nothing decodes.

    python bench/bfcl_reference.py --bfcl-dir DIR --items ITEMS.jsonl [--repeat N]

Each item is `{"key", "task_id", "mode": "python"|"decoded", "output"}`; stdout gets one
`{"key", "valid", "error_type"}` per item, then `{"timing": {"items", "repeat", "seconds"}}`
for the decode-and-check loop alone. Imports only the standard library and bfcl_eval.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


@dataclass
class _ModelConfig:
    # BFCL renames dotted functions only for models configured so; the stub model is not.
    underscore_to_dot: bool = False


class _AnyModel(dict):
    def __missing__(self, key: str) -> _ModelConfig:
        return _ModelConfig()


def _stub_unneeded_imports() -> None:
    registry = types.ModuleType("bfcl_eval.constants.model_config")
    registry.MODEL_CONFIG_MAPPING = _AnyModel()  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = registry
    for name in ("tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "filelock"):
        sys.modules.setdefault(name, mock.MagicMock())


def _load(bfcl_dir: Path, category: str) -> tuple[dict[str, Any], dict[str, Any]]:
    questions = {}
    for line in (bfcl_dir / f"BFCL_v4_{category}.json").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions[row["id"]] = row
    answers = {}
    answer_file = bfcl_dir / "possible_answer" / f"BFCL_v4_{category}.json"
    if answer_file.exists():
        for line in answer_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                answers[row["id"]] = row["ground_truth"]
    return questions, answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bfcl-dir", type=Path, required=True)
    parser.add_argument("--items", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    _stub_unneeded_imports()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.model_handler.utils import default_decode_ast_prompting
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    questions: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    for category in CATEGORIES:
        loaded_questions, loaded_answers = _load(args.bfcl_dir, category)
        questions.update(loaded_questions)
        answers.update(loaded_answers)
    items = [json.loads(line) for line in args.items.read_text(encoding="utf-8").splitlines() if line.strip()]

    def judge(item: dict[str, Any]) -> tuple[bool, str]:
        task_id = item["task_id"]
        category = task_id.rsplit("_", 1)[0]
        try:
            raw = item["output"]
            decoded = default_decode_ast_prompting(raw) if item["mode"] == "python" else raw
        except Exception:  # noqa: BLE001 - BFCL's runner counts any decoder failure as an invalid output
            return category == "irrelevance", "ast_decoder:decoder_failed"
        if category == "irrelevance":
            return bool(is_empty_output(decoded)), "irrelevance"
        if not is_function_calling_format_output(decoded):
            return False, "ast_decoder:decoder_wrong_output_format"
        try:
            result = ast_checker(
                questions[task_id]["function"], decoded, answers[task_id], Language.PYTHON, category, "stub-model"
            )
        except Exception as error:  # noqa: BLE001 - a crash in the checker is recorded, not fatal
            return False, f"checker_crash:{type(error).__name__}"
        return bool(result["valid"]), str(result.get("error_type", ""))

    verdicts = [judge(item) for item in items]
    started = time.perf_counter()
    for _ in range(args.repeat):
        for item in items:
            judge(item)
    seconds = time.perf_counter() - started
    out = sys.stdout
    for item, (valid, error_type) in zip(items, verdicts, strict=True):
        out.write(json.dumps({"key": item["key"], "valid": valid, "error_type": error_type}) + "\n")
    out.write(json.dumps({"timing": {"items": len(items), "repeat": args.repeat, "seconds": seconds}}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
