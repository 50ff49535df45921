"""The project's own quality gates: ansible-lint (production profile) and module docs."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))


def _env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NO_COLOR="1")


@pytest.mark.skipif(not (BIN / "ansible-lint").exists() and not shutil.which("ansible-lint"),
                    reason="ansible-lint is not installed (pip install '.[dev]')")
def test_ansible_lint_production_profile_is_clean():
    res = subprocess.run([str(BIN / "ansible-lint") if (BIN / "ansible-lint").exists() else "ansible-lint",
                          "--profile", "production"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.parametrize("module", MODULES)
def test_every_module_documents_itself(module):
    res = subprocess.run([str(BIN / "ansible-doc"), f"mlx.cluster.{module}"], cwd=ROOT,
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        if section == "OPTIONS" and "options: {}" in (ROOT / "library" / f"{module}.py").read_text():
            continue  # a module without options shows no OPTIONS section
        assert section in res.stdout, f"{module}: ansible-doc shows no {section}"
