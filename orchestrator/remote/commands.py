"""Commands on a login host: :class:`RemoteCommands`, the part of
:class:`~sporch.orchestrator.remote.ssh.SshHost` that runs a command in the login shell (after
``login.setup``, in the same remote shell) over its connection, and :func:`quote_command`.

The class is a mixin: it uses the host's ``connect``, ``close``, ``where``, ``setup``,
``connect_timeout`` and its paramiko client.
"""

from __future__ import annotations

import select
import shlex
import time
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from sporch.orchestrator.errors import Unreachable
from sporch.orchestrator.remote.error_text import one_line


def quote_command(cmd: Union[str, Sequence[str]]) -> str:
    return cmd if isinstance(cmd, str) else " ".join(shlex.quote(str(c)) for c in cmd)


class RemoteCommands:
    """Running commands on the connected login host (a mixin of SshHost)."""

    def command(self, cmd: Union[str, Sequence[str]], env: Optional[Mapping[str, str]] = None,
                cwd: Optional[str] = None) -> str:
        """The remote shell text: ``login.setup`` lines, then ``[cd CWD &&] [K=V ...] CMD``."""
        tail = quote_command(cmd)
        if env:
            tail = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()) + " " + tail
        if cwd:
            tail = f"cd {shlex.quote(cwd)} && {tail}"
        return "\n".join([*self.setup, tail])

    def run(self, cmd: Union[str, Sequence[str]], *, timeout: float = 30.0, input: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None) -> Tuple[int, str, str]:
        """Run a command in the login shell's ``sh -c`` after ``login.setup`` (argv lists are
        shlex-quoted).

        Returns (exit status, stdout, stderr). Raises TimeoutError after ``timeout`` seconds,
        SporchError when the connection is gone.
        """
        self.connect()
        command = self.command(cmd, env, cwd)
        try:
            chan = self._client.get_transport().open_session(timeout=self.connect_timeout)
            chan.exec_command(command)
            if input is not None:
                chan.sendall(input.encode())
            chan.shutdown_write()
        except Exception as e:  # noqa: BLE001 - paramiko raises several kinds
            self.close()  # the next call connects again
            raise Unreachable(f"lost the connection to login host {self.where}: cannot run a command: {one_line(e)}"
                              ) from None
        out: List[bytes] = []
        err: List[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                got = False
                while chan.recv_ready():
                    out.append(chan.recv(65536))
                    got = True
                while chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(65536))
                    got = True
                if chan.exit_status_ready() and chan.eof_received and not chan.recv_ready() \
                        and not chan.recv_stderr_ready():
                    break
                if chan.closed and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{command[:60]} did not end within {timeout:g} s on {self.where}")
                if not got:
                    select.select([chan], [], [], 0.05)
            rc = chan.recv_exit_status()
        finally:
            chan.close()
        return rc, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
