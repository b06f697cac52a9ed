"""``sporch``: click group with lazily imported commands and one-line errors.

Adding a command: write ``orchestrator/cli/<name>_cmd.py`` exposing a click command (or
group) with a ``short_help``, and add one line to ``COMMANDS`` with the same line (``sporch
--help`` prints it without importing the command; tests/cli/test_cli_commands.py holds the two
equal). Nothing else is imported until that command runs, so ``sporch --help`` and the dry-run
stay fast (and never import torch).
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Optional, Sequence

import click

from sporch.orchestrator.cli.helptext import attach
from sporch.orchestrator.cli.terminal import echo, visible
from sporch.orchestrator.contract import settings
from sporch.orchestrator.safe_files import UnsafeFileError, is_no_room
from sporch.orchestrator.errors import SporchError

#: Where an error's continuation lines start when it is wrapped at the terminal's width.
ERROR_INDENT = 4

#: command name -> "module:attribute" of a click command; keep sorted by name.
COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("sporch.orchestrator.cli.calibrate_cmd:calibrate", "Fit the cost model to a campaign's measured steps and phases."),
    "campaign": ("sporch.orchestrator.cli.campaign_cmd:campaign", "Benchmark campaigns: plan a sweep, report, compare."),
    "cancel": ("sporch.orchestrator.cli.cancel_cmd:cancel", "Cancel submitted jobs (scancel)."),
    "clusters": ("sporch.orchestrator.cli.clusters_cmd:clusters", "List and show cluster descriptors."),
    "decode": ("sporch.orchestrator.cli.decode_cmd:decode", "Decode a generate job's kept latents (no denoising)."),
    "inspect": ("sporch.orchestrator.cli.inspect_cmd:inspect",
                "What a checkpoint (presets, memory per GPU by placement) or a LoRA file (targets) is."),
    "logs": ("sporch.orchestrator.cli.logs_cmd:logs", "Print a job's batch or rank log (-f: follow)."),
    "models": ("sporch.orchestrator.cli.models_cmd:models",
               "The model families: classes, presets, workloads, placements, cache, LoRA."),
    "plan": ("sporch.orchestrator.cli.plan_cmd:plan", "Show the layout, rank/group map and estimates of a job."),
    "predict": ("sporch.orchestrator.cli.predict_cmd:predict",
                "The cost model against the published tables: predicted vs published seconds."),
    "preflight": ("sporch.orchestrator.cli.preflight_cmd:preflight",
                  "Check every node (GPUs, versions, weights) and the plan's links; name the slow one."),
    "render": ("sporch.orchestrator.cli.render_cmd:render", "Print the Slurm batch script of a job."),
    "run": ("sporch.orchestrator.cli.run_cmd:run", "Run a job on this machine (--local: one CPU process per rank)."),
    "status": ("sporch.orchestrator.cli.status_cmd:status", "States of submitted jobs (failed rank and error line)."),
    "submit": ("sporch.orchestrator.cli.submit_cmd:submit", "Submit a job (--dry-run: show what would run where)."),
    "wait": ("sporch.orchestrator.cli.wait_cmd:wait", "Wait for a job to end; exit code from the job."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name in self.commands:
            return self.commands[name]
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name][0].partition(":")
        return attach(getattr(import_module(module), attr), name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="\b\nExample:\n  sporch plan --cluster a100x32 examples/wan14b-720p.yaml parallel.ring=auto\n\n"
                    "Each command's --help has an example; JOB.yaml may be followed by KEY=VALUE overrides "
                    "(parallel.ring=2). Docs: docs/cli.md in the sporch repository.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name="sporch", prog_name="sporch")
def cli(debug: bool) -> None:
    """sporch: sequence-parallel DiT jobs from a YAML file to a Slurm job."""


def _debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or settings.read(settings.DEBUG)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point. Returns the exit code (0 ok, 2 bad input, 1 internal error)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(args)
    try:
        # standalone_mode=False: click *returns* the code of ctx.exit(n) instead of raising.
        # obj: what commands may read of the invocation (submit records its command line).
        rc = cli.main(args=args, prog_name="sporch", standalone_mode=False, obj={"argv": args})
        return rc if isinstance(rc, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:  # usage errors: one line too, exit 2
        if debug:
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `sporch campaign` alone: its help
            e.show()
            return e.exit_code
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if isinstance(e, click.UsageError) and ctx else ""
        echo(visible(f"sporch: error: {' '.join(e.format_message().split())}{hint}", one_line=True), err=True,
             indent=ERROR_INDENT)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except (SporchError, UnsafeFileError) as e:  # bad input: one line, exit 2
        if debug:
            raise
        echo(visible(f"sporch: error: {' '.join(str(e).split())}", one_line=True), err=True, indent=ERROR_INDENT)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a full disk: what and where, in one line; anything else is a bug
        if debug:
            raise
        if is_no_room(e):
            where = f" {e.filename}" if getattr(e, "filename", None) else ""
            echo(visible(f"sporch: error: cannot write{where}: {e.strerror}; free some space (or write "
                         "elsewhere) and run again", one_line=True), err=True, indent=ERROR_INDENT)
            return 1
        echo(visible(f"sporch: internal error: {type(e).__name__}: {' '.join(str(e).split())} (rerun with --debug)",
                     one_line=True), err=True, indent=ERROR_INDENT)
        return 1


if __name__ == "__main__":
    sys.exit(main())
