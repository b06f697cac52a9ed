#!/usr/bin/env bash
# Line coverage of orchestrator/ and runtime/ over the tests, the subprocesses they start included
# (CLI runs, rank processes, Slurm lab jobs on this machine; scripts/coverage.rc says how).
#   ./scripts/coverage.sh [pytest args...]     e.g. ./scripts/coverage.sh tests/runtime/launch
# Runs scripts/test.sh under coverage.py (no args: the whole suite) and writes, in
# $SPORCH_COVERAGE_DIR (default ./coverage-out): report.txt (per file, with the missed lines),
# coverage.json, and pytest.log. Exits with the tests' status.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export SPORCH_COVERAGE_DIR=$(realpath -m "${SPORCH_COVERAGE_DIR:-coverage-out}")
export COVERAGE_RCFILE=$PWD/scripts/coverage.rc
rm -rf "$SPORCH_COVERAGE_DIR"
mkdir -p "$SPORCH_COVERAGE_DIR/data"
./scripts/test.sh "$@" 2>&1 | tee "$SPORCH_COVERAGE_DIR/pytest.log"
status=${PIPESTATUS[0]}
"$PY" -m coverage combine -q
"$PY" -m coverage report --show-missing > "$SPORCH_COVERAGE_DIR/report.txt"
"$PY" -m coverage json -q -o "$SPORCH_COVERAGE_DIR/coverage.json"
tail -n 1 "$SPORCH_COVERAGE_DIR/report.txt"
exit "$status"
