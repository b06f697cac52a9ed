"""A job folder named through a symbolic link (issue 51, C): ``render --out L``, ``render
--job-dir L`` and ``run --local --run-dir L`` with L a link (dangling, or to an empty folder)
are refused in one line, as ``-o`` names are, and nothing is written at the link's target."""

from __future__ import annotations

import pytest

from tests.cli.test_bad_input_hardening import one_line_error
from tests.testutil import EXAMPLES

TINY = EXAMPLES / "tiny.yaml"


@pytest.fixture
def links(tmp_path):
    """``dangling`` -> a path that does not exist; ``to-empty`` -> an empty folder."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "target")
    (tmp_path / "to-empty").symlink_to(tmp_path / "empty")
    return tmp_path


@pytest.mark.parametrize("option", [["render", "--out"], ["render", "--job-dir"]])
@pytest.mark.parametrize("name", ["dangling", "to-empty"])
def test_a_job_dir_named_through_a_link_is_refused(run_cli, links, sporch_home, monkeypatch, option, name):
    monkeypatch.chdir(links)
    code, out, err = run_cli(*option[:1], "--cluster", "local", TINY, *option[1:], links / name)
    one_line_error(code, out, err, str(links / name), "symbolic link")
    assert not (links / "target").exists() and list((links / "empty").iterdir()) == []
    assert not (links / "runs").exists()


def test_run_local_into_a_link_is_refused(run_cli, links, sporch_home, monkeypatch):
    monkeypatch.chdir(links)
    code, out, err = run_cli("run", "--local", "--cluster", "local", TINY, "--run-dir", links / "dangling")
    one_line_error(code, out, err, "symbolic link")
    assert not (links / "target").exists() and not sporch_home.exists()


def test_a_folder_under_a_linked_folder_is_still_a_job_dir(run_cli, links, sporch_home, monkeypatch):
    monkeypatch.chdir(links)
    code, out, err = run_cli("render", "--cluster", "local", TINY, "--out", links / "to-empty" / "job")
    assert code == 0, err
    assert (links / "empty" / "job" / "plan.json").is_file()
