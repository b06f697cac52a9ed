"""Shared fixtures, available to every test folder (each folder is a package: helpers are
imported as ``tests.<folder>.<module>``; see tests/testutil.py).

``isolated_cluster_search``: HOME is a temporary folder and SPORCH_CLUSTERS / SPORCH_DEBUG are
unset, so no user or environment cluster folder leaks into a test (the orchestrator folders'
conftest.py files use it for every test they hold).
``run_cli``: ``sporch`` in-process: (exit code, stdout, stderr); a ``sys.exit`` inside a command counts.
``sporch_home``: SPORCH_HOME in a temporary folder (job records), no SPORCH_CLUSTERS / SPORCH_DEBUG.
``_no_user_store`` (session, autouse): what sporch writes under the user's home -- the job
records and the history store, both under ``$SPORCH_HOME`` (default ``~/.local/share/sporch``),
and ``$SPORCH_HISTORY`` -- goes to a temporary folder for the whole run (subprocesses inherit
it); at the end, a file of the real store that this run wrote fails the run. The real store's
listing (:func:`store_snapshot`) is compared with the one before, and a new or changed file is
this run's when it names the run's temporary root (every job, run folder and campaign a test
makes lives there, and sporch's records and history rows name their folders); changes that name
none (another terminal, a cron job writing records meanwhile) are listed, not failed
(:func:`changes_by_run`).

``_one_torch_thread`` (session, autouse): this process's torch on one thread, as the ranks'.

``_rank_pool`` (session, autouse): the ranks of ``run_distributed`` run on one
:class:`sporch.runtime.rank_pool.RankPool` for the whole run: workers started at first use, with
torch imported once, cleaned between calls (``SPORCH_TEST_FRESH_RANKS=1``: a fresh process per rank
per call instead, as outside the tests).

The loopback Slurm lab (scripts/slurmlab/start.sh), used by tests/slurm, tests/submit,
tests/campaign and tests/remote:

``slurm_cluster`` (session): loads the lab's env file (SLURM_CONF, SLURMLAB_*), checks that
``sinfo`` answers, and skips with the reason otherwise -- or fails when SPORCH_REQUIRE_SLURM=1
(CI as root starts the lab, so a missing lab there is a bug, not a skip).
``slurm_jobs``: submit helper; every job it submitted is cancelled at teardown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

DEFAULT_DIR = "/var/tmp/sporch-slurmlab"
#: The variables naming where sporch writes under the user's home (orchestrator/jobs/store.py,
#: orchestrator/campaign/history_store.py).
HOME_VARIABLES = ("SPORCH_HOME", "SPORCH_HISTORY")


def real_store_paths(environ=None) -> List[Path]:
    """Where sporch would write for the user with ``environ`` (default: this process's): the
    SPORCH_HOME folder (job records, history store) and SPORCH_HISTORY's file when set."""
    env = os.environ if environ is None else environ
    home = (env.get("SPORCH_HOME") or "").strip()
    paths = [Path(home).expanduser() if home else Path(env.get("HOME") or "~").expanduser() / ".local/share/sporch"]
    history = (env.get("SPORCH_HISTORY") or "").strip()
    if history and history.lower() != "off":
        paths.append(Path(history).expanduser())
    return paths


def store_snapshot(paths) -> Dict[str, tuple]:
    """Every file and folder under ``paths`` -> (is a folder, size, mtime_ns): what a run must leave
    as it was."""
    out: Dict[str, tuple] = {}
    for root in paths:
        candidates = [root] + (sorted(root.rglob("*")) if root.is_dir() else [])
        for p in candidates:
            try:
                st = p.lstat()
            except OSError:
                continue
            folder = p.is_dir()
            out[str(p)] = (folder, 0 if folder else st.st_size, st.st_mtime_ns)
    return out


def changes_by_run(before: Dict[str, tuple], after: Dict[str, tuple], markers) -> Tuple[List[str], List[str]]:
    """The files that differ between two :func:`store_snapshot` listings, split into (this run's,
    others'): a file that is new or changed and whose bytes name one of ``markers`` (the run's
    temporary root) is this run's; the rest -- files changed without naming it, files removed --
    another process's. Folders are left out: their own files say who changed them."""
    ours: List[str] = []
    others: List[str] = []
    needles = [m.encode() for m in markers]
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new or (new or old)[0]:
            continue
        try:
            data = Path(path).read_bytes() if new is not None else b""
        except OSError:
            data = b""
        (ours if any(n in data for n in needles) else others).append(path)
    return ours, others


@pytest.fixture(scope="session", autouse=True)
def _no_user_store(tmp_path_factory, request):
    real = real_store_paths()
    before = store_snapshot(real)
    saved = {k: os.environ.get(k) for k in HOME_VARIABLES}
    os.environ["SPORCH_HOME"] = str(tmp_path_factory.mktemp("sporch-home"))
    os.environ.pop("SPORCH_HISTORY", None)  # the history store: under the temporary SPORCH_HOME
    try:
        yield real
    finally:
        restore_env(saved)
    ours, others = changes_by_run(before, store_snapshot(real), [str(tmp_path_factory.getbasetemp())])
    if others:  # said in the summary (here, inside the last test's teardown, output is captured)
        request.config.stash[OTHERS_CHANGES] = others
    if ours:
        pytest.fail(f"the tests changed the user's own sporch store: {_listing(ours)}", pytrace=False)


def _listing(paths: List[str]) -> str:
    return ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")


#: The real store's files other processes changed during the run (the terminal summary lists them).
OTHERS_CHANGES = pytest.StashKey[List[str]]()


def pytest_terminal_summary(terminalreporter, config):
    others = config.stash.get(OTHERS_CHANGES, None)
    if others:
        terminalreporter.write_line(f"note: other processes changed the user's sporch store during the run (not "
                                    f"this run's: they name none of its folders): {_listing(others)}")


#: The fixtures that reach the one loopback Slurm lab: under pytest-xdist the tests that use them
#: run on one worker, one after another (the lab's four nodes are one queue: two workers' jobs
#: would wait on each other's and the tests would measure that queue).
LAB_FIXTURES = frozenset({"slurm_cluster"})
#: Session fixtures that take seconds to build and that several modules read: the modules that use
#: one run on one worker, so it is built once (tests/plan's leave-one-table-out fit,
#: tests/runtime/models' derived split plans checked in one world).
SHARED_SESSION_FIXTURES = ("held_out", "derived_verdicts")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (its worker plugin is registered after this file)
def pytest_collection_modifyitems(config, items):
    """Where the tests go when scripts/test.sh runs them on two pytest-xdist workers
    (``--dist loadgroup``): a module's tests stay together (its module fixtures are built once, on
    one worker), every module with a test on the Slurm lab is in one group, and so are the modules
    that read one of the SHARED_SESSION_FIXTURES. Without xdist the marks do nothing."""
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0]

    group: Dict[str, str] = {}
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & LAB_FIXTURES:
            group[module(item)] = "slurmlab"
        elif group.get(module(item)) != "slurmlab":
            shared = next((name for name in SHARED_SESSION_FIXTURES if name in used), None)
            if shared:
                group[module(item)] = shared
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group.get(module(item), module(item))))


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size():
    """A process the test starts sees COLUMNS / LINES only where the test sets them: importing
    readline (pdb does) sets them in the C environment, which subprocesses inherit though
    ``os.environ`` never shows them, so a CLI meant to print one unwrapped line to a pipe would
    wrap at 80."""
    _unset_c_only_terminal_size()
    yield


def _unset_c_only_terminal_size() -> None:
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)


def pytest_configure(config):
    """The same before pytest-xdist starts its workers: a worker inherits the C environment whole
    (readline's COLUMNS=80 included) and its ``os.environ`` would then show it."""
    _unset_c_only_terminal_size()


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """The test process's torch on one intra-op thread, as every rank's (run_distributed's, and a
    CPU rank's through runtime.distributed.limit_cpu_threads): the tiny models' ops are far too small
    to share, and on two busy cores (two xdist workers) a second thread's spin-waits cost more CPU
    than the work: a tiny Qwen-Image pipeline call took 1.1-2.5 s of CPU on torch's default two
    threads and 0.04 s on one. Only where the collection already imported torch (an orchestrator
    folder alone never loads it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def _rank_pool():
    if os.environ.get("SPORCH_TEST_FRESH_RANKS", "") not in ("", "0"):
        yield None
        return
    from sporch.runtime.rank_pool import RankPool  # imports nothing heavy: workers start at first use

    pool = RankPool()
    try:
        with pool.serving():
            yield pool
    finally:
        pool.close()


def restore_env(saved: dict) -> None:
    """Put back the environment variables ``saved`` ({name: value or None for unset})."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def env_file() -> Path:
    if os.environ.get("SLURMLAB_ENV"):
        return Path(os.environ["SLURMLAB_ENV"])
    return Path(os.environ.get("SLURMLAB_DIR", DEFAULT_DIR)) / "slurmlab.env"


def read_env_file(path: Path) -> Dict[str, str]:
    """``export K=V`` lines of the lab's env file -> {K: V}."""
    out: Dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            k, _, v = line[len("export "):].partition("=")
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


@dataclass
class SlurmLab:
    env: Dict[str, str]
    partition: str
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    accounting: bool
    max_time: str


def _unavailable(reason: str):
    if os.environ.get("SPORCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"SPORCH_REQUIRE_SLURM=1 but the Slurm lab is not usable: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab not available: {reason} (start it: sudo scripts/slurmlab/start.sh)")


def _lab_problem(partition: str, tries: int = 3, timeout: float = 30.0) -> Optional[str]:
    """Why the lab's controller does not list the partition (None: it does); ``tries`` sinfo calls,
    a few seconds apart, each given ``timeout`` seconds (a 2-core machine under a test's load)."""
    why = None
    for attempt in range(tries):
        if attempt:
            time.sleep(5)
        try:
            p = subprocess.run(["sinfo", "--noheader", "-p", partition, "-o", "%D %T"], capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            why = f"sinfo did not answer within {timeout:g} s (slurmctld down?)"
            continue
        if p.returncode == 0 and p.stdout.strip():
            return None
        why = f"sinfo failed: {(p.stderr or p.stdout).strip() or p.returncode}"
    return why


@pytest.fixture(scope="session")
def slurm_cluster():
    path = env_file()
    if not path.is_file():
        _unavailable(f"no env file {path}")
    if shutil.which("sinfo") is None:
        _unavailable("sinfo is not installed")
    env = read_env_file(path)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        partition = env.get("SLURMLAB_PARTITION", "lab")
        why = _lab_problem(partition)
        if why and os.environ.get("SPORCH_REQUIRE_SLURM") == "1" and os.geteuid() == 0:
            # required (CI): a controller that stopped answering (a loaded machine, a daemon that
            # died) is started again once by the lab's idempotent script before the tests give up
            start = Path(__file__).resolve().parents[1] / "scripts" / "slurmlab" / "start.sh"
            subprocess.run(["bash", str(start)], capture_output=True, text=True, timeout=900)
            why = _lab_problem(partition)
        if why:
            _unavailable(why)
        yield SlurmLab(
            env=env,
            partition=partition,
            nodes=int(env.get("SLURMLAB_NODES", 4)),
            gpus_per_node=int(env.get("SLURMLAB_GPUS_PER_NODE", 2)),
            cpus_per_node=int(env.get("SLURMLAB_CPUS_PER_NODE", 2)),
            accounting=env.get("SLURMLAB_ACCOUNTING", "1") == "1",
            max_time=env.get("SLURMLAB_MAX_TIME", "02:00:00"),
        )
    finally:
        restore_env(saved)


@dataclass
class JobTracker:
    lab: SlurmLab
    ids: List[str] = field(default_factory=list)

    def submit(self, *args: str, wrap: str = "sleep 300", name: str = "sporch-test") -> str:
        """sbatch --wrap on the lab; returns the job id; cancelled at teardown."""
        from sporch.orchestrator.slurm.commands import sbatch

        job_id = sbatch(["-p", self.lab.partition, "-J", name, "-o", "/dev/null", "-t", "5", *args,
                         f"--wrap={wrap}"])
        self.ids.append(job_id)
        return job_id

    def wait(self, job_id: str, until: Callable[[object], bool], timeout: float = 15.0, source: str = "squeue"):
        """Poll squeue (or sacct) until ``until(state)``; return that state."""
        from sporch.orchestrator.slurm.query import sacct_states, squeue_states

        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            states = squeue_states([job_id]) if source == "squeue" else (sacct_states([job_id]) or {})
            state = states.get(job_id)
            if state is not None and until(state):
                return state
            time.sleep(0.25)
        raise AssertionError(f"job {job_id}: {source} state {state} did not reach the condition in {timeout}s")


@pytest.fixture
def slurm_jobs(slurm_cluster):
    tracker = JobTracker(slurm_cluster)
    yield tracker
    if tracker.ids:
        subprocess.run(["scancel", *tracker.ids], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def scancel_recorded():
    """``scancel_recorded(record_files)``: cancel every Slurm job named by sporch job records
    (teardown of the live submission tests; unreadable records are skipped)."""
    import json

    def cancel(record_files) -> None:
        ids = []
        for f in record_files:
            try:
                ids.append(json.loads(Path(f).read_text())["backend_job_id"])
            except (OSError, ValueError, KeyError):
                pass
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)

    return cancel


@pytest.fixture
def isolated_cluster_search(monkeypatch, tmp_path_factory):
    """No user/env cluster folders leak into tests."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)
    monkeypatch.delenv("SPORCH_DEBUG", raising=False)
    return home


@pytest.fixture
def sporch_home(tmp_path, monkeypatch):
    home = tmp_path / "sporch-home"
    monkeypatch.setenv("SPORCH_HOME", str(home))
    monkeypatch.delenv("SPORCH_DEBUG", raising=False)
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)
    return home


@pytest.fixture
def run_cli(capsys):
    """Run ``sporch`` in-process: (exit code, stdout, stderr); sys.exit inside a command counts."""
    from sporch.orchestrator.cli.main import main

    def _run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run
