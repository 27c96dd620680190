"""The adapter store's disk fills up while a version is being registered.

The store is a real 1 MiB tmpfs (`small_filesystem`), so the copy fails as it would on a full disk:
with ENOSPC from the kernel, part of the way through the weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flywheel.core.services import agent_create
from flywheel.registry import storage
from flywheel.registry.models import ModelVersion
from flywheel.registry.services import RegistryRefused, version_register
from tests.faults.conftest import adapter

pytestmark = [pytest.mark.slow, pytest.mark.django_db]
STORE_BYTES = 1 << 20


def contents(store: Path) -> list[str]:
    return sorted(str(path.relative_to(store)) for path in store.rglob("*"))


def test_a_full_adapter_store_refuses_the_version_clearly_and_leaves_the_registry_and_the_disk_as_they_were(
    settings, small_filesystem, tmp_path
):
    store = small_filesystem(STORE_BYTES)
    settings.REGISTRY_DIR = str(store)
    agent = agent_create(actor=None, name="support-bot", description="")
    first = version_register(actor=None, agent=agent, adapter_dir=adapter(tmp_path / "a", 100_000, 1),
                             base_model="tiny")  # fmt: skip
    before, free_before = contents(store), shutil.disk_usage(store).free

    too_big = adapter(tmp_path / "b", 2 * STORE_BYTES, 2)
    with pytest.raises(RegistryRefused) as refused:
        version_register(actor=None, agent=agent, adapter_dir=too_big, base_model="tiny")
    assert str(refused.value).startswith(
        f"the adapter cannot be registered: the adapter store ({store}) is full: the adapter needs 2.0 MiB, "
    ), refused.value
    assert "MiB is free (No space left on device)" in str(refused.value)
    assert list(ModelVersion.objects.filter(agent=agent)) == [first]
    assert contents(store) == before and shutil.disk_usage(store).free == free_before  # no partial folder or file
    storage.verify_files(store / first.storage_path, sha256=first.adapter_sha256, config_sha256=first.config_sha256)
    # Nothing of the refused one is in the way: the next adapter that fits takes the next number.
    second = version_register(actor=None, agent=agent, adapter_dir=adapter(tmp_path / "c", 100_000, 3),
                              base_model="tiny")  # fmt: skip
    assert second.number == 2
    assert set(contents(store)) - set(before) == {second.storage_path, *(f"{second.storage_path}/{name}"
                                                  for name in storage.ADAPTER_FILES)}  # fmt: skip
