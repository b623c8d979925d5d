"""cli.edges.files: the one atomic write, and the per-inventory state key."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.edges.files import atomic_write, state_dir, state_key
from cli.facts.cache import FactsCache
from cli.reconcile.ledger import ledger_path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


class _Recorder:
    """Wraps the temporary file's stream: records its mode when the first byte is written."""

    def __init__(self, stream: Any, modes: list[int]) -> None:
        self._stream = stream
        self._modes = modes

    def write(self, data: bytes) -> int:
        self._modes.append(stat.S_IMODE(os.fstat(self._stream.fileno()).st_mode))
        return int(self._stream.write(data))

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *args: object) -> None:
        self._stream.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def first_byte_modes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    modes: list[int] = []
    real = os.fdopen

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        return _Recorder(real(fd, *args, **kwargs), modes)

    monkeypatch.setattr(os, "fdopen", fdopen)
    return modes


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_the_file_has_its_mode_from_the_first_byte_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    modes = first_byte_modes(monkeypatch)
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "key", b"secret", mode)
    finally:
        os.umask(old)
    assert modes == [mode]
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == mode


def test_the_temporary_file_is_complete_and_private_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int, bytes, bool]] = []
    real = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        source = Path(src)
        seen.append(
            (
                source.parent.name,
                stat.S_IMODE(source.stat().st_mode),
                source.read_bytes(),
                Path(dst).exists(),
            )
        )
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    (tmp_path / "master.key").write_bytes(b"old")
    atomic_write(tmp_path / "master.key", b"new key", 0o600)
    assert seen == [(tmp_path.name, 0o600, b"new key", True)]
    assert (tmp_path / "master.key").read_bytes() == b"new key"


def test_a_file_is_replaced_with_the_new_content_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "facts.json"
    path.write_text("old and longer than the new content\n")
    path.chmod(0o600)
    assert atomic_write(path, "nouveau é\n", 0o644) == path
    assert path.read_bytes() == "nouveau é\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.json"]


@pytest.mark.usefixtures("umask_022")
def test_the_default_mode_is_0644(tmp_path: Path) -> None:
    atomic_write(tmp_path / "f", b"x")
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o644


def test_mode_none_is_what_the_umask_gives_a_new_file(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "hosts.yml", b"all: {}\n", None)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "hosts.yml").stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.json"
    path.write_bytes(b"old")

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output error"):
        atomic_write(path, b"new", 0o600)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_a_failed_rename_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError):
        atomic_write(tmp_path / "new.json", b"new")
    assert list(tmp_path.iterdir()) == []


def test_the_file_and_then_its_directory_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[bool, int]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((stat.S_ISDIR(info.st_mode), info.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "f", b"data")
    file_inode = (tmp_path / "f").stat().st_ino
    assert synced == [(False, file_inode), (True, tmp_path.stat().st_ino)]


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.yml"
    real.write_text("old\n")
    link = tmp_path / "hosts.yml"
    link.symlink_to(real)
    atomic_write(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_exclusive_creates_a_new_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modes = first_byte_modes(monkeypatch)
    atomic_write(tmp_path / "ca.key", b"key", 0o600, exclusive=True)
    assert modes == [0o600]
    assert (tmp_path / "ca.key").read_bytes() == b"key"
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.key"]


@pytest.mark.parametrize("existing", ["file", "dangling symlink"])
def test_exclusive_never_replaces_what_is_there(tmp_path: Path, existing: str) -> None:
    path = tmp_path / "ca.key"
    if existing == "file":
        path.write_bytes(b"the old CA")
    else:
        path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError) as raised:
        atomic_write(path, b"new", 0o600, exclusive=True)
    assert raised.value.filename == str(path)
    assert not (tmp_path / "elsewhere").exists()
    if existing == "file":
        assert path.read_bytes() == b"the old CA"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.key"]


def test_the_temporary_file_is_in_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        handle, name = real(*args, **kwargs)
        made.append(Path(name))
        return handle, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    (tmp_path / "sub").mkdir()
    atomic_write(tmp_path / "sub" / "x.json", b"{}")
    assert [p.parent for p in made] == [tmp_path / "sub"]
    assert made[0].name.startswith(".x.json.") and made[0].name.endswith(".tmp")


def test_the_state_key_is_the_resolved_paths_hash_as_before() -> None:
    # Keys made before cli.edges existed must still find their state.
    assert state_key(Path("/srv/fleet/inventory")) == "87e3ca48bfc4b9ef"
    assert state_key(Path("/srv/fleet/other")) != "87e3ca48bfc4b9ef"


def test_spellings_of_one_inventory_share_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inventory").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "inventory")
    monkeypatch.chdir(tmp_path)
    key = state_key(tmp_path / "inventory")
    assert len(key) == 16 and int(key, 16) >= 0
    assert state_key(Path("inventory")) == key
    assert state_key(tmp_path / "alias") == key
    assert state_key(tmp_path / "sub" / ".." / "inventory") == key


def test_the_cache_and_the_ledger_use_the_same_key(tmp_path: Path) -> None:
    inventory = Path("/srv/fleet/inventory")
    assert FactsCache(inventory, tmp_path).directory == tmp_path / "facts" / "87e3ca48bfc4b9ef"
    assert ledger_path(inventory, tmp_path) == tmp_path / "backoff" / "87e3ca48bfc4b9ef.json"


def test_the_state_directory_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/var/lib/someone")
    assert state_dir() == Path("/var/lib/someone/modelfleet")
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", "/home/op")
    assert state_dir() == Path("/home/op/.local/state/modelfleet")
