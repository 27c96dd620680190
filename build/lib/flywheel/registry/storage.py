"""The registry's adapter storage: copy an adapter in once, read-only, and verify it on every load.

A version's folder (`<agent>/v<number>-<sha prefix>` under the registry root) holds the PEFT
files and the manifest. The hashes recorded in the database, not the manifest beside the files,
are the reference: a tampered weights file with a rewritten manifest is still refused.
Zipping for download is here too. Database rows are the services' business.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from django.conf import settings

from trainer.spec.adapters import (
    CONFIG_FILE,
    MANIFEST_FILE,
    WEIGHTS_FILE,
    AdapterManifest,
    hash_problem,
    verify_adapter,
)

ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE, MANIFEST_FILE)
READ_ONLY_FILE = 0o444
READ_ONLY_DIR = 0o555


class AdapterTampered(Exception):
    """A registered adapter's files no longer match the hashes recorded when it was registered."""


class AdapterStoreError(Exception):
    """The adapter could not be copied into the store (a full disk, say); nothing of it was left there."""


@dataclass(frozen=True)
class StoredAdapter:
    """Where an adapter lies in the registry and the hashes it was registered with."""

    relative_path: str
    sha256: str
    config_sha256: str
    manifest: AdapterManifest


def registry_root() -> Path:
    # Read at call time, so that a test's MEDIA_ROOT override moves the registry with it.
    return Path(settings.REGISTRY_DIR or Path(settings.MEDIA_ROOT) / "registry")


def adapter_copy(*, source: str | Path, agent_name: str, number: int) -> StoredAdapter:
    """Verify the adapter at `source` and copy it, read-only, into the registry."""
    manifest = verify_adapter(source)
    relative = f"{agent_name}/v{number}-{manifest.sha256[:12]}"
    target = registry_root() / relative
    if target.exists() and not _matches(target, manifest):
        # No row can name this folder (numbers are never reused): it is left from a registration
        # whose transaction rolled back. Set aside, not deleted, in case someone wants to look.
        target.rename(target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.orphan"))
    if not target.exists():
        _copy_read_only(Path(source), target)
    stored = StoredAdapter(relative, manifest.sha256, manifest.config_sha256, manifest)
    verify_files(target, sha256=stored.sha256, config_sha256=stored.config_sha256)
    return stored


def _matches(folder: Path, manifest: AdapterManifest) -> bool:
    try:
        verify_files(folder, sha256=manifest.sha256, config_sha256=manifest.config_sha256)
    except AdapterTampered:
        return False
    return True


def _copy_read_only(source: Path, target: Path) -> None:
    # Copied beside the target and renamed into place: a crash never leaves a half-copied version,
    # and a copy that fails (a full disk) is removed before the error is raised.
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        partial.mkdir(parents=True)
        for name in ADAPTER_FILES:
            shutil.copyfile(source / name, partial / name)
            (partial / name).chmod(READ_ONLY_FILE)
        partial.chmod(READ_ONLY_DIR)
        partial.rename(target)
    except OSError as error:
        _remove_partial(partial)
        raise AdapterStoreError(_copy_failure(source, error)) from error


def _remove_partial(partial: Path) -> None:
    if not partial.exists():
        return
    partial.chmod(0o755)  # its files may already be read-only; removing them needs the folder writable
    shutil.rmtree(partial)


def _copy_failure(source: Path, error: OSError) -> str:
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        needed = sum((source / name).stat().st_size for name in ADAPTER_FILES)
        free = shutil.disk_usage(registry_root()).free if registry_root().exists() else 0
        return (f"the adapter store ({registry_root()}) is full: the adapter needs {_mib(needed)}, "
                f"{_mib(free)} is free ({error.strerror})")  # fmt: skip
    return f"the adapter could not be written to the adapter store ({registry_root()}): {error.strerror or error}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def verify_files(folder: Path, *, sha256: str, config_sha256: str) -> Path:
    """`folder`, after checking its weights and config against the recorded hashes."""
    problem = hash_problem(folder, sha256=sha256, config_sha256=config_sha256, recorded_by="the registry")
    if problem:
        raise AdapterTampered(f"{problem}; refusing to load it")
    return folder


def zip_adapter(folder: Path, name: str) -> IO[bytes]:
    """The adapter's files in a zip (spooled to disk past 16 MiB), rewound for reading."""
    spool = tempfile.SpooledTemporaryFile(max_size=16 << 20)  # noqa: SIM115 - the response closes it
    with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file_name in ADAPTER_FILES:
            archive.write(folder / file_name, arcname=f"{name}/{file_name}")
    spool.seek(0)
    return spool  # type: ignore[return-value]
