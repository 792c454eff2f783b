"""Atomic writes: the old file or the whole new one, durably, with the umask's mode."""

import os
import stat

import pytest

from riftco.core import atomic as atomic_module
from riftco.core import (
    atomic_write,
    fsync_folder,
    remove_stale_temporaries,
    staged_files,
    write_bytes_atomic,
)

posix = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def test_a_clean_write_replaces_the_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with atomic_write(path) as handle:
        handle.write(b"new ")
        handle.write(b"content")
    assert path.read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="crash"), atomic_write(path) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("crash")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_a_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_the_file_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(f"fsync {kind}")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_bytes_atomic(tmp_path / "f.bin", b"x")
    expected = ["fsync file", "rename"] + (["fsync folder"] if hasattr(os, "O_DIRECTORY") else [])
    assert events == expected


@posix
def test_a_new_file_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_bytes_atomic(tmp_path / "f.bin", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f.bin").st_mode) == 0o640


@posix
def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    path.chmod(0o600)
    write_bytes_atomic(path, b"new")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and path.read_bytes() == b"new"


def test_temporary_names_that_are_taken_are_skipped(tmp_path, monkeypatch):
    names = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(atomic_module.secrets, "token_hex", lambda n: next(names))
    with atomic_write(tmp_path / "f.bin") as first:
        with atomic_write(tmp_path / "g.bin") as second:
            second.write(b"g")
        first.write(b"f")
    assert (tmp_path / "f.bin").read_bytes() == b"f" and (tmp_path / "g.bin").read_bytes() == b"g"
    assert sorted(os.listdir(tmp_path)) == ["f.bin", "g.bin"]


def test_staged_files_replace_every_target_on_a_clean_exit(tmp_path):
    (tmp_path / "a.onnx").write_bytes(b"old a")
    with staged_files(tmp_path, ["a.onnx", "a.data"]) as stage:
        (stage / "a.onnx").write_bytes(b"new a")
        (stage / "a.data").write_bytes(b"data")
    assert (tmp_path / "a.onnx").read_bytes() == b"new a"
    assert (tmp_path / "a.data").read_bytes() == b"data"
    assert sorted(os.listdir(tmp_path)) == ["a.data", "a.onnx"]


def test_staged_files_leave_the_targets_on_an_exception(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"old")
    with pytest.raises(ValueError, match="refused"), staged_files(tmp_path, ["a.gguf"]) as stage:
        (stage / "a.gguf").write_bytes(b"half")
        raise ValueError("refused")
    assert (tmp_path / "a.gguf").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.gguf"]


def test_staged_files_create_the_folder(tmp_path):
    with staged_files(tmp_path / "out", ["x"]) as stage:
        (stage / "x").write_bytes(b"x")
    assert (tmp_path / "out" / "x").read_bytes() == b"x"


def test_folder_fsync_tolerates_file_systems_without_it(tmp_path, monkeypatch):
    def unsupported(fd):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "fsync", unsupported)
    fsync_folder(tmp_path)  # EINVAL: nothing to do


@pytest.mark.skipif(not hasattr(os, "O_DIRECTORY"), reason="folders cannot be fsynced here")
def test_folder_fsync_reports_real_failures(tmp_path, monkeypatch):
    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="Input/output"):
        fsync_folder(tmp_path)


def _dead_pid() -> int:
    """A process id that no process has: a child that has exited and been reaped."""
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    return child


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    target = tmp_path / "model.rift"
    dead = _dead_pid()
    stale = tmp_path / f".model.rift.{dead}.1a2b3c4d.tmp"
    live = tmp_path / f".model.rift.{os.getppid()}.5e6f7a8b.tmp"  # a running process
    other = tmp_path / f".other.rift.{dead}.1a2b3c4d.tmp"  # another file's
    unnamed = tmp_path / ".model.rift.notapid.tmp"
    for path in (stale, live, other, unnamed):
        path.write_bytes(b"half")
    write_bytes_atomic(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not stale.exists()
    assert live.exists() and other.exists() and unnamed.exists()
    assert remove_stale_temporaries(tmp_path / "other.rift") == [other]


def test_the_temporary_is_named_after_the_writing_process(tmp_path):
    with atomic_write(tmp_path / "f.bin") as handle:
        handle.write(b"x")
        (temp,) = [p for p in tmp_path.iterdir() if p.name != "f.bin"]
        assert temp.name.startswith(f".f.bin.{os.getpid()}.") and temp.name.endswith(".tmp")
