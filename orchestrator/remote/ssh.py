"""One SSH connection to a cluster's login host (paramiko, imported lazily): the remote
:class:`sporch.orchestrator.host.Host`.

``SshHost`` runs commands (``run``: ``login.setup`` lines first, in the same remote shell),
moves small files over SFTP (``write_text``, ``read_text``, ``makedirs``, ``remove_tree``,
``exists``...) and turns every connection problem into a one-line
:class:`~sporch.orchestrator.errors.SporchError`:

- unreachable host / refused port / DNS failure -> ``cannot reach root@h:22: ...``
- authentication failure -> ``ssh authentication as root@h:22 failed ...``
- unknown host key (``host_key_policy: reject``, the default) -> ``host key of h:22 is not
  known ...`` with the fix (``ssh`` once, or ``login.known_hosts`` / ``host_key_policy:
  accept-new``)
- a changed host key -> refused, always.

Jump hosts (``login.proxy_jump``, or ``ProxyJump`` in the user's ssh config): each hop is an
``SSHClient`` connected over the previous hop's ``direct-tcpip`` channel, ending at the login
host; every hop's host key is checked like the login host's, and every error names the hop
(``jump host 10.0.0.1:22``). The route (ssh config's HostName, User, Port, IdentityFile,
ProxyJump) comes from :mod:`sporch.orchestrator.remote.route`.

Host keys come from ``~/.ssh/known_hosts`` and, when set, ``login.known_hosts`` (OpenSSH's
``[host]:port`` entries for ports other than 22); ``accept-new`` appends an unknown host's key
to ``login.known_hosts`` (else ``~/.ssh/known_hosts``), like OpenSSH's
``StrictHostKeyChecking=accept-new``.
"""

from __future__ import annotations

import atexit
import logging
import os
import posixpath
import select
import shlex
import socket
import stat as _stat
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from sporch.orchestrator.safe_files import NotAFileError, UnsafeFileError, open_append, read_regular
from sporch.orchestrator.errors import SporchError, Unreachable
from sporch.orchestrator.contract.vocab import HOST_KEY_POLICIES
from sporch.orchestrator.remote.route import Endpoint, JumpValue, load_ssh_config, normalize_jump, resolve_route

CONNECT_TIMEOUT = 15.0
# paramiko logs a refused channel ("Secsh channel 0 open FAILED") at ERROR; with no logging set
# up, Python would print it to stderr next to sporch's own one-line error.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
#: LoginSpec fields a job record keeps so that later commands reconnect.
#: The largest known_hosts file read.
MAX_KNOWN_HOSTS_BYTES = 16 << 20
LOGIN_KEYS = ("host", "port", "user", "identity_file", "known_hosts", "host_key_policy", "setup", "workdir",
              "proxy_jump", "ssh_config")


def login_dict(login: Any) -> Dict[str, Any]:
    """A LoginSpec, an SshHost or a dict -> a plain dict of the connection fields (``port``
    None: ssh config's Port, else 22)."""
    if isinstance(login, Mapping):
        d = dict(login)
    else:
        d = {k: getattr(login, k, None) for k in LOGIN_KEYS}
    d["setup"] = list(d.get("setup") or [])
    d["port"] = int(d["port"]) if d.get("port") else None
    d["host_key_policy"] = d.get("host_key_policy") or "reject"
    d["proxy_jump"] = list(d["proxy_jump"]) if isinstance(d.get("proxy_jump"), (list, tuple)) else d.get("proxy_jump")
    return {k: d.get(k) for k in LOGIN_KEYS}


def quote_command(cmd: Union[str, Sequence[str]]) -> str:
    return cmd if isinstance(cmd, str) else " ".join(shlex.quote(str(c)) for c in cmd)


#: What a failed SFTP call raises: OSError (socket errors included), EOFError, paramiko's SSHException
#: (any Exception: paramiko is imported lazily; sporch's own errors pass through first).
_FAILURES = (OSError, EOFError, Exception)


class SshHost:
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
            text = _one(e.text or e)
            if e.code == 1:  # administratively prohibited
                raise SporchError(f"jump host {hop.label} refuses to forward to {ep.address} ({text}); its sshd "
                                  "needs AllowTcpForwarding yes (and a PermitOpen that allows it)") from None
            raise Unreachable(f"cannot reach {dest} through jump host {hop.label}: {text} (the jump host cannot "
                              f"connect to {ep.address})") from None
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise Unreachable(f"cannot reach {dest} through jump host {hop.label}: {_one(e)}") from None

    def _new_client(self) -> Any:
        """An SSHClient with the known host keys loaded and this host's policy."""
        import paramiko

        client = paramiko.SSHClient()
        system = Path("~/.ssh/known_hosts").expanduser()
        if os.path.lexists(system):
            load_known_hosts(client, str(system), "~/.ssh/known_hosts")
        if self.known_hosts and os.path.lexists(self.known_hosts):
            load_known_hosts(client, self.known_hosts, "login.known_hosts")
        client.set_missing_host_key_policy(_policy(self))
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
        if isinstance(e, _UnknownHostKey):
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
            return SporchError(f"ssh authentication as {who} failed ({how}): {_one(e)}")
        target = f"jump host {ep.user}@{ep.address}" if jump else f"{ep.user}@{ep.address}{self.via}"
        if isinstance(e, socket.gaierror):
            return Unreachable(f"cannot reach {target}: cannot resolve host {ep.hostname!r} ({e.strerror})")
        if isinstance(e, (socket.timeout, TimeoutError)):
            return Unreachable(f"cannot reach {target}: no answer within {self.connect_timeout:g} s")
        if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
            reasons = sorted({_one(getattr(err, "strerror", None) or err) for err in e.errors.values()})
            return Unreachable(f"cannot reach {target}: {'; '.join(reasons) or 'connection failed'}")
        if isinstance(e, (paramiko.SSHException, OSError, EOFError)):
            return Unreachable(f"cannot reach {target}: {_one(getattr(e, 'strerror', None) or e)}")
        return e

    def _forget_hint(self, ep: Endpoint) -> str:
        """``ssh-keygen -R ...``: the command that removes the recorded key of ``ep``."""
        entry = ep.hostname if ep.port == 22 else f"[{ep.hostname}]:{ep.port}"
        in_own = self.known_hosts and _has_entry(self.known_hosts, entry)
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
            raise Unreachable(f"lost the connection to login host {self.where}: {_one(e) or type(e).__name__}")

    def is_active(self) -> bool:
        if self._client is None:
            return False
        t = self._client.get_transport()
        return t is not None and t.is_active()

    def __enter__(self) -> "SshHost":
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- commands -----------------------------------------------------------------------------
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
            raise Unreachable(f"lost the connection to login host {self.where}: cannot run a command: {_one(e)}"
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

    # -- files (SFTP) -------------------------------------------------------------------------
    @property
    def sftp(self):
        self.connect()
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except Exception as e:  # noqa: BLE001
                raise SporchError(f"ssh to {self.where}: SFTP is not available: {_one(e)}") from None
        return self._sftp

    def home(self) -> str:
        if self._home is None:
            self._home = self.sftp.normalize(".")
        return self._home

    def abspath(self, path: str) -> str:
        """``~``, ``~/x`` and relative paths -> absolute paths on the login host."""
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return posixpath.join(self.home(), path[2:])
        if not path.startswith("/"):
            return posixpath.join(self.home(), path)
        return posixpath.normpath(path)

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except SporchError:
            raise
        except _FAILURES as e:  # FileNotFoundError included
            self._lost(e)
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return _stat.S_ISDIR(self.sftp.stat(path).st_mode or 0)
        except OSError:
            return False

    def mkdir(self, path: str) -> None:
        """Create one folder; FileExistsError when it exists."""
        if self.exists(path):
            raise FileExistsError(path)
        try:
            self.sftp.mkdir(path)
        except OSError as e:
            if self.exists(path):
                raise FileExistsError(path) from None
            raise SporchError(f"cannot create {path} on {self.where}: {_one(e)}") from None

    def makedirs(self, path: str) -> Optional[str]:
        """``mkdir -p``; returns the topmost folder created (None when it existed)."""
        path = posixpath.normpath(path)
        missing = []
        p = path
        while p not in ("/", "") and not self.exists(p):
            missing.append(p)
            p = posixpath.dirname(p)
        for m in reversed(missing):
            try:
                self.sftp.mkdir(m)
            except OSError as e:
                if not self.is_dir(m):
                    raise SporchError(f"cannot create {m} on {self.where}: {_one(e)}") from None
        return missing[-1] if missing else None

    def write_text(self, path: str, text: str) -> None:
        try:
            with self.sftp.open(path, "w") as fh:
                fh.write(text.encode("utf-8"))
        except OSError as e:
            raise SporchError(f"cannot write {path} on {self.where}: {_one(e)}") from None

    def read_text(self, path: str) -> Optional[str]:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, path: str, offset: int = 0) -> Optional[bytes]:
        try:
            with self.sftp.open(path, "rb") as fh:
                if offset:
                    fh.seek(offset)
                return fh.read()
        except FileNotFoundError:
            return None
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            raise SporchError(f"cannot read {path} on {self.where}: {_one(e)}") from None

    def size(self, path: str) -> Optional[int]:
        try:
            return self.sftp.stat(path).st_size
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            return None

    def listdir(self, path: str) -> List[str]:
        try:
            return self.sftp.listdir(path)
        except SporchError:
            raise
        except _FAILURES as e:
            self._lost(e)
            return []

    def remove_tree(self, path: str) -> None:
        """``rm -rf`` on the login host (refuses ``/`` and the home folder)."""
        path = posixpath.normpath(path)
        if path in ("/", "", ".") or path == self.home():
            raise SporchError(f"refusing to remove {path!r} on {self.where}")
        rc, _, err = self.run(["rm", "-rf", "--", path], timeout=60)
        if rc != 0:
            raise SporchError(f"cannot remove {path} on {self.where}: {_one(err)}")

    def rmdir(self, path: str) -> bool:
        try:
            self.sftp.rmdir(path)
            return True
        except OSError:
            return False


# -- host key policies ---------------------------------------------------------------------------
class _UnknownHostKey(Exception):
    def __init__(self, hostname: str, key_type: str) -> None:
        super().__init__(hostname)
        self.key_type = key_type


def load_known_hosts(client: Any, path: str, label: str) -> None:
    """Add the host keys of the OpenSSH known_hosts file ``path`` to ``client``'s. Only a regular
    file is read (a FIFO would block); a file that is not a known_hosts file (a line that does
    not parse, or no entry at all) is a one-line SporchError naming the file and the line
    number, never echoing what the file holds (it may be /etc/passwd or a secret)."""
    from paramiko.hostkeys import HostKeyEntry

    def bad(why: str) -> SporchError:
        return SporchError(f"{label} {path} {why}; name an OpenSSH known_hosts file (lines 'HOST KEYTYPE "
                           "BASE64-KEY', as `ssh-keyscan HOST` prints)")

    try:
        raw = read_regular(path, MAX_KNOWN_HOSTS_BYTES + 1)
    except NotAFileError:
        raise bad("is not a regular file") from None
    except OSError as e:
        raise SporchError(f"cannot read {label} {path}: {e.strerror or e}") from None
    if len(raw) > MAX_KNOWN_HOSTS_BYTES:
        raise bad(f"is larger than {MAX_KNOWN_HOSTS_BYTES // (1 << 20)} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("is not text") from None
    keys = client.get_host_keys()
    lines = entries = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lines += 1
        try:
            entry = HostKeyEntry.from_line(line, lineno)
        except Exception:  # noqa: BLE001 - paramiko's InvalidHostKey is no SSHException; its text holds the line
            raise bad(f"line {lineno} is not a known_hosts entry") from None
        if entry is None:  # a key type paramiko does not know, a marker line: skipped, as ssh does
            continue
        entries += 1
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    if lines and not entries:
        raise bad("holds no known_hosts entry")


def _policy(host: SshHost):
    import paramiko

    class Reject(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            raise _UnknownHostKey(hostname, key.get_name())

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            client.get_host_keys().add(hostname, key.get_name(), key)
            path = Path(host.known_hosts or "~/.ssh/known_hosts").expanduser()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open_append(path) as fh:  # never through a link, never into a FIFO or device
                    fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n".encode("utf-8"))
            except UnsafeFileError as e:
                raise SporchError(f"cannot record the host key of {hostname}: {e}") from None
            except OSError as e:
                raise SporchError(f"cannot record the host key of {hostname} in {path}: {e.strerror}") from None

    return AcceptNew() if host.host_key_policy == "accept-new" else Reject()


def _has_entry(path: str, entry: str) -> bool:
    """Whether the known_hosts file ``path`` has a line for ``entry`` (hashed lines included)."""
    import paramiko

    client = paramiko.SSHClient()
    try:
        load_known_hosts(client, path, "known_hosts")
    except SporchError:
        return False
    return bool(client.get_host_keys().lookup(entry))


def _one(e: Any) -> str:
    s = " ".join(str(e).split())
    return s or type(e).__name__


# -- a connection per login host, reused within one process (status polls, logs -f) ---------------
_POOL: Dict[Tuple[Any, ...], SshHost] = {}


def connect(login: Any) -> SshHost:
    """A connected SshHost for ``login`` (LoginSpec or dict), reused while it stays alive."""
    d = login_dict(login)
    key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(d.items()))
    h = _POOL.get(key)
    if h is not None and h.is_active():
        return h
    if h is not None:
        h.close()
    h = SshHost.from_login(d).connect()
    if not _POOL:
        atexit.register(close_all)
    _POOL[key] = h
    return h


def close_all() -> None:
    for h in list(_POOL.values()):
        h.close()
    _POOL.clear()
