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
args=()
for arg in "$@"; do
  if [[ "$arg" == --quick ]]; then
    select=(-m "not sim and not slow")
    workers="${PYTEST_XDIST_AUTO_NUM_WORKERS:-$((2 * $(nproc)))}"
  else
    args+=("$arg")
  fi
done
bash scripts/bootstrap.sh || exit 1
export PATH="$here/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$here/ansible.cfg"
.venv/bin/python -m pytest -n "$workers" --dist worksteal "${select[@]}" "${args[@]}"
rc=$?
if [[ $rc -eq 5 ]]; then
  echo "test.sh: no test ran (pytest exit code 5): failing" >&2
  exit 1
fi
exit $rc
