"""User-facing errors: one line that says what is wrong and how to fix it.

The CLI prints ``str(err)`` on stderr and exits with code 2 (no traceback unless --debug).
"""


class SporchError(Exception):
    """Bad input or an impossible request. The message is one line, complete on its own."""

    exit_code = 2


#: Exit code of a command that could not reach Slurm or the login host (a possibly transient
#: outage: slurmctld restarting, sshd dropped) after retrying for its grace period (EX_TEMPFAIL).
EXIT_UNREACHABLE = 75


class Unreachable(SporchError):
    """Slurm's controller, its database or the login host did not answer: not bad input, and
    possibly transient (``sporch wait``/``status`` retry it for a grace period)."""

    exit_code = EXIT_UNREACHABLE
