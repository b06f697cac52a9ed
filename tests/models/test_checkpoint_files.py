"""The checkpoint pre-check (models/checkpoint_files.py) refuses what the safetensors loader
would refuse, with one line, before any rank starts (docs/model.md promises exit 2 then)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sporch.orchestrator.models.checkpoint_files import CheckpointError, open_checkpoint, read_header

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "tiny.yaml"


def write_safetensors(path: Path, header: dict, data_len: int | None = None) -> Path:
    """A file with ``header`` and as many data bytes as its offsets say (or ``data_len``)."""
    raw = json.dumps(header).encode()
    if data_len is None:
        data_len = max((m["data_offsets"][1] for k, m in header.items() if k != "__metadata__"), default=0)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_len)
    return path


def good_header() -> dict:
    return {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}


def test_a_well_formed_file_is_read(tmp_path):
    info = read_header(write_safetensors(tmp_path / "m.safetensors", good_header()))
    assert info["a"].shape == (2, 3) and info["b"].dtype == "BF16"


@pytest.mark.parametrize("mutate, needle", [
    (lambda h: h["b"].update(data_offsets=[16, 24]), "overlaps"),                # item 12: overlapping offsets
    (lambda h: h["b"].update(dtype="F32"), "needs 16"),                          # dtype over the wrong byte count
    (lambda h: h["b"].update(dtype="Q7"), "unknown dtype 'Q7'"),                 # unknown dtype
    (lambda h: h["a"].update(data_offsets=[-24, 0]), "negative"),                # negative offset
    (lambda h: h["a"].update(shape=[-2, -3]), "negative"),                       # negative shape
    (lambda h: h["b"].update(data_offsets=[28, 36]), "gap of 4 bytes"),          # a hole
])
def test_bad_entries_are_refused_with_one_line(tmp_path, mutate, needle):
    header = good_header()
    mutate(header)
    with pytest.raises(CheckpointError, match=needle) as info:
        read_header(write_safetensors(tmp_path / "m.safetensors", header))
    assert "\n" not in str(info.value)


def test_trailing_bytes_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="8 bytes after its last tensor"):
        read_header(write_safetensors(tmp_path / "m.safetensors", good_header(), data_len=40))


BOMB = "[" * 200_000 + "]" * 200_000


def test_json_bombs_are_one_line_errors(tmp_path):
    raw = BOMB.encode()
    (tmp_path / "h.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(CheckpointError, match="nests too deeply"):
        read_header(tmp_path / "h.safetensors")
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "model.safetensors.index.json").write_text('{"weight_map": ' + BOMB + "}")
    with pytest.raises(CheckpointError, match="nests too deeply"):
        open_checkpoint(sharded)
    single = tmp_path / "single"
    single.mkdir()
    write_safetensors(single / "model.safetensors", good_header())
    (single / "config.json").write_text(BOMB)
    with pytest.raises(CheckpointError, match="nests too deeply"):
        open_checkpoint(single)
    (single / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        open_checkpoint(single)
    (single / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a JSON object"):
        open_checkpoint(single)


def test_overlapping_checkpoint_is_exit_2_before_any_rank(tmp_path):
    """Through the CLI: one line, exit 2, and no run folder (no rank started)."""
    folder = tmp_path / "Wan-T2V"
    folder.mkdir()
    header = good_header()
    header["b"]["data_offsets"] = [16, 24]
    write_safetensors(folder / "diffusion_pytorch_model.safetensors", header)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster",
                           "local", str(TINY), f"model.weights={folder}", "--run-dir", str(run_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "overlaps" in lines[0], proc.stderr
    assert not run_dir.exists()


# -- property: the pre-check and the real loader agree -------------------------------------
DTYPES = ["F32", "F16", "BF16", "I64", "U8", "BOOL", "F64", "XX"]
entry = st.fixed_dictionaries({
    "dtype": st.sampled_from(DTYPES),
    "shape": st.lists(st.integers(-1, 4), max_size=3),
    "data_offsets": st.lists(st.integers(-8, 160), min_size=2, max_size=2),
})
headers = st.dictionaries(st.text("abcdef", min_size=1, max_size=3), entry, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=headers, extra=st.integers(-4, 4))
def test_fuzzed_headers_never_escape_and_agree_with_safetensors(tmp_path, header, extra):
    """Any header: either a CheckpointError, or a file the safetensors library opens too."""
    safetensors = pytest.importorskip("safetensors")
    path = tmp_path / "f.safetensors"
    ends = [m["data_offsets"][1] for m in header.values() if isinstance(m["data_offsets"][1], int)]
    write_safetensors(path, header, data_len=max(0, max(ends, default=0) + extra))
    try:
        read_header(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
        return
    with safetensors.safe_open(str(path), framework="numpy") as f:  # must not raise
        assert sorted(f.keys()) == sorted(header)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=64))
def test_random_bytes_are_a_checkpoint_error(tmp_path, blob):
    path = tmp_path / "r.safetensors"
    path.write_bytes(blob)
    try:
        read_header(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
