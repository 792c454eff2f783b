import os

import pytest

from riftco.core import RiftcoError, read_bounded, require_regular_file


class Refused(RiftcoError):
    pass


def _specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-zero"
    link.symlink_to("/dev/zero")
    return [fifo, link, "/dev/zero", "/dev/urandom", tmp_path]


def test_non_regular_files_are_refused_before_reading(tmp_path):
    for path in _specials(tmp_path):
        with pytest.raises(Refused, match="expected a regular file; found a"):
            read_bounded(path, 1 << 20, Refused)
        with pytest.raises(RiftcoError, match="expected a regular file"):
            require_regular_file(path)


def test_read_bounded_stops_at_the_limit(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1000)
    with pytest.raises(RiftcoError, match="expected at most 999 bytes; found 1000"):
        read_bounded(path, 999)
    assert read_bounded(path, 1000) == b"x" * 1000
    assert require_regular_file(path) == 1000


def test_missing_files_are_typed_errors(tmp_path):
    with pytest.raises(Refused, match="cannot read"):
        read_bounded(tmp_path / "absent", 10, Refused)
    with pytest.raises(RiftcoError, match="cannot read"):
        require_regular_file(tmp_path / "absent")
