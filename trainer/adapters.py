"""Save, verify, load and merge LoRA adapters in standard PEFT format, each with a manifest.

An adapter folder is what `PeftModel.save_pretrained` writes (`adapter_config.json`,
`adapter_model.safetensors`; loadable by `PeftModel.from_pretrained` and vLLM's LoRA
support) plus `manifest.json`: the base model, the training config, the data
snapshot hash, the metrics, and `sha256` (the weights file's) and the adapter config's hash.
Loading verifies both hashes first; a mismatch is an `AdapterError`, never a silent load.
`merge_adapter` folds an adapter into its base model for export. Training is not here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.jobs import JobError

MANIFEST_FILE = "manifest.json"
MERGED_FILE = "flywheel-merged.json"
WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"


class AdapterError(JobError):
    """An adapter folder is missing, incomplete, or does not match its manifest."""

    kind = "adapter_invalid"


@dataclass(frozen=True)
class AdapterManifest:
    """What an adapter is: its base model, how it was trained, on what, how well, and its hashes."""

    base_model: str
    sha256: str
    config_sha256: str
    snapshot_sha256: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdapterManifest:
        try:
            return cls(**data)
        except TypeError as error:
            raise AdapterError(f"adapter manifest: {error}") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_adapter(
    model: Any,
    folder: str | Path,
    *,
    base_model: str,
    snapshot_sha256: str | None = None,
    config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> AdapterManifest:
    """Save a PeftModel's adapter to `folder` with its manifest; returns the manifest."""
    model.save_pretrained(str(folder), safe_serialization=True)
    return write_manifest(folder, base_model=base_model, snapshot_sha256=snapshot_sha256, config=config,
                          metrics=metrics)


def write_manifest(
    folder: str | Path,
    *,
    base_model: str,
    snapshot_sha256: str | None = None,
    config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> AdapterManifest:
    """The manifest of an adapter PEFT already wrote to `folder` (a training checkpoint, say)."""
    target = Path(folder)
    manifest = AdapterManifest(
        base_model=base_model,
        sha256=file_sha256(target / WEIGHTS_FILE),
        config_sha256=file_sha256(target / CONFIG_FILE),
        snapshot_sha256=snapshot_sha256,
        config=config or {},
        metrics=metrics or {},
    )
    (target / MANIFEST_FILE).write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")
    return manifest


def read_manifest(folder: str | Path) -> AdapterManifest:
    path = Path(folder) / MANIFEST_FILE
    if not Path(folder).is_dir():
        raise AdapterError(f"adapter folder not found: {folder}")
    try:
        return AdapterManifest.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise AdapterError(f"adapter {folder} has no {MANIFEST_FILE}") from None
    except json.JSONDecodeError as error:
        raise AdapterError(f"adapter manifest {path} is not valid JSON: {error.msg}") from None


def hash_problem(folder: str | Path, *, sha256: str, config_sha256: str, recorded_by: str) -> str | None:
    """What is wrong with the adapter's weights and config against their recorded hashes; None when nothing."""
    for name, expected in ((WEIGHTS_FILE, sha256), (CONFIG_FILE, config_sha256)):
        path = Path(folder) / name
        if not path.is_file():
            return f"adapter {folder} has no {name}"
        actual = file_sha256(path)
        if actual != expected:
            return f"adapter {folder}: {name} has sha256 {actual[:16]}..., {recorded_by} says {expected[:16]}..."
    return None


def verify_adapter(folder: str | Path) -> AdapterManifest:
    """The adapter's manifest, after checking its weights and config against the recorded hashes."""
    manifest = read_manifest(folder)
    problem = hash_problem(folder, sha256=manifest.sha256, config_sha256=manifest.config_sha256,
                           recorded_by="the manifest")  # fmt: skip
    if problem:
        raise AdapterError(f"{problem}; the file changed after it was saved")
    return manifest


def load_adapter(model: Any, folder: str | Path) -> Any:
    """`model` wrapped with the verified adapter in `folder`, for inference."""
    from peft import PeftModel

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
