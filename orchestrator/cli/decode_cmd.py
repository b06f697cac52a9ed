"""``sporch decode RUN_DIR``: decode a generate job's kept latents without denoising again.

A generate job keeps each prompt's denoised latents in ``RUN_DIR/latents/`` before it decodes
them (docs/generate.md); when the decode failed (the VAE ran out of memory, the job hit its
time limit while decoding), this decodes them on this machine: one process that loads only
the pipeline's VAE (``python -m sporch.runtime.decode``). Re-running the job does the same.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.errors import SporchError


@click.command("decode", short_help="Decode a generate job's kept latents (no denoising).")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where the VAE runs (default: cuda when available).")
def decode(run_dir: str, device: Optional[str]) -> None:
    """Decode the latents a generate job in RUN_DIR kept, into its video or image files."""
    folder = Path(run_dir)
    plan_file = folder / "plan.json"
    try:
        plan = Plan.load(str(plan_file))
    except FileNotFoundError:
        raise SporchError(f"{run_dir} has no plan.json: give the job folder of a generate job "
                          "(`sporch status JOB` shows it)") from None
    except (OSError, ValueError) as exc:
        raise SporchError(f"cannot read {plan_file}: {' '.join(str(exc).split())}") from None
    if plan.workload.kind != "generate":
        raise SporchError(f"{run_dir} is a {plan.workload.kind} job; only generate jobs keep latents to decode")
    if not any((folder / "latents").glob("*.safetensors")):
        raise SporchError(f"{folder / 'latents'} holds no latents: the job never finished denoising a prompt; "
                          "run the job (`sporch submit` / `sporch run`)")
    # options first, then "--": a folder named like an option (-dash) stays the folder
    cmd = ([sys.executable, "-m", "sporch.runtime.decode"] + (["--device", device] if device else [])
           + ["--", str(folder)])
    code = subprocess.call(cmd)
    click.get_current_context().exit(code)
