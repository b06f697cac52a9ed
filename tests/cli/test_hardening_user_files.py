"""Issue 32 items 11-14 and 18: what sporch reads that a user gave.

- 11: a FIFO (or device, or folder) where sporch reads a user file -- a checkpoint's
  safetensors, config.json or index, a job or cluster file, plan.json, a prompt file, a
  known_hosts file -- is refused in one line at once, never waited on. A helper thread opens
  each FIFO's writing end, so code that would have blocked reads an empty file instead: what is
  checked is the message ("FIFO"), and no test can hang.
- 12: a config.json that cannot be read (a read error: /proc/self/mem stands in for a file the
  user may not read, since the tests run as root), a path whose lookup fails (a name too long
  stands in for a folder that cannot be searched) and an index naming a shard outside its folder
  are one-line refusals.
- 13: ``login.known_hosts`` naming a file that is not one (/etc/passwd, a line paramiko cannot
  decode): one line naming the file, echoing nothing from it.
- 18: ``sporch decode -- -dash``: a run folder named like an option reaches the decoder as a folder.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.remote.host_keys import load_known_hosts
from sporch.orchestrator.remote.ssh import SshHost
from tests.testutil import EXAMPLES, ROOT

WAN_CONFIG = {"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 2,
              "attention_head_dim": 8, "in_channels": 4, "out_channels": 4, "text_dim": 8, "freq_dim": 16,
              "ffn_dim": 16, "num_layers": 1, "rope_max_seq_len": 32}


def safetensors_bytes() -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 8


class Fifos:
    """FIFOs made by a test; each has a thread that opens its writing end (unblocking a reader
    that waits) and closes it at once; teardown releases threads no reader met."""

    def __init__(self) -> None:
        self.made: list[tuple[Path, threading.Thread]] = []

    def __call__(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)

        def feed() -> None:
            try:
                os.close(os.open(path, os.O_WRONLY))
            except OSError:
                pass

        t = threading.Thread(target=feed, daemon=True)
        t.start()
        self.made.append((path, t))
        return path

    def close(self) -> None:
        for path, t in self.made:
            if t.is_alive():
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                t.join(5)
                os.close(fd)


@pytest.fixture
def fifo():
    f = Fifos()
    yield f
    f.close()


def one_line(code, err, *words):
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "internal error" not in err, err
    for w in words:
        assert w in err, err


def job_file(tmp_path: Path, **model) -> Path:
    text = (EXAMPLES / "tiny.yaml").read_text().replace("model:\n  preset: tiny\n",
                                                          "model:\n" + "".join(f"  {k}: {v}\n" for k, v in model.items()))
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


# -- 11: FIFOs ------------------------------------------------------------------------------------
def test_a_fifo_checkpoint_file_is_refused_by_inspect_plan_and_run(tmp_path, run_cli, fifo):
    single = tmp_path / "single"
    fifo(single / "model.safetensors")
    code, _, err = run_cli("inspect", single)
    one_line(code, err, "FIFO")
    fifo(tmp_path / "direct.safetensors")
    code, _, err = run_cli("inspect", tmp_path / "direct.safetensors")
    one_line(code, err, "FIFO")
    # run --local's check of the weights (before any rank starts, whatever --timeout says)
    job = job_file(tmp_path, preset="tiny", weights=str(single))
    code, _, err = run_cli("run", "--local", "--cluster", "local", job, "--run-dir", tmp_path / "run")
    one_line(code, err, "FIFO")
    assert not (tmp_path / "run").exists()


def test_fifo_config_and_index_are_refused(tmp_path, run_cli, fifo):
    cfg = tmp_path / "cfg" / "transformer"
    cfg.mkdir(parents=True)
    (cfg / "diffusion_pytorch_model.safetensors").write_bytes(safetensors_bytes())
    fifo(cfg / "config.json")
    code, _, err = run_cli("inspect", tmp_path / "cfg")
    one_line(code, err, "config.json", "FIFO")
    code, _, err = run_cli("plan", "--cluster", "local", job_file(tmp_path, weights=str(tmp_path / "cfg")))
    one_line(code, err, "config.json", "FIFO")
    idx = tmp_path / "idx"
    idx.mkdir()
    fifo(idx / "model.safetensors.index.json")
    code, _, err = run_cli("inspect", idx)
    one_line(code, err, "index.json", "FIFO")


def test_fifo_job_cluster_and_prompt_files_are_refused(tmp_path, run_cli, fifo):
    code, _, err = run_cli("plan", "--cluster", "local", fifo(tmp_path / "job.yaml"))
    one_line(code, err, "job.yaml", "FIFO")
    code, _, err = run_cli("plan", "--cluster", fifo(tmp_path / "c.yaml"), EXAMPLES / "tiny.yaml")
    one_line(code, err, "c.yaml", "FIFO")
    gen = (EXAMPLES / "tiny-generate.yaml").read_text().replace("  prompt: a red fox running in snow\n",
                                                                f"  prompt_file: {tmp_path / 'prompts.txt'}\n")
    (tmp_path / "gen.yaml").write_text(gen.replace("weights: runs/tiny-wan-pipeline", f"weights: {tmp_path / 'w'}"))
    fifo(tmp_path / "prompts.txt")
    code, _, err = run_cli("run", "--local", "--cluster", "local", tmp_path / "gen.yaml", "--run-dir", tmp_path / "r")
    one_line(code, err, "prompts.txt", "FIFO")


def test_decode_refuses_a_fifo_plan(tmp_path, run_cli, fifo):
    run = tmp_path / "run"
    fifo(run / "plan.json")
    code, _, err = run_cli("decode", run)
    one_line(code, err, "plan.json", "FIFO")


# -- 12: unreadable files, shards outside the folder --------------------------------------------
def test_a_config_that_cannot_be_read_is_one_line(tmp_path, run_cli):
    folder = tmp_path / "w" / "transformer"
    folder.mkdir(parents=True)
    (folder / "diffusion_pytorch_model.safetensors").write_bytes(safetensors_bytes())
    (folder / "config.json").symlink_to("/proc/self/mem")  # opens, then every read fails (EIO)
    code, _, err = run_cli("inspect", tmp_path / "w")
    one_line(code, err, "cannot read", "config.json")
    code, _, err = run_cli("plan", "--cluster", "local", job_file(tmp_path, weights=str(tmp_path / "w")))
    one_line(code, err, "cannot read", "config.json")


def test_a_path_whose_lookup_fails_is_one_line(tmp_path, run_cli):
    long = tmp_path / ("x" * 300)  # ENAMETOOLONG from stat, as EACCES from a folder that cannot be searched
    code, _, err = run_cli("inspect", long)
    one_line(code, err, "cannot look at")
    code, _, err = run_cli("plan", "--cluster", "local", job_file(tmp_path, preset="tiny", weights=str(long)))
    assert code == 2 and "internal error" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("shard", ["../other/x.safetensors", "/abs/x.safetensors", "a/../../other/x.safetensors",
                                   "~/x.safetensors"])
def test_an_index_naming_a_shard_outside_its_folder_is_refused(tmp_path, run_cli, shard):
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.safetensors").write_bytes(safetensors_bytes())
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    code, _, err = run_cli("inspect", folder)
    one_line(code, err, "outside its folder")


def test_an_index_naming_shards_inside_its_folder_is_read(tmp_path, run_cli):
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x.safetensors").write_bytes(safetensors_bytes())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "sub/x.safetensors"}}))
    from sporch.orchestrator.models.checkpoint_files import open_checkpoint

    assert list(open_checkpoint(folder).tensors) == ["w"]


# -- 13: known_hosts ----------------------------------------------------------------------------
SECRET = "s3cr3t-value-of-a-line"


@pytest.mark.parametrize("content", [
    f"root:x:0:0:{SECRET}:/root:/bin/bash\nhost ssh-ed25519 AAAA!!{SECRET}\n",  # paramiko: InvalidHostKey
    f"{SECRET} {SECRET} {SECRET}\n",  # a key type nobody knows, and nothing else: no entry at all
    "\x00\xff\xfe binary",
])
def test_a_known_hosts_that_is_not_one_is_one_line_without_its_content(tmp_path, content):
    path = tmp_path / "known_hosts"
    path.write_bytes(content.encode("latin-1"))
    host = SshHost.from_login({"host": "127.0.0.1", "port": 9, "known_hosts": str(path)})
    with pytest.raises(SporchError) as e:
        host.connect()
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg and SECRET not in msg and "AAAA" not in msg, msg


def test_etc_passwd_as_known_hosts_and_a_fifo(tmp_path, fifo):
    import paramiko

    if Path("/etc/passwd").is_file():
        with pytest.raises(SporchError, match="/etc/passwd") as e:
            load_known_hosts(paramiko.SSHClient(), "/etc/passwd", "login.known_hosts")
        assert "root:" not in str(e.value)
    with pytest.raises(SporchError, match="is not a regular file"):
        load_known_hosts(paramiko.SSHClient(), str(fifo(tmp_path / "kh")), "login.known_hosts")
    good = tmp_path / "good"
    key = paramiko.Ed25519Key.from_private_key_file  # noqa: F841 - a real line, from a real key type
    good.write_text("# comment\n[127.0.0.1]:2222 ssh-ed25519 "
                    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    client = paramiko.SSHClient()
    load_known_hosts(client, str(good), "login.known_hosts")
    assert client.get_host_keys().lookup("[127.0.0.1]:2222") is not None


# -- 18: a run folder named like an option --------------------------------------------------------
def test_decode_passes_a_dash_folder_as_a_folder(tmp_path):
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import load_job
    from sporch.orchestrator.plan.planner import make_plan

    run = tmp_path / "-dash"
    (run / "latents").mkdir(parents=True)
    plan = make_plan(find_cluster("local"), load_job(EXAMPLES / "tiny-generate.yaml", [f"model.weights={tmp_path / 'w'}"]))
    (run / "plan.json").write_text(plan.to_json())
    (run / "latents" / "00000.safetensors").write_bytes(safetensors_bytes())  # not this job's: nothing to decode
    p = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "decode", "--device", "cpu", "--",
                        "-dash"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT.parent)})
    # the decoder read the folder (and found no latents of this job in it), it took no option from it
    assert p.returncode == 2 and "no latents of this job in -dash/latents" in p.stderr, p.stderr
    assert "unrecognized arguments" not in p.stderr and "required" not in p.stderr


def test_a_fifo_ssh_config_is_refused(tmp_path, fifo):
    from sporch.orchestrator.remote.route import load_ssh_config

    with pytest.raises(SporchError, match="is a FIFO") as e:
        load_ssh_config(str(fifo(tmp_path / "ssh_config")))
    assert "\n" not in str(e.value)
