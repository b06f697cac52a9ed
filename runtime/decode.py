"""Decode a generate job's saved latents: ``python -m sporch.runtime.decode RUN_DIR``.

What ``sporch decode RUN_DIR`` runs (one process, this machine): for every prompt whose
latents the job kept in ``RUN_DIR/latents/`` (runtime/pipelines/latent_files.py: written before
decoding, with a fingerprint of the job), load the pipeline's VAE, decode and write the file,
as the job would have. No text encoder and no transformer is loaded; nothing is denoised.

Exit codes: 0 every saved prompt decoded; 1 a decode failed; 2 not a generate job, no plan,
or nothing saved to decode.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from sporch.orchestrator.contract.plan import Plan
from sporch.runtime.pipelines.generate import decode_saved
from sporch.runtime.pipelines.latent_files import SavedLatentsError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sporch.runtime.decode", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="the job folder (plan.json, latents/)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    try:
        plan = Plan.load(str(run_dir / "plan.json"))
    except (OSError, ValueError) as exc:
        print(f"sporch decode: cannot read {run_dir / 'plan.json'} ({exc})", file=sys.stderr)
        return 2
    if plan.workload.kind != "generate":
        print(f"sporch decode: {run_dir} is a {plan.workload.kind} job; only generate jobs have latents to decode",
              file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        written = decode_saved(plan, device, run_dir)
    except (FileNotFoundError, SavedLatentsError) as exc:
        print(f"sporch decode: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - one line for the person running it
        print(f"sporch decode: decoding failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"decoded {len(written)} prompt(s) into {run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
