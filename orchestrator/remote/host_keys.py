"""Host keys of login and jump hosts (paramiko, imported lazily): reading OpenSSH known_hosts
files (:func:`load_known_hosts`), the policy for a host whose key is not known
(:func:`missing_key_policy`: ``reject`` raises :class:`UnknownHostKey`, ``accept-new`` records the
key like OpenSSH's ``StrictHostKeyChecking=accept-new``) and whether a file holds an entry.

Host keys come from ``~/.ssh/known_hosts`` and, when set, ``login.known_hosts`` (OpenSSH's
``[host]:port`` entries for ports other than 22); ``accept-new`` appends an unknown host's key
to ``login.known_hosts`` (else ``~/.ssh/known_hosts``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sporch.orchestrator.safe_files import NotAFileError, UnsafeFileError, open_append, read_regular
from sporch.orchestrator.errors import SporchError

#: The largest known_hosts file read.
MAX_KNOWN_HOSTS_BYTES = 16 << 20


class UnknownHostKey(Exception):
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


def missing_key_policy(host: Any):
    """The missing-key policy of ``host`` (an SshHost: its ``host_key_policy`` and ``known_hosts``)."""
    import paramiko

    class Reject(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            raise UnknownHostKey(hostname, key.get_name())

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


def has_entry(path: str, entry: str) -> bool:
    """Whether the known_hosts file ``path`` has a line for ``entry`` (hashed lines included)."""
    import paramiko

    client = paramiko.SSHClient()
    try:
        load_known_hosts(client, path, "known_hosts")
    except SporchError:
        return False
    return bool(client.get_host_keys().lookup(entry))
