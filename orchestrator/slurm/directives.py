"""What may stand on an ``#SBATCH`` line: the grammar of directive values (standard library only).

A value that lands on one ``#SBATCH --key=value`` line or in a script comment must not leave
that line: one line, no control characters; directive values are also single words without
quotes or backslashes (sbatch reads its own quoting on these lines; they cannot be quoted).
The cluster descriptor's loader checks its ``slurm`` section with these rules, and
:class:`sporch.orchestrator.submit.slurm_job.SlurmJob` every value of a job's request.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from sporch.orchestrator.errors import SporchError

#: Optional sbatch options taken from the cluster's ``slurm`` section as they are.
OPTIONAL_OPTIONS = ("partition", "account", "qos", "constraint", "mem")

#: A value that lands on one ``#SBATCH`` line or in a script comment: one line, no control characters.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
#: Names that sbatch and the shell take as they are (job names).
WORD_RE = re.compile(r"[A-Za-z0-9_.\-]+")
#: Environment variable names.
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: An sbatch option name (without its leading ``--``).
OPTION_RE = re.compile(r"[A-Za-z][\w-]*")
#: A Slurm job id (``123``, or ``123_4`` for an array task).
JOB_ID_RE = re.compile(r"\d+(_\d+)?", re.ASCII)


def check_line(what: str, value: object) -> str:
    """``value`` as text if it is a single line without control characters, else a SporchError."""
    text = str(value)
    if CONTROL_RE.search(text):
        raise SporchError(f"{what} {text!r} must be a single line without control characters")
    return text


#: What sbatch reads as its own quoting or word breaks on an ``#SBATCH`` line.
UNQUOTABLE_RE = re.compile(r"[\s\"'\\]")


def check_directive_value(what: str, value: object) -> str:
    """A value of an ``#SBATCH --key=value`` option: one line, no whitespace, no quotes or
    backslashes (sbatch reads its own quoting on these lines: it strips quotes and refuses an
    unmatched one; they cannot be escaped)."""
    text = check_line(what, value)
    if not text or UNQUOTABLE_RE.search(text):
        raise SporchError(f"{what} {text!r} must be a non-empty value without whitespace, quotes or backslashes")
    return text


def check_directive_path(what: str, value: object) -> str:
    """A folder that will stand on ``#SBATCH --output``/``--error`` lines (a job's or campaign's
    ``output_dir``): refused at plan time unless :func:`check_directive_value` accepts it."""
    text = check_line(what, value)
    if not text or UNQUOTABLE_RE.search(text):
        raise SporchError(f"{what} {text!r} cannot stand on an #SBATCH line: use a path without whitespace, "
                          "quotes or backslashes")
    return text


def filename_pattern(path: str) -> str:
    """``path`` as the literal start of a Slurm filename pattern (``--output``/``--error`` of
    sbatch and srun expand ``%j``, ``%t``, ...): every ``%`` doubled."""
    return str(path).replace("%", "%%")


def parse_extra(lines: List[str]) -> Tuple[Tuple[str, Optional[str]], ...]:
    """``slurm.extra`` (``--reservation=x``, ``#SBATCH --hint=y``, ``--overcommit``) ->
    ((option, value or None), ...)."""
    out = []
    for raw in lines:
        line = check_line("slurm.extra line", raw).strip()
        if line.startswith("#SBATCH"):
            line = line[len("#SBATCH"):].strip()
        m = re.fullmatch(rf"--({OPTION_RE.pattern})(?:=(.*))?", line)
        if not m:
            raise SporchError(f"slurm.extra line {raw!r} is not an sbatch option of the form --key[=value] "
                              "(e.g. --reservation=NAME)")
        if m.group(2) is not None:
            check_directive_value(f"slurm.extra --{m.group(1)}", m.group(2))
        out.append((m.group(1), m.group(2)))
    return tuple(out)
