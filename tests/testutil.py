"""Helpers shared by the test folders: ``from tests.testutil import ROOT, EXAMPLES, write``.

Every folder under tests/ is a package (it has an ``__init__.py``), so pytest imports a test
file as ``tests.<folder>.<file>`` with the repository root on ``sys.path``; helpers are imported
by that name, whichever folder or file runs on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: Fixed job dir used in golden files (stable across machines and runs).
GOLDEN_JOB_DIR = "/sporch/jobs/JOB"


def golden_dir(test_file: str) -> Path:
    """The ``golden/`` folder beside a test file (its expected outputs)."""
    return Path(test_file).resolve().parent / "golden"


def write(folder: Path, name: str, text: str) -> Path:
    p = Path(folder) / name
    p.write_text(text)
    return p


def update_golden() -> bool:
    return os.environ.get("SPORCH_UPDATE_GOLDEN", "") not in ("", "0")


#: The container section of :func:`container_cluster`'s descriptors (and each runtime's image).
CONTAINER = {"mounts": ["/scratch:/scratch", "/datasets:/data:ro"], "workdir": "/workspace",
             "env": {"HF_HOME": "/scratch/hf", "NOTE": "two words"}, "python": "/opt/conda/bin/python"}
IMAGES = {"pyxis": "/images/sporch+torch.sqsh", "apptainer": "/images/sporch.sif",
          "singularity": "/images/sporch.sif", "podman": "registry.example/sporch:1.0"}


def container_cluster(folder: Path, runtime: str, name: str = "", top: dict | None = None, **keys) -> str:
    """A descriptor file in ``folder``: clusters/a100x8.yaml with a ``runtime`` container
    (CONTAINER, then ``keys``), and the top-level keys ``top`` (mappings merged)."""
    import yaml

    data = yaml.safe_load((ROOT / "clusters" / "a100x8.yaml").read_text())
    data["container"] = {"runtime": runtime, "image": IMAGES.get(runtime, "img"), **CONTAINER, **keys}
    for key, value in (top or {}).items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    return str(write(folder, f"{name or 'a100x8-' + runtime}.yaml", yaml.safe_dump(data)))


def tiny_wan_folder(folder: Path, seed: int = 0) -> Path:
    """The ``tiny`` preset's transformer (a tiny WanTransformer3DModel with seeded random weights)
    saved in the diffusers layout at ``folder`` (config.json + diffusion_pytorch_model.safetensors):
    what ``model.weights`` of examples/tiny.yaml loads."""
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families.wan import TINY

    random_diffusers("WanTransformer3DModel", dict(TINY), seed=seed).save_pretrained(str(folder))
    return folder
