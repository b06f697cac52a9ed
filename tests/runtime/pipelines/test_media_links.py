"""Issue 32 item 1: a decoded video or image is written without following a link: not at its
temporary name (ffmpeg writes into a private folder sporch created), not at its final name (a
link there is replaced), whatever an earlier or hostile writer left in the run folder."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("imageio")

from sporch.runtime.pipelines.media import read, write  # noqa: E402

VICTIM = b"somebody else's file\n"


@pytest.mark.parametrize("fmt,frames", [("png", 1), ("mp4", 3)])
def test_links_at_the_temporary_and_final_names_are_not_followed(tmp_path, fmt, frames):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    name = f"0000-a-red-fox.{fmt}"
    victims = {n: outside / n for n in ("tmp-victim", "final-victim")}
    for v in victims.values():
        v.write_bytes(VICTIM)
    # the temporary names of before (.part-<name>) and the final name: links to files elsewhere
    (run / f".part-{name}").symlink_to(victims["tmp-victim"])
    (run / name).symlink_to(victims["final-victim"])
    data = np.random.default_rng(0).random((frames, 16, 16, 3), dtype=np.float32)
    path = write(run / name, data, fmt, fps=4)
    assert all(v.read_bytes() == VICTIM for v in victims.values())
    assert not path.is_symlink() and read(path).shape == (frames, 16, 16, 3)
    # nothing else is left in the run folder (the private folder is gone)
    assert sorted(p.name for p in run.iterdir()) == sorted([name, f".part-{name}"])
