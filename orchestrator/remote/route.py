"""The route to a login host: jump hosts (``login.proxy_jump``) and the user's ssh config.

Pure and local (no network, paramiko imported lazily): :func:`resolve_route` turns a login
section into the endpoints to connect to, in order -- each jump host, then the login host --
with every ``[user@]host[:port]`` looked up in the OpenSSH client config the way ``ssh`` does:

- ``HostName``, ``User``, ``Port``, ``IdentityFile`` of a matching ``Host`` block fill in what
  the descriptor (or the hop string) does not give; explicit values win.
- ``ProxyJump`` of the login host's block applies when ``login.proxy_jump`` is not set
  (``none`` turns it off); the first jump host's own ``ProxyJump`` is followed too, as
  ``ssh -J`` does.
- The config file: ``login.ssh_config``, else ``$SPORCH_SSH_CONFIG``, else ``~/.ssh/config``
  (a missing default file is no config; ``none`` reads none, like ``ssh -F none``).

Hop strings are OpenSSH's ``-J`` syntax: ``[user@]host[:port]`` (``ssh://`` URIs and
``[v6addr]:port`` too); a chain is a list of them or one comma-separated string.
"""

from __future__ import annotations

import getpass
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

from sporch.orchestrator.safe_files import NotAFileError, read_regular
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract import settings

#: The environment variable naming the ssh client config (``login.ssh_config`` wins).
SSH_CONFIG_ENV = settings.SSH_CONFIG.name
#: The most hops one route may have (a ProxyJump loop in ssh config ends here).
MAX_HOPS = 16

_HOST = r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.\-]+)?\])"
_HOP = re.compile(rf"(?:ssh://)?(?:(?P<user>[^@\s,:/\[\]]+)@)?(?P<host>{_HOST})(?::(?P<port>[0-9]{{1,5}}))?")

JumpValue = Union[None, str, Sequence[str]]


@dataclass(frozen=True)
class Hop:
    """One parsed ``[user@]host[:port]``; None where the string does not say."""

    host: str
    user: Optional[str] = None
    port: Optional[int] = None


@dataclass(frozen=True)
class Endpoint:
    """One ssh server on the route, with the ssh config applied."""

    name: str  # as written: an ssh config alias, or the host itself
    hostname: str
    port: int
    user: str
    identity_files: Tuple[str, ...] = ()

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``)."""
        h = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{h}:{self.port}"

    @property
    def label(self) -> str:
        """``host:port``, with the alias when the ssh config renamed it: ``bastion (10.0.0.1:22)``."""
        return self.address if self.name == self.hostname else f"{self.name} ({self.address})"

    @property
    def spec(self) -> str:
        """This endpoint as an ``ssh -J`` hop: ``user@host:port``."""
        return f"{self.user}@{self.address}"


@dataclass(frozen=True)
class Route:
    hops: Tuple[Endpoint, ...]
    target: Endpoint


# -- hop strings ---------------------------------------------------------------------------------
def parse_hop(text: str) -> Hop:
    """``[user@]host[:port]`` -> Hop; ValueError naming what is wrong."""
    s = str(text).strip()
    m = _HOP.fullmatch(s)
    if not m:
        raise ValueError(f"{s!r} is not a jump host ([user@]host[:port], for example me@bastion.example.org:2222)")
    port = int(m["port"]) if m["port"] else None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{s!r}: port {port} is not in 1..65535")
    host = m["host"][1:-1] if m["host"].startswith("[") else m["host"]
    return Hop(host, m["user"], port)


def normalize_jump(value: JumpValue) -> Optional[List[str]]:
    """``login.proxy_jump`` as given -> a checked list of hop strings.

    None, ``""`` and ``[]``: not set (ssh config's ProxyJump applies). ``"none"``: no jump host,
    whatever ssh config says (kept as ``["none"]``). A string is split at commas, as ``ssh -J``
    does. ValueError for a malformed hop.
    """
    if value is None:
        return None
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",")] if value.strip() else []
    elif isinstance(value, (list, tuple)):
        items = [str(p).strip() if isinstance(p, str) else p for p in value]
    else:
        raise ValueError(f"must be a list of [user@]host[:port] or one comma-separated string, "
                         f"got {type(value).__name__}")
    if not items:
        return None
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ValueError(f"hop {i + 1} must be a string [user@]host[:port], got {type(item).__name__}")
    if any(p.lower() == "none" for p in items):
        if len(items) > 1:
            raise ValueError("'none' (no jump host) cannot be combined with jump hosts")
        return ["none"]
    for item in items:
        parse_hop(item)
    return items


# -- ssh config ------------------------------------------------------------------------------------
def config_path(given: Optional[str] = None) -> Tuple[Optional[Path], bool]:
    """(the ssh config file to read or None, whether it was named explicitly)."""
    raw = given or settings.raw(settings.SSH_CONFIG) or ""
    if raw.strip().lower() == "none":
        return None, True
    if raw:
        return Path(raw).expanduser(), True
    return Path("~/.ssh/config").expanduser(), False


def load_ssh_config(given: Optional[str] = None) -> Any:
    """The ``paramiko.SSHConfig`` to resolve with (empty when there is none)."""
    import paramiko

    path, explicit = config_path(given)
    if path is None or (not explicit and not path.is_file()):
        return paramiko.SSHConfig()
    how = "login.ssh_config" if given else f"${SSH_CONFIG_ENV}"
    try:
        text = read_regular(path).decode("utf-8", errors="replace")  # never a FIFO: it would block
    except (FileNotFoundError, NotADirectoryError):
        raise SporchError(f"ssh config {path} (from {how}) not found; fix the path or set it to none") from None
    except NotAFileError as e:
        raise SporchError(f"ssh config {e} (from {how}); fix the path or set it to none") from None
    except OSError as e:
        raise SporchError(f"cannot read ssh config {path}: {e.strerror or e}") from None
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as e:  # noqa: BLE001 - paramiko raises several kinds for a bad file
        text = " ".join(str(e).split()) or type(e).__name__
        raise SporchError(f"cannot read ssh config {path}: {text}; fix it, or set login.ssh_config "
                          f"(or ${SSH_CONFIG_ENV}) to another file or to none") from None


def _lookup(config: Any, name: str) -> dict:
    try:
        return config.lookup(name)
    except Exception as e:  # noqa: BLE001 - e.g. a Match exec without invoke installed
        text = " ".join(str(e).split()) or type(e).__name__
        raise SporchError(f"ssh config: cannot look up host {name!r}: {text}; set login.ssh_config "
                          f"(or ${SSH_CONFIG_ENV}) to another file or to none") from None


def _endpoint(config: Any, name: str, user: Optional[str], port: Optional[int],
              identity: Sequence[str]) -> Tuple[Endpoint, dict]:
    """One endpoint: explicit user/port/identity first, then the config's, then the defaults."""
    c = _lookup(config, name)
    try:
        port = port or int(c.get("port") or 22)
    except ValueError:
        raise SporchError(f"ssh config: Port {c.get('port')!r} of host {name!r} is not a number") from None
    files = list(identity) or [str(Path(p).expanduser()) for p in c.get("identityfile") or []]
    ep = Endpoint(name, c.get("hostname") or name, port, user or c.get("user") or getpass.getuser(), tuple(files))
    return ep, c


def _chain(value: JumpValue) -> Optional[List[str]]:
    try:
        return normalize_jump(value)
    except ValueError as e:
        raise SporchError(f"ssh config ProxyJump: {e}") from None


def resolve_route(host: str, port: Optional[int] = None, user: Optional[str] = None,
                  identity_file: Optional[str] = None, proxy_jump: JumpValue = None,
                  config: Any = None) -> Route:
    """The endpoints from here to ``host``: jump hosts in order, then the login host.

    A jump host without an IdentityFile of its own (ssh config) uses ``identity_file``.
    """
    if config is None:
        import paramiko

        config = paramiko.SSHConfig()
    own = [str(Path(identity_file).expanduser())] if identity_file else []
    target, tc = _endpoint(config, host, user, port, own)
    try:
        chain = normalize_jump(proxy_jump)
    except ValueError as e:
        raise SporchError(f"login.proxy_jump: {e}") from None
    if chain is None:
        chain = _chain(tc.get("proxyjump"))
    hops = _hops(config, chain or [], own)
    return Route(tuple(hops), target)


def _hops(config: Any, chain: List[str], own: List[str]) -> List[Endpoint]:
    """Each hop string -> an Endpoint; the first hop's own ProxyJump (ssh config) goes in front."""
    hops: List[Endpoint] = []
    todo = [] if chain == ["none"] else list(chain)
    first = True
    while todo:
        if len(hops) + len(todo) > MAX_HOPS:
            raise SporchError(f"more than {MAX_HOPS} jump hosts (a ProxyJump loop in ssh config?)")
        hop = parse_hop(todo[0])
        ep, c = _endpoint(config, hop.host, hop.user, hop.port, ())
        if not ep.identity_files:
            ep = Endpoint(ep.name, ep.hostname, ep.port, ep.user, tuple(own))
        before = _chain(c.get("proxyjump")) if first else None
        if before and before != ["none"]:
            todo = before + todo  # reached through its own jump hosts: resolve those first
            continue
        hops.append(ep)
        todo.pop(0)
        first = False
    return hops
