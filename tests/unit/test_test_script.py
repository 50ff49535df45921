"""scripts/test.sh, the README's test command, run over a stand-in pytest: which tier it asks for,
and what it makes of pytest's exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import budget

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for .venv/bin/python: writes one line per call (the tier, PYTHONDONTWRITEBYTECODE,
# argv) and exits with the code in FAKE_RC for the run itself (the collection alone exits 0); the
# check whether the tests are compiled already (a script on stdin) answers FAKE_COMPILED, unlogged.
FAKE_PYTHON = """#!/usr/bin/env bash
[[ $* == - ]] && { cat >/dev/null; exit "${FAKE_COMPILED:-1}"; }
echo "tier=${MLXC_TEST_TIER:-} nobytecode=${PYTHONDONTWRITEBYTECODE:-} argv=$*" >> "$FAKE_LOG"
for a in "$@"; do [[ $a == --collect-only ]] && exit 0; done
exit "${FAKE_RC:-0}"
"""


def run_script(tmp_path, *args, rc=0, tier="quick", compiled=False):
    """scripts/test.sh copied into a tree whose bootstrap does nothing and whose python is the
    stand-in; returns (exit code, stderr, the stand-in's calls)."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    (tmp_path / "scripts" / "bootstrap.sh").write_text("exit 0\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    # the shell it runs from says to draw fewer cases and write no bytecode: the script decides
    env = dict(os.environ, FAKE_LOG=str(log), FAKE_RC=str(rc), MLXC_TEST_TIER=tier, PYTHONDONTWRITEBYTECODE="1")
    env["FAKE_COMPILED"] = "0" if compiled else "1"
    env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
    # no sbin: the script's useradd of the controller test's user (when it is missing) is not for here
    env["PATH"] = "/usr/bin:/bin"
    out = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test.sh"), *args], env=env, capture_output=True, text=True, timeout=60
    )
    return out.returncode, out.stderr, log.read_text().splitlines()


def test_the_whole_suite_draws_every_case_whatever_the_shell_says(tmp_path):
    rc, _, calls = run_script(tmp_path, "-q")
    assert rc == 0
    assert len(calls) == 1, calls  # no collection of its own before the run
    assert calls[0].startswith("tier=full nobytecode= argv=-m pytest -n auto --dist worksteal -q")


def test_the_quick_tier_collects_once_then_runs_its_workers(tmp_path):
    rc, _, calls = run_script(tmp_path, "--quick", "-q", tier="full")
    assert rc == 0
    assert len(calls) == 2, calls
    assert all(c.startswith("tier=quick nobytecode= ") for c in calls), calls
    assert "--collect-only" in calls[0] and "-n 0 -m not sim and not slow -q" in calls[0]
    assert f"-n {2 * len(os.sched_getaffinity(0))} --dist worksteal -m not sim and not slow -q" in calls[1], calls


def test_the_quick_tier_does_not_collect_again_what_is_compiled_already(tmp_path):
    rc, _, calls = run_script(tmp_path, "--quick", "-q", compiled=True)
    assert rc == 0
    assert len(calls) == 1 and "--collect-only" not in calls[0], calls


def test_the_compiled_check_reads_pytests_own_copies(tmp_path):
    """The check itself (scripts/test.sh's compiled), with this tree's python and pytest: a test
    module without its rewritten copy, or older than its source, is not compiled."""
    script = (ROOT / "scripts" / "test.sh").read_text().split("<<'PY' 2>/dev/null\n")[1].split("\nPY\n")[0]
    from _pytest.assertion.rewrite import PYTEST_TAG

    src = tmp_path / "tests" / "unit" / "test_x.py"
    src.parent.mkdir(parents=True)
    src.write_text("")
    pyc = src.parent / "__pycache__" / f"test_x.{PYTEST_TAG}.pyc"

    def compiled():
        return subprocess.run([sys.executable, "-"], input=script, cwd=tmp_path, text=True, timeout=60).returncode

    assert compiled() == 1
    pyc.parent.mkdir()
    pyc.write_bytes(b"")
    os.utime(src, (0, 100))
    os.utime(pyc, (0, 200))
    assert compiled() == 0
    os.utime(src, (0, 300))
    assert compiled() == 1


@pytest.mark.parametrize(("rc", "expected"), [(0, 0), (1, 1), (5, 1)])
def test_no_test_run_is_a_failure(tmp_path, rc, expected):
    got, stderr, _ = run_script(tmp_path, rc=rc)
    assert got == expected
    assert ("no test ran" in stderr) == (rc == 5)


@pytest.mark.parametrize(
    ("quick", "full", "drawn"), [(False, 150, 150), (True, 150, 37), (True, 60, 25), (True, 10, 10)]
)
def test_the_quick_tier_draws_a_quarter_at_least_25_never_more_than_all(monkeypatch, quick, full, drawn):
    monkeypatch.setattr(budget, "QUICK", quick)
    assert budget.examples(full) == drawn


def test_the_script_makes_the_controller_tests_user():
    """test.sh makes the user test_controller_script.py runs as, before any simulated Mac is up:
    one name in both places."""
    from tests.unit.test_controller_script import TEST_USER

    assert f"\ntest_user={TEST_USER}\n" in (ROOT / "scripts" / "test.sh").read_text()
