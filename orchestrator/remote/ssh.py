"""One SSH connection to a cluster's login host (paramiko, imported lazily): the remote
:class:`sporch.orchestrator.host.Host`.

``SshHost`` connects (this module), runs commands (:mod:`.commands`: ``run``, ``login.setup``
lines first, in the same remote shell), moves small files over SFTP (:mod:`.sftp_files`:
``write_text``, ``read_text``, ``makedirs``, ``remove_tree``, ``exists``...) and turns every
connection problem into a one-line :class:`~sporch.orchestrator.errors.SporchError`:

- unreachable host / refused port / DNS failure -> ``cannot reach root@h:22: ...``
- authentication failure -> ``ssh authentication as root@h:22 failed ...``
- unknown host key (``host_key_policy: reject``, the default) -> ``host key of h:22 is not
  known ...`` with the fix (``ssh`` once, or ``login.known_hosts`` / ``host_key_policy:
  accept-new``)
- a changed host key -> refused, always.

Jump hosts (``login.proxy_jump``, or ``ProxyJump`` in the user's ssh config): each hop is an
``SSHClient`` connected over the previous hop's ``direct-tcpip`` channel, ending at the login
host; every hop's host key is checked like the login host's (:mod:`.host_keys`), and every error
names the hop (``jump host 10.0.0.1:22``). The route (ssh config's HostName, User, Port,
IdentityFile, ProxyJump) comes from :mod:`sporch.orchestrator.remote.route`.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from sporch.orchestrator.errors import SporchError, Unreachable
from sporch.orchestrator.contract.vocab import HOST_KEY_POLICIES
from sporch.orchestrator.remote.commands import RemoteCommands
from sporch.orchestrator.remote.error_text import one_line
from sporch.orchestrator.remote.host_keys import UnknownHostKey, has_entry, load_known_hosts, missing_key_policy
from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.remote.route import Endpoint, JumpValue, load_ssh_config, normalize_jump, resolve_route
from sporch.orchestrator.remote.sftp_files import SftpFiles

CONNECT_TIMEOUT = 15.0
# paramiko logs a refused channel ("Secsh channel 0 open FAILED") at ERROR; with no logging set
# up, Python would print it to stderr next to sporch's own one-line error.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SshHost(RemoteCommands, SftpFiles):
    """A connected login host (through its jump hosts). Use as a context manager, or call
    :meth:`close`.

    ``host``, ``proxy_jump``, ``ssh_config``, ``identity_file`` stay as given (a record keeps
    them, and a reconnect resolves them again); ``hostname``, ``port``, ``user`` and ``hops``
    are the resolved route (ssh config applied).
    """

    remote = True

    def __init__(self, host: str, port: Optional[int] = None, user: Optional[str] = None,
                 identity_file: Optional[str] = None, known_hosts: Optional[str] = None,
                 host_key_policy: str = "reject", setup: Sequence[str] = (), workdir: Optional[str] = None,
                 proxy_jump: JumpValue = None, ssh_config: Optional[str] = None,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        if host_key_policy not in HOST_KEY_POLICIES:
            raise SporchError(f"login.host_key_policy must be one of {', '.join(HOST_KEY_POLICIES)}, "
                              f"got {host_key_policy!r}")
        try:
            self.proxy_jump = normalize_jump(proxy_jump)
        except ValueError as e:
            raise SporchError(f"login.proxy_jump: {e}") from None
        self.host = host
        self.identity_file = str(Path(identity_file).expanduser()) if identity_file else None
        self.ssh_config = ssh_config
        route = resolve_route(host, int(port) if port else None, user, self.identity_file, self.proxy_jump,
                              load_ssh_config(ssh_config))
        self.hops: Tuple[Endpoint, ...] = route.hops
        self.target: Endpoint = route.target
        self.hostname = route.target.hostname
        self.port = route.target.port
        self.user = route.target.user
        self.known_hosts = str(Path(known_hosts).expanduser()) if known_hosts else None
        self.host_key_policy = host_key_policy
        self.setup = list(setup or [])
        self.workdir = workdir
        self.connect_timeout = connect_timeout
        self._client = None
        self._hop_clients: List[Any] = []
        self._sftp = None
        self._home: Optional[str] = None

    @classmethod
    def from_login(cls, login: Any, **kw: Any) -> "SshHost":
        d = login_dict(login)
        return cls(d["host"], d["port"], d["user"], d["identity_file"], d["known_hosts"], d["host_key_policy"],
                   d["setup"], d["workdir"], d["proxy_jump"], d["ssh_config"], **kw)

    @property
    def where(self) -> str:
        """``user@host:port`` of the login host as connected to (ssh config's HostName applied)."""
        return f"{self.user}@{self.target.address}"

    @property
    def via(self) -> str:
        """`` via jump host a:22, b:22`` ("" without jump hosts), for messages."""
        if not self.hops:
            return ""
        return f" via jump host{'s' if len(self.hops) > 1 else ''} {', '.join(h.label for h in self.hops)}"

    def key(self) -> Tuple[str, int, str]:
        return (self.hostname, self.port, self.user)

    # -- connection ---------------------------------------------------------------------------
    def connect(self) -> "SshHost":
        """Connect each jump host in turn, then the login host over the last hop's tunnel."""
        if self._client is not None:
            return self
        if self.identity_file and not Path(self.identity_file).is_file():
            raise SporchError(f"login.identity_file {self.identity_file} not found (cluster login {self.where})")
        clients: List[Any] = []
        try:
            for i, ep in enumerate([*self.hops, self.target]):
                sock = self._tunnel(clients[-1], self.hops[i - 1], ep) if i else None
                clients.append(self._connect_one(ep, sock, i))
        except BaseException:
            for c in reversed(clients):
                c.close()
            raise
        self._hop_clients = clients[:-1]
        self._client = clients[-1]
        return self

    def _role(self, i: int) -> str:
        """How messages name endpoint ``i`` of the route: ``jump host a:22`` or the login host."""
        return f"jump host {self.hops[i].label}" if i < len(self.hops) else self.target.label

    def _ssh_hint(self, i: int) -> str:
        """The ``ssh`` command that reaches endpoint ``i`` the same way (to check its key once)."""
        ep = ([*self.hops, self.target])[i]
        jump = f"-J {','.join(h.spec for h in self.hops[:i])} " if i else ""
        return f"ssh {jump}-p {ep.port} {ep.user}@{ep.hostname}"

    def _tunnel(self, client: Any, hop: Endpoint, ep: Endpoint) -> Any:
        """A ``direct-tcpip`` channel from ``hop`` to ``ep`` (the next connection's socket)."""
        import paramiko

        dest = f"{ep.user}@{ep.address}"
        try:
            return client.get_transport().open_channel("direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0),
                                                       timeout=self.connect_timeout)
        except paramiko.ChannelException as e:
            text = one_line(e.text or e)
            if e.code == 1:  # administratively prohibited
                raise SporchError(f"jump host {hop.label} refuses to forward to {ep.address} ({text}); its sshd "
                                  "needs AllowTcpForwarding yes (and a PermitOpen that allows it)") from None
            raise Unreachable(f"cannot reach {dest} through jump host {hop.label}: {text} (the jump host cannot "
                              f"connect to {ep.address})") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise Unreachable(f"cannot reach {dest} through jump host {hop.label}: {one_line(e)}") from None

    def _new_client(self) -> Any:
        """An SSHClient with the known host keys loaded and this host's policy."""
        import paramiko

        client = paramiko.SSHClient()
        system = Path("~/.ssh/known_hosts").expanduser()
        if os.path.lexists(system):
            load_known_hosts(client, str(system), "~/.ssh/known_hosts")
        if self.known_hosts and os.path.lexists(self.known_hosts):
            load_known_hosts(client, self.known_hosts, "login.known_hosts")
        client.set_missing_host_key_policy(missing_key_policy(self))
        return client

    def _connect_one(self, ep: Endpoint, sock: Any, i: int) -> Any:
        """One connected SSHClient for endpoint ``i`` (over ``sock``, a tunnel, when given)."""
        keys = [k for k in ep.identity_files if Path(k).is_file()]
        client = self._new_client()
        try:
            client.connect(ep.hostname, port=ep.port, username=ep.user, key_filename=keys or None,
                           look_for_keys=not keys, allow_agent=not keys, sock=sock,
                           timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                           auth_timeout=self.connect_timeout)
        except BaseException as e:
            client.close()
            if sock is not None:
                sock.close()
            if isinstance(e, Exception):
                raise self._connect_error(e, ep, i, keys) from None
            raise
        return client

    def _connect_error(self, e: Exception, ep: Endpoint, i: int, keys: List[str]) -> Exception:
        """A failed connection to endpoint ``i`` -> one line that names it and says what to do."""
        import paramiko

        jump = i < len(self.hops)
        role = self._role(i)
        who = f"{ep.user}@{ep.address}" + (" (jump host)" if jump else self.via)
        if isinstance(e, SporchError):
            return e
        if isinstance(e, UnknownHostKey):
            where = self.known_hosts or "~/.ssh/known_hosts"
            return SporchError(
                f"host key of {role} ({e.key_type}) is not known in {where}; run `{self._ssh_hint(i)}` once to "
                "check and accept it, or set login.known_hosts / login.host_key_policy: accept-new in the "
                "cluster descriptor")
        if isinstance(e, paramiko.BadHostKeyException):
            return SporchError(
                f"host key of {role} does NOT match known_hosts (a changed host or a man-in-the-middle); fix "
                f"known_hosts after checking with the cluster's admins ({self._forget_hint(ep)})")
        if isinstance(e, paramiko.AuthenticationException):
            how = f"key {', '.join(keys)}" if keys else "ssh agent / default keys"
            return SporchError(f"ssh authentication as {who} failed ({how}): {one_line(e)}")
        target = f"jump host {ep.user}@{ep.address}" if jump else f"{ep.user}@{ep.address}{self.via}"
        if isinstance(e, socket.gaierror):
            return Unreachable(f"cannot reach {target}: cannot resolve host {ep.hostname!r} ({e.strerror})")
        if isinstance(e, (socket.timeout, TimeoutError)):
            return Unreachable(f"cannot reach {target}: no answer within {self.connect_timeout:g} s")
        if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
            reasons = sorted({one_line(getattr(err, "strerror", None) or err) for err in e.errors.values()})
            return Unreachable(f"cannot reach {target}: {'; '.join(reasons) or 'connection failed'}")
        if isinstance(e, (paramiko.SSHException, OSError, EOFError)):
            return Unreachable(f"cannot reach {target}: {one_line(getattr(e, 'strerror', None) or e)}")
        return e

    def _forget_hint(self, ep: Endpoint) -> str:
        """``ssh-keygen -R ...``: the command that removes the recorded key of ``ep``."""
        entry = ep.hostname if ep.port == 22 else f"[{ep.hostname}]:{ep.port}"
        in_own = self.known_hosts and has_entry(self.known_hosts, entry)
        return f"ssh-keygen -R '{entry}'" + (f" -f {self.known_hosts}" if in_own else "")

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        for c in reversed(self._hop_clients):
            c.close()
        self._hop_clients = []

    def _lost(self, e: BaseException) -> None:
        """After a failed SFTP call: raise Unreachable when the connection itself is gone (a
        dropped sshd must not read as a missing file), else return."""
        if not self.is_active():
            self.close()
            raise Unreachable(f"lost the connection to login host {self.where}: {one_line(e) or type(e).__name__}")

    def is_active(self) -> bool:
        if self._client is None:
            return False
        t = self._client.get_transport()
        return t is not None and t.is_active()

    def __enter__(self) -> "SshHost":
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()
