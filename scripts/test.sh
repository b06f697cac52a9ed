#!/usr/bin/env bash
# The test command: install, start the loopback Slurm cluster (root only), run every test.
#   ./scripts/test.sh [pytest args...]
# As root (CI), the Slurm tests are required to run; elsewhere they skip with a reason.
# Budget: the whole suite within 25 minutes on the 2-core CI machine; the 15 slowest tests are
# listed at the end (docs/testing.md). One folder, fast: python -m pytest -q tests/FOLDER -x
# The tests run on SPORCH_TEST_WORKERS pytest-xdist workers (default 2, one per core; 0: in this
# process, one after another): a module's tests on one worker, the Slurm lab's on one
# (tests/conftest.py); while one worker's test waits (on the lab, a timeout, a sleeping rank) the
# other's runs.
# With COVERAGE_RCFILE set (scripts/coverage.sh), pytest runs under coverage.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SPORCH_EXTRAS=runtime,test,report,pipelines,quant ./scripts/setup.sh   # quant: torchao, for model.quant's tests
if [ "$(id -u)" = 0 ] && [ "${SPORCH_SKIP_SLURM:-0}" != 1 ]; then
  bash scripts/slurmlab/start.sh
  export SPORCH_REQUIRE_SLURM=1
  # tests/remote: a real sshd on loopback (remote submission over ssh)
  command -v /usr/sbin/sshd >/dev/null || (apt-get update && apt-get install -y openssh-server)
  export SPORCH_REQUIRE_SSH=1
  # tests/campaign: the HTML report opened in headless Debian chromium
  [ -x /usr/bin/chromium ] || (apt-get update && apt-get install -y chromium)
  export SPORCH_REQUIRE_CHROMIUM=1
  # tests/submit/test_container_live.py: the verify job's ranks in podman containers (runc: where
  # crun refuses the host's cgroup layout)
  { command -v podman >/dev/null && command -v runc >/dev/null; } || (apt-get update && apt-get install -y podman runc)
  export SPORCH_REQUIRE_PODMAN=1
fi
WORKERS=(-n "${SPORCH_TEST_WORKERS:-2}" --dist loadgroup)
if [ -n "${COVERAGE_RCFILE:-}" ]; then
  exec "$PY" -m coverage run -m pytest -q --durations=15 "${WORKERS[@]}" "$@"
fi
exec "$PY" -m pytest -q --durations=15 "${WORKERS[@]}" "$@"
