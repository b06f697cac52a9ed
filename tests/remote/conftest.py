"""A real OpenSSH server on loopback for the remote-submission tests.

``sshd`` (session): ``/usr/sbin/sshd -D -e -f <tmp>/sshd_config`` on 127.0.0.1 and a free port,
with a temporary host key and a temporary client key in its ``AuthorizedKeysFile``; stopped at
teardown. Skips with the reason when sshd is not installed -- or fails when
``SPORCH_REQUIRE_SSH=1`` (scripts/test.sh installs openssh-server as root).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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

    def login(self, known_hosts: str, policy: str = "accept-new", **extra) -> dict:
        d = {"host": self.host, "port": self.port, "user": self.user, "identity_file": self.key,
             "known_hosts": known_hosts, "host_key_policy": policy}
        d.update(extra)
        return d


def _unavailable(reason: str):
    if os.environ.get("SPORCH_REQUIRE_SSH") == "1":
        pytest.fail(f"SPORCH_REQUIRE_SSH=1 but no OpenSSH server can run: {reason}", pytrace=False)
    pytest.skip(f"OpenSSH server not available: {reason} (apt-get install openssh-server)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sporch-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    if not os.path.exists(SSHD):
        _unavailable(f"{SSHD} is missing")
    if shutil.which("ssh-keygen") is None:
        _unavailable("ssh-keygen is missing")
    d = tmp_path_factory.mktemp("sshd")
    _keygen(d / "host_key")
    _keygen(d / "client_key")
    _keygen(d / "other_key")
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    try:
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation dir
    except OSError:
        pass
    port = _free_port()
    (d / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
UsePAM no
PidFile {d}/sshd.pid
Subsystem sftp internal-sftp
LogLevel ERROR
""")
    log = open(d / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                _unavailable(f"sshd exited with {proc.returncode}: {(d / 'sshd.log').read_text().strip()[-300:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                _unavailable("sshd did not listen within 15 s")
            time.sleep(0.1)
        host_pub = " ".join((d / "host_key.pub").read_text().split()[:2])
        yield Sshd("127.0.0.1", port, getpass.getuser(), str(d / "client_key"), str(d / "other_key"), host_pub, d)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        from sporch.orchestrator.remote.ssh import close_all

        close_all()
