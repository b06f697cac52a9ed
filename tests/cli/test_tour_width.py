"""README's tour at COLUMNS=100 (issue 51, D): no line of any command's output is wider than the
terminal, and nothing is cut inside a word -- not a message, a note, a path list, nor a table
cell (``leader/sharded/c`` over ``pu``, ``slurmlab…``).

The commands are read from README.md's tour (and its set-up section), so the test follows the
README. Those that start ranks (``run --local``, ``preflight --local``) print through the same
code as the rest and are checked at 100 columns where they run anyway, with the descriptor's env
(tests/submit/test_local_cluster_env.py); here the others run in-process, from a short temporary
folder (a job folder's path is one word that cannot be broken).
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path

import pytest

from tests.testutil import EXAMPLES, ROOT

WIDTH = 100
#: Commands the issue measured besides the tour's (their widest lines were 188, 176 and unreadable).
EXTRA = ["sporch plan --cluster a100x32 examples/wan14b-720p.yaml --rank",
         "sporch campaign plan examples/campaigns/tiny.yaml",
         "sporch models --wide"]
#: Commands that start ranks (checked where they run: the module's docstring).
RANKS = ("run", "preflight")


def readme_commands() -> list[str]:
    """The ``sporch ...`` lines of README.md's set-up and tour code blocks, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            for part in line.split("&&"):
                if part.strip().startswith("sporch "):
                    out.append(part.strip())
    return out


def tour() -> list[str]:
    return [c for c in readme_commands() + EXTRA if shlex.split(c)[1] not in RANKS]


@pytest.fixture
def short_folder(monkeypatch, tmp_path):
    """A working folder with a short path (the job folders sporch makes under it are printed
    whole), holding a link to the examples; HOME and SPORCH_HOME inside the test's own folder."""
    with tempfile.TemporaryDirectory(prefix="sp") as folder:
        work = Path(folder)
        (work / "examples").symlink_to(EXAMPLES)
        monkeypatch.chdir(work)
        monkeypatch.setenv("HOME", str(work / "home"))  # `clusters list` prints the user's folder
        monkeypatch.setenv("SPORCH_HOME", str(tmp_path / "sporch-home"))
        monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)
        monkeypatch.setenv("COLUMNS", str(WIDTH))
        yield work


def test_the_readme_has_a_tour():
    commands = readme_commands()
    assert len(commands) >= 9 and any(c.startswith("sporch run --local") for c in commands)
    assert all(shlex.split(c)[1] in RANKS for c in set(readme_commands()) - set(tour()))


@pytest.mark.parametrize("command", tour())
def test_tour_fits_100_columns(run_cli, short_folder, command):
    args = shlex.split(command)[1:]
    args = [str(short_folder / "tiny-job") if a == "/tmp/tiny-job" else a for a in args]
    code, out, err = run_cli(*args)
    expected = 2 if "refused" in _comment(command) else 0
    assert code == expected, (command, out, err)
    wide = [line for line in (out + err).splitlines() if len(line) > WIDTH]
    assert not wide, (command, wide)
    assert "…" not in out + err  # folded, never cut


def _comment(command: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next((ln for ln in text.splitlines() if ln.strip().startswith(command)), "")
    return line.split("#", 1)[1] if "#" in line else ""


@pytest.mark.parametrize("columns", [80, WIDTH, 160])
@pytest.mark.parametrize("wide", [False, True])
def test_models_tables_keep_every_word_whole(run_cli, short_folder, monkeypatch, columns, wide):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = run_cli("models", *(["--wide"] if wide else []))
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= columns
    words = set(re.findall(r"[\w./-]+", out))
    _, doc, _ = run_cli("models", "--json")
    presets = [name for row in json.loads(doc) for name in row["presets"]]
    assert len(presets) > 10
    for name in presets:  # a preset's name is one word: never folded over two lines
        assert name in words, (name, out)
    assert "leader/sharded/cpu" in out


def test_an_error_wraps_at_the_terminal_and_stays_one_line_in_a_pipe(run_cli, short_folder, monkeypatch):
    args = ("plan", "--cluster", "a100x32", "examples/wan14b-720p.yaml", "parallel.ring=2")
    code, _, err = run_cli(*args)
    lines = err.splitlines()
    assert code == 2 and len(lines) > 1 and max(map(len, lines)) <= WIDTH, err
    assert lines[0].startswith("sporch: error: ") and all(ln.startswith("    ") for ln in lines[1:])
    assert "1x1x4x8," in err.split()  # the feasible list, word by word
    monkeypatch.delenv("COLUMNS")  # no terminal and no $COLUMNS: one line for scripts and logs
    code, _, err = run_cli(*args)
    assert code == 2 and err.count("\n") == 1 and len(err) > WIDTH
