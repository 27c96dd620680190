"""Save, load and merge LoRA adapters in standard PEFT format; the folder layout and manifests are
`trainer.spec.adapters`. Loading verifies the manifest's hashes first. Training is not here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peft import PeftModel

from trainer.spec.adapters import MERGED_FILE, AdapterManifest, verify_adapter, write_manifest


def save_adapter(
    model: Any,
    folder: str | Path,
    *,
    base_model: str,
    snapshot_sha256: str | None = None,
    config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> AdapterManifest:
    """Save a PeftModel's active adapter to `folder` with its manifest; returns the manifest.

    Only the active one: DPO from a parent adapter keeps a frozen copy of the parent beside it as its reference.
    """
    model.save_pretrained(str(folder), safe_serialization=True, selected_adapters=[model.active_adapter])
    return write_manifest(folder, base_model=base_model, snapshot_sha256=snapshot_sha256, config=config,
                          metrics=metrics)


def load_adapter(model: Any, folder: str | Path) -> Any:
    """`model` wrapped with the verified adapter in `folder`, for inference."""
    verify_adapter(folder)
    adapted = PeftModel.from_pretrained(model, str(folder), is_trainable=False)
    adapted.eval()
    return adapted


def merge_adapter(model: Any, tokenizer: Any, folder: str | Path, output: str | Path) -> Path:
    """Fold the verified adapter into `model` and save the merged model and tokenizer to `output`."""
    manifest = verify_adapter(folder)
    merged = load_adapter(model, folder).merge_and_unload()
    target = Path(output)
    merged.save_pretrained(str(target), safe_serialization=True)
    tokenizer.save_pretrained(str(target))
    merged_from = {"merged_from": str(folder), "adapter": manifest.to_json()}
    (target / MERGED_FILE).write_text(json.dumps(merged_from, indent=2) + "\n", encoding="utf-8")
    return target
