"""The closing part of every command's ``--help``: an example, what ``KEY=VALUE`` overrides
are (for commands that take a job file), and where the docs are.

``main.LazyGroup`` attaches it when it loads a command; a command (or subcommand) added
without an entry in :data:`EXAMPLES` shows the docs pointer only, and the CLI tests fail.
"""

from __future__ import annotations

from typing import Any

import click

#: "command" or "group subcommand" -> (example command line, docs page)
EXAMPLES: dict[str, tuple[str, str]] = {
    "": ("sporch plan --cluster a100x32 examples/wan14b-720p.yaml parallel.ring=auto", "docs/cli.md"),
    "calibrate": ("sporch calibrate campaigns/scaling --cluster a100x32", "docs/plan.md"),
    "campaign": ("sporch campaign plan examples/campaigns/tiny.yaml", "docs/campaigns.md"),
    "campaign plan": ("sporch campaign plan examples/campaigns/tiny.yaml --json", "docs/campaigns.md"),
    "campaign run": ("sporch campaign run --local examples/campaigns/tiny.yaml", "docs/campaigns.md"),
    "campaign status": ("sporch campaign status campaigns/tiny", "docs/campaigns.md"),
    "campaign report": ("sporch campaign report campaigns/tiny --out /tmp/report", "docs/campaigns.md"),
    "campaign compare": ("sporch campaign compare campaigns/before campaigns/after --threshold 5%",
                         "docs/campaigns.md"),
    "campaign history": ("sporch campaign history campaigns/tiny --metric step_ms_median --plot trend.png",
                         "docs/campaigns.md"),
    "cancel": ("sporch cancel tiny-20260101-120000", "docs/submit.md"),
    "clusters": ("sporch clusters show a100x32", "docs/clusters.md"),
    "clusters list": ("sporch clusters list", "docs/clusters.md"),
    "clusters show": ("sporch clusters show a100x32 --json", "docs/clusters.md"),
    "clusters discover": ("sporch clusters discover --partition gpu -o ~/.config/sporch/clusters/mine.yaml",
                          "docs/clusters.md"),
    "decode": ("sporch decode runs/wan-fox/20260101-120000 --device cuda", "docs/generate.md"),
    "inspect": ("sporch inspect /data/Wan2.1-T2V-1.3B-Diffusers --gpus 1,4,8", "docs/model.md"),
    "logs": ("sporch logs tiny --rank 1 -f", "docs/submit.md"),
    "plan": ("sporch plan --cluster a100x32 examples/wan14b-720p.yaml parallel.ring=2 parallel.ulysses=16",
             "docs/plan.md"),
    "predict": ("sporch predict wan21-t2v-14b-720p-h800 flux-dev-1024-h100-eager", "docs/plan.md"),
    "preflight": ("sporch preflight --cluster slurmlab --nodes 2 --weights /data/Wan2.1-T2V-1.3B-Diffusers",
                  "docs/troubleshooting.md"),
    "render": ("sporch render --cluster a100x32 examples/wan14b-720p.yaml workload.steps=10 -o job.sbatch",
               "docs/submit.md"),
    "run": ("sporch run --local --cluster local examples/tiny.yaml --verify parallel.ring=2 parallel.ulysses=2",
            "docs/cli.md"),
    "status": ("sporch status --last 5", "docs/submit.md"),
    "submit": ("sporch submit --cluster slurmlab examples/tiny.yaml --dry-run workload.steps=4", "docs/submit.md"),
    "wait": ("sporch wait tiny --timeout 600", "docs/submit.md"),
}

OVERRIDES = ("KEY=VALUE overrides set one key of JOB.yaml for this command only, with the dotted path "
             "of the key: parallel.ring=2 workload.steps=10 model.preset=tiny (docs/jobs.md lists the keys).")


def epilog(path: str, takes_overrides: bool) -> str:
    """The text after the options of ``sporch <path> --help``."""
    example, doc = EXAMPLES.get(path, ("", "docs/cli.md"))
    parts = [f"\b\nExample:\n  {example}"] if example else []
    if takes_overrides:
        parts.append(OVERRIDES)
    parts.append(f"More: {doc} in the sporch repository (all commands: docs/cli.md).")
    return "\n\n".join(parts)


def attach(cmd: Any, path: str) -> Any:
    """Give ``cmd`` (and, for a group, its subcommands) the closing help text, once."""
    if getattr(cmd, "_sporch_epilog", False):
        return cmd
    cmd.epilog = epilog(path, any(p.name == "overrides" for p in cmd.params))
    cmd._sporch_epilog = True
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            attach(sub, f"{path} {name}".strip())
    return cmd
