"""docs/architecture.md tells the truth: its layer diagrams are pyproject's import-linter contracts,
and every module appears under its concern ("Where each concern lives"). A new module fails here
until the page names it.

The rule for a module ``<half>/<package>/[<sub>/]<name>.py``: the bullet of that half whose first
name is `` `<package>/` `` names `` `<name>` `` (or `` `<name>.py` ``), and `` `<sub>/` `` too when nested;
for a module at the top of a half (``runtime/launch.py``) some bullet of that half names
`` `launch.py` ``. Names are written in backticks.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
HALVES = {"orchestrator": "Orchestrator (`orchestrator/`):", "runtime": "Runtime (`runtime/`):"}
CONTRACTS = {"orchestrator": "orchestrator-layers", "runtime": "runtime-layers"}


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def bullets(half: str) -> List[str]:
    """The bullets (continuation lines joined) of ``half``'s part of "Where each concern lives"."""
    concerns = _section(PAGE.read_text(encoding="utf-8"), "Where each concern lives")
    starts = {h: concerns.index(head) for h, head in HALVES.items()}
    order = sorted(starts.values())
    begin = starts[half]
    end = next((s for s in order if s > begin), len(concerns))
    out: List[str] = []
    for line in concerns[begin:end].splitlines()[1:]:
        if line.startswith("* "):
            out.append(line[2:])
        elif out and line.startswith("  "):
            out[-1] += " " + line.strip()
    return out


def names(bullet: str) -> List[str]:
    return re.findall(r"`([^`]+)`", bullet)


def missing(half: str) -> List[str]:
    """The modules of ``half`` the page does not name under their concern."""
    items = bullets(half)
    by_package: Dict[str, str] = {}
    for item in items:
        found = names(item)
        if found and found[0].endswith("/"):
            by_package[found[0].rstrip("/")] = item
    out = []
    for path in sorted((ROOT / half).rglob("*.py")):
        rel = path.relative_to(ROOT / half)
        if rel.name == "__init__.py" or rel.parts[0].startswith("_"):
            continue
        stem = rel.stem
        if len(rel.parts) == 1:
            ok = any(f"{stem}.py" in names(item) for item in items)
        else:
            item = by_package.get(rel.parts[0], "")
            said = set(names(item))
            ok = bool(said & {stem, f"{stem}.py"}) and all(f"{sub}/" in said for sub in rel.parts[1:-1])
        if not ok:
            out.append(f"{half}/{rel}")
    return out


def diagram_layers(half: str) -> List[str]:
    """The layers of ``half``'s diagram (a code block whose first line starts with the half's name),
    top to bottom: the first column of each line, "a | b" kept whole."""
    layers_text = _section(PAGE.read_text(encoding="utf-8"), "The layers")
    for block in re.findall(r"```\n(.*?)```", layers_text, re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith(half):
            return [re.split(r"\s{2,}", line.strip())[0] for line in lines[1:] if line.startswith("  ") and
                    not line.startswith("   ")]
    raise AssertionError(f"docs/architecture.md has no layer diagram starting with {half!r}")


def contract_layers(half: str) -> List[str]:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in data["tool"]["importlinter"]["contracts"] if c["id"] == CONTRACTS[half])
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in contract["layers"]]


def test_every_module_appears_under_its_concern():
    gone = missing("orchestrator") + missing("runtime")
    assert not gone, ("docs/architecture.md, \"Where each concern lives\", does not name these modules in "
                      "their package's bullet:\n" + "\n".join(gone))


def test_the_layer_diagrams_are_the_import_linter_contracts():
    for half in HALVES:
        assert diagram_layers(half) == contract_layers(half), half


if __name__ == "__main__":
    for half in HALVES:
        print(half, "missing:", *missing(half), sep="\n  ")
        print(half, "diagram:", diagram_layers(half), "contract:", contract_layers(half))
    sys.exit(0)
