"""The adapter and checkpoint folder layout: manifests, their hashes, and finding the last checkpoint.

An adapter folder is what `PeftModel.save_pretrained` writes (`adapter_config.json`,
`adapter_model.safetensors`; loadable by `PeftModel.from_pretrained` and vLLM's LoRA
support) plus `manifest.json`: the base model, the training config, the data snapshot hash,
the metrics, and `sha256` (the weights file's) and the adapter config's hash. Verifying checks
both hashes; a mismatch is an `AdapterError`, never a silent load. A training job's output
folder holds `checkpoints/checkpoint-<step>` (each an adapter folder with its manifest, plus the
Trainer's optimizer state) and the final `adapter`. Saving and loading weights is `trainer.adapters`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.spec.config import JobError

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


CHECKPOINTS = "checkpoints"
FINAL_ADAPTER = "adapter"


def last_checkpoint(output_dir: str) -> str | None:
    """The highest-step complete checkpoint (its manifest is written last) under `output_dir`, if any."""
    folder = Path(output_dir) / CHECKPOINTS
    steps = [
        (int(path.name.removeprefix("checkpoint-")), path)
        for path in (folder.glob("checkpoint-*") if folder.is_dir() else [])
        if path.name.removeprefix("checkpoint-").isdigit() and (path / MANIFEST_FILE).is_file()
    ]
    return str(max(steps)[1]) if steps else None
