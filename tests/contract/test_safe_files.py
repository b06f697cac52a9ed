"""Issue 32 items 1 and 3: the one rule for files sporch writes at a name a user gave
(safe_files.py): a taken name is refused unless --force; a link there is replaced,
never written through; the data goes to a random temporary name created exclusively (or into a
private folder, for writers that open their path themselves), then to the name. And the reader
that takes only regular files (item 11)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from sporch.orchestrator.safe_files import (NotAFileError, OutputExistsError, UnsafeFileError, check_output,
                                                      open_regular, output_file, read_regular, write_output)

VICTIM = "the user's own file: must not change\n"


@pytest.fixture
def victim(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "victim.txt"
    path.write_text(VICTIM)
    return path


def test_a_new_name_is_written(tmp_path):
    out = write_output(tmp_path / "new.txt", "data")
    assert out.read_text() == "data" and sorted(p.name for p in tmp_path.iterdir()) == ["new.txt"]


@pytest.mark.parametrize("what", ["file", "link", "dangling link"])
def test_a_taken_name_is_refused_without_force_and_replaced_with_it(tmp_path, victim, what):
    out = tmp_path / "out.txt"
    if what == "file":
        out.write_text(VICTIM)
    else:
        out.symlink_to(victim if what == "link" else tmp_path / "outside" / "nothing-yet")
    with pytest.raises(OutputExistsError, match="pass --force") as e:
        write_output(out, "new", option="-o")
    assert "\n" not in str(e.value) and "-o" in str(e.value)
    assert victim.read_text() == VICTIM and not (tmp_path / "outside" / "nothing-yet").exists()
    write_output(out, "new", force=True)
    assert out.read_text() == "new" and not out.is_symlink()
    assert victim.read_text() == VICTIM and not (tmp_path / "outside" / "nothing-yet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "outside"]  # no temporary left


def test_a_folder_is_never_an_output(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(UnsafeFileError, match="is a folder"):
        check_output(tmp_path / "d", True)


def test_output_file_gives_a_private_path_and_publishes_it(tmp_path, victim):
    out = tmp_path / "video.mp4"
    out.symlink_to(victim)
    with output_file(out, replace=True) as inner:
        assert inner.name == "video.mp4" and inner.parent != tmp_path  # same extension, own folder
        assert stat.S_IMODE(inner.parent.stat().st_mode) == 0o700
        inner.write_text("frames")
    assert out.read_text() == "frames" and not out.is_symlink() and victim.read_text() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "video.mp4"]
    with pytest.raises(RuntimeError):
        with output_file(tmp_path / "b.png", replace=True) as inner:
            inner.write_text("half")
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "video.mp4"]  # nothing half-written
    with pytest.raises(OutputExistsError):
        with output_file(out, replace=False):
            pass


def test_a_name_taken_while_writing_is_not_replaced_without_force(tmp_path):
    out = tmp_path / "late.txt"
    with pytest.raises(OutputExistsError, match="appeared"):
        with output_file(out, replace=False) as inner:
            inner.write_text("mine")
            out.write_text(VICTIM)  # someone else's file appears meanwhile
    assert out.read_text() == VICTIM


def test_regular_files_only_are_read(tmp_path):
    (tmp_path / "f").write_text("ok")
    assert read_regular(tmp_path / "f") == b"ok" and read_regular(tmp_path / "f", 1) == b"o"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # nobody writes: a blocking open would wait forever; this returns at once
    t = threading.Thread(target=lambda: pytest.raises(NotAFileError, open_regular, fifo), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive()
    with pytest.raises(NotAFileError, match="FIFO"):
        open_regular(fifo)
    with pytest.raises(NotAFileError, match="folder"):
        open_regular(tmp_path)
    if os.path.exists("/dev/zero"):
        with pytest.raises(NotAFileError, match="not a regular file"):
            read_regular("/dev/zero")
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")
