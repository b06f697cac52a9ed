"""Job values handled one place at a time (issue 51, B and C): ``workload.sigmas`` on a workload
that never reads it, a digit that is not ASCII (``parallel.ring=²``), ``model.weights`` that
holds no model without a preset, and a container image written with ``~``. Each is one line on
stderr, exit 2, nothing written."""

from __future__ import annotations

import os

import pytest

from sporch.orchestrator.contract.numbers import digits_value, is_digits
from sporch.orchestrator.contract.durations import time_seconds
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.settings import Setting, parse
from tests.cli.test_bad_input_hardening import in_tmp, one_line_error  # noqa: F401 (in_tmp: a fixture)
from tests.testutil import EXAMPLES, container_cluster

TINY = EXAMPLES / "tiny.yaml"
SIGMAS = ["workload.steps=4", "workload.sigmas=[1.0,0.75,0.5,0.25]"]


# -- B: workload.sigmas only where a workload reads it --------------------------------------------
@pytest.mark.parametrize("kind", ["verify", "benchmark"])
def test_sigmas_on_a_workload_that_never_reads_them_are_refused(run_cli, in_tmp, kind):
    code, out, err = run_cli("plan", "--cluster", "local", TINY, f"workload.kind={kind}", *SIGMAS)
    one_line_error(code, out, err, "'workload.sigmas'", kind, "inference")


def test_sigmas_on_inference_still_plan(run_cli, in_tmp):
    code, out, err = run_cli("plan", "--cluster", "local", "--json", TINY, "workload.kind=inference", *SIGMAS)
    assert code == 0, err


# -- C: digits that str.isdigit accepts and int() does not ---------------------------------------
NOT_ASCII = ["²", "٣", "¹²", "①"]


@pytest.mark.parametrize("text", NOT_ASCII)
def test_only_ascii_digits_are_whole_numbers(text):
    assert text.isdigit() and not is_digits(text) and digits_value(text) is None
    assert digits_value(" 12 ") == 12 and is_digits("007")
    assert time_seconds(f"{text}:00:00") is None
    with pytest.raises(ValueError, match="not dp"):
        Layout.from_name(f"1x1x{text}x1")
    with pytest.raises(ValueError, match="whole number"):
        parse(Setting("SPORCH_X", "int", "a test", "both"), text)


@pytest.mark.parametrize("text", NOT_ASCII)
@pytest.mark.parametrize("dim", ["ring", "ulysses"])
def test_a_layout_of_a_digit_that_is_not_ascii_is_one_line(run_cli, in_tmp, dim, text):
    code, out, err = run_cli("plan", "--cluster", "local", TINY, f"parallel.{dim}={text}")
    one_line_error(code, out, err, f"'parallel.{dim}'")


def test_a_time_of_digits_that_are_not_ascii_is_one_line(run_cli, in_tmp):
    code, out, err = run_cli("plan", "--cluster", "local", TINY, "resources.time=٣:00:00")
    one_line_error(code, out, err, "'resources.time'")


def test_columns_of_a_digit_that_is_not_ascii_is_ignored(run_cli, in_tmp, monkeypatch):
    monkeypatch.setenv("COLUMNS", "²")
    code, out, err = run_cli("plan", "--cluster", "local", TINY)
    assert code == 0 and "internal error" not in err, err


# -- C: model.weights that holds no model, without a preset --------------------------------------
def _weights_cases(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "empty").mkdir()
    return {"missing": (tmp_path / "nonexistent", "does not exist"),
            "dangling": (tmp_path / "dangling", "link"),
            "fifo": (tmp_path / "fifo", "not a folder or a regular file"),
            "device": ("/dev/zero", "not a folder or a regular file"),
            "empty folder": (tmp_path / "empty", "no config.json")}


@pytest.mark.parametrize("case", ["missing", "dangling", "fifo", "device", "empty folder"])
def test_weights_without_a_model_name_model_weights(run_cli, in_tmp, tmp_path, case):
    path, why = _weights_cases(tmp_path)[case]
    code, out, err = run_cli("plan", "--cluster", "local", TINY, "model.preset=null", f"model.weights={path}")
    line = one_line_error(code, out, err, f"model.weights {path}", why)
    assert "model.depth" not in line, line


# -- C: a container image written with ~ ----------------------------------------------------------
@pytest.mark.parametrize("runtime", ["pyxis", "apptainer", "podman"])
def test_an_image_under_tilde_is_refused(run_cli, in_tmp, tmp_path, runtime):
    cluster = container_cluster(tmp_path, runtime)
    code, out, err = run_cli("render", "--cluster", cluster, TINY, "parallel.ring=2", "parallel.ulysses=4",
                             "container.image=~/img.sif")
    one_line_error(code, out, err, "'container.image'", "~", "full path")
    assert not any(in_tmp.iterdir())
