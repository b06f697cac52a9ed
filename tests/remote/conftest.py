"""A real OpenSSH server on loopback for the remote-submission tests.

``sshd`` (session): ``/usr/sbin/sshd -D -e -f <tmp>/sshd_config`` on 127.0.0.1 and a free port,
with a temporary host key and a temporary client key in its ``AuthorizedKeysFile``; stopped at
teardown. ``target_sshd`` (session): a second one on 127.0.0.2 with a host key of its own and
the same client key (a login host behind the jump host ``sshd``). :func:`running_sshd` starts
one more (a test's own configuration). Every test runs with ``SPORCH_SSH_CONFIG=none`` (no
~/.ssh/config of the developer's) unless it names its own. Skips with the reason when sshd is
not installed -- or fails when ``SPORCH_REQUIRE_SSH=1`` (scripts/test.sh installs
openssh-server as root).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    host: str
    port: int
    user: str
    key: str  # client private key (authorized)
    other_key: str  # a client key sshd does not accept
    host_pub: str  # "ssh-ed25519 AAAA..." of the server
    folder: Path
    pid: int = 0  # the listening sshd
    log: Path | None = None  # its stdout/stderr

    def login(self, known_hosts: str, policy: str = "accept-new", **extra) -> dict:
        d = {"host": self.host, "port": self.port, "user": self.user, "identity_file": self.key,
             "known_hosts": known_hosts, "host_key_policy": policy}
        d.update(extra)
        return d


def _unavailable(reason: str):
    if os.environ.get("SPORCH_REQUIRE_SSH") == "1":
        pytest.fail(f"SPORCH_REQUIRE_SSH=1 but no OpenSSH server can run: {reason}", pytrace=False)
    pytest.skip(f"OpenSSH server not available: {reason} (apt-get install openssh-server)")


def _free_port(listen: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((listen, 0))
        return s.getsockname()[1]


def _can_bind(address: str) -> bool:
    try:
        _free_port(address)
        return True
    except OSError:
        return False


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sporch-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


SSHD_CONFIG = """\
Port {port}
ListenAddress {listen}
HostKey {d}/{name}_host_key
AuthorizedKeysFile {keys}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
UsePAM no
PidFile {d}/{name}.pid
Subsystem sftp internal-sftp
LogLevel {log_level}
{extra}"""


def _wait_listening(proc: subprocess.Popen, listen: str, port: int, log: Path) -> None:
    """Until sshd answers with its banner; skips (or fails) when it exits or stays silent."""
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            _unavailable(f"sshd exited with {proc.returncode}: {log.read_text().strip()[-300:]}")
        try:
            with socket.create_connection((listen, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            _unavailable("sshd did not listen within 15 s")
        time.sleep(0.1)


@contextlib.contextmanager
def running_sshd(d: Path, *, name: str = "sshd", listen: str = "127.0.0.1", keys: Path | None = None,
                 extra: str = "", log_level: str = "ERROR") -> Iterator[Sshd]:
    """An sshd with a host key of its own in ``d``, accepting the client key of ``keys`` (a
    folder made by :func:`make_keys`; default ``d``), stopped on exit."""
    if not os.path.exists(SSHD):
        _unavailable(f"{SSHD} is missing")
    if shutil.which("ssh-keygen") is None:
        _unavailable("ssh-keygen is missing")
    keys = keys or make_keys(d)
    _keygen(d / f"{name}_host_key")
    try:
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation dir
    except OSError:
        pass
    port = _free_port(listen)
    (d / f"{name}_config").write_text(SSHD_CONFIG.format(port=port, listen=listen, d=d, name=name, keys=keys,
                                                         log_level=log_level, extra=extra))
    log_path = d / f"{name}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / f"{name}_config")], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, listen, port, log_path)
        host_pub = " ".join((d / f"{name}_host_key.pub").read_text().split()[:2])
        yield Sshd(listen, port, getpass.getuser(), str(keys / "client_key"), str(keys / "other_key"), host_pub,
                   d, proc.pid, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        from sporch.orchestrator.remote.pool import close_all

        close_all()


def make_keys(d: Path) -> Path:
    """A client key sshd accepts (``client_key``, in ``authorized_keys``) and one it does not
    (``other_key``), in ``d``; made once."""
    if not (d / "client_key").exists():
        _keygen(d / "client_key")
        _keygen(d / "other_key")
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        os.chmod(d / "authorized_keys", 0o600)
    return d


@pytest.fixture(autouse=True)
def _no_user_ssh_config(monkeypatch):
    """The developer's ~/.ssh/config stays out of these tests (a test names its own)."""
    monkeypatch.setenv("SPORCH_SSH_CONFIG", "none")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """The login host: sshd on 127.0.0.1 (also the jump host of tests/remote/test_jump_hosts.py)."""
    d = tmp_path_factory.mktemp("sshd")
    with running_sshd(d, name="sshd") as server:
        yield server


@pytest.fixture(scope="session")
def target_sshd(sshd, tmp_path_factory):
    """A second sshd, on 127.0.0.2, with a host key of its own and the same client key as
    ``sshd``: the login host behind the jump host ``sshd``."""
    if not _can_bind("127.0.0.2"):
        _unavailable("cannot listen on 127.0.0.2 (loopback has no 127.0.0.0/8)")
    d = tmp_path_factory.mktemp("target-sshd")
    with running_sshd(d, name="target", listen="127.0.0.2", keys=sshd.folder) as server:
        yield server
