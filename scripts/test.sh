#!/usr/bin/env bash
# The test command (README and .ci/run): set-up, then the whole suite.
#   bash scripts/test.sh            the whole suite, the simulated cluster's tests included
#   bash scripts/test.sh --quick    the unit tests and linters alone: the tests marked `sim` or
#                                   `slow` (the simulated cluster, the end-to-end runs, MLX ranks
#                                   started for real) deselected
# Extra arguments go to pytest. pytest's exit code 5 (no test ran) is a failure.
# Tests run in parallel, one worker per CPU (pytest-xdist; PYTEST_XDIST_AUTO_NUM_WORKERS
# overrides): the end-to-end tests mostly wait on SSH and on the simulated Macs, so two workers
# on two cores take about half the time of one (bench/NOTES.md, "Test suite: workers"). The quick
# tier runs two workers per CPU: many of its tests wait out short time bounds rather than compute
# (on 2 CPUs, 4 workers took 0.70x the wall time of 2: bench/NOTES.md, "The quick tier: workers").
# Work stealing, with the simulated-cluster tests collected first (tests/conftest.py): an idle
# worker takes queued tests from the busy one, and the short unit tests fill the end.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
# --quick (anywhere among the arguments) selects the tier; the rest go to pytest as they are.
select=()
workers=auto
export MLXC_TEST_TIER=full
args=()
for arg in "$@"; do
  if [[ "$arg" == --quick ]]; then
    select=(-m "not sim and not slow")
    # fewer random cases per property test (tests/budget.py); the whole suite draws them all
    export MLXC_TEST_TIER=quick
    workers="${PYTEST_XDIST_AUTO_NUM_WORKERS:-$((2 * $(nproc)))}"
  else
    args+=("$arg")
  fi
done
bash scripts/bootstrap.sh || exit 1
# The user tests/unit/test_controller_script.py runs controller.sh as (as root, the suite cannot
# see what a user sees), made here, before any simulated Mac is up: useradd replaces the machine's
# /etc/passwd and /etc/group, and a simulated Mac up at that moment loses its own copies of them
# (bound over the old files), so ssh to it is refused (tests/simcluster/README.md, /etc/passwd).
test_user=mlxc-controller
if [[ $(id -u) -eq 0 ]] && ! id "$test_user" >/dev/null 2>&1 && command -v useradd >/dev/null; then
  useradd --create-home --shell /bin/bash "$test_user" ||
    echo "test.sh: could not make the user $test_user (the controller test makes it, or skips)" >&2
fi
export PATH="$here/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$here/ansible.cfg"
# Compiled tests are kept (__pycache__, ignored by git), whatever the shell says: each worker
# imports every test module, and pytest's rewriting of their asserts was two thirds of a
# worker's 7 s of collection. The quick tier's workers (twice as many as CPUs) then read them
# compiled once, by a collection alone before they start (bench/NOTES.md, "The quick tier: where
# its CPU goes").
unset PYTHONDONTWRITEBYTECODE
# (skipped when every test module's and conftest's rewritten copy is newer than its source: the
# collection alone is 3.5 s of CPU, spent for nothing on a run after the first)
compiled() {
  .venv/bin/python - <<'PY' 2>/dev/null
import sys
from pathlib import Path
from _pytest.assertion.rewrite import PYTEST_TAG
for src in Path("tests").rglob("*.py"):
    if src.name.startswith("test_") or src.name == "conftest.py":
        pyc = src.parent / "__pycache__" / f"{src.stem}.{PYTEST_TAG}.pyc"
        if not pyc.exists() or pyc.stat().st_mtime < src.stat().st_mtime:
            sys.exit(1)
PY
}
if [[ $MLXC_TEST_TIER == quick ]] && ! compiled; then
  .venv/bin/python -m pytest --collect-only -q -n 0 "${select[@]}" "${args[@]}" >/dev/null 2>&1
fi
.venv/bin/python -m pytest -n "$workers" --dist worksteal "${select[@]}" "${args[@]}"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "test.sh: no test ran (pytest exit code 5): failing" >&2
  exit 1
fi
exit $rc
