"""mlx.cluster.preload: the collection's action and filter plugins imported in the main process."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.mlx.cluster.plugins.callback import preload

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _plugin_files(kind):
    return sorted(p.stem for p in (ROOT / "plugins" / kind).glob("*.py") if not p.name.startswith("_"))


def test_every_action_and_filter_plugin_is_imported():
    imported, failed = preload.preload()
    assert failed == []
    expected = [f"{preload.PACKAGES[0]}.{n}" for n in _plugin_files("action")] + [
        f"{preload.PACKAGES[1]}.{n}" for n in _plugin_files("filter")
    ]
    assert sorted(imported) == sorted(expected)
    assert len(expected) >= 8
    assert all(name in sys.modules for name in expected)


def test_a_plugin_that_fails_to_import_is_reported_not_raised(tmp_path, monkeypatch):
    pkg = tmp_path / "preload_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text("VALUE = 1\n")
    (pkg / "broken.py").write_text("raise RuntimeError('no such dependency')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    imported, failed = preload.preload(("preload_probe_pkg", "no_such_package_anywhere"))
    assert imported == ["preload_probe_pkg.good"]
    assert [(name, type(exc).__name__) for name, exc in failed] == [
        ("preload_probe_pkg.broken", "RuntimeError"),
        ("no_such_package_anywhere", "ModuleNotFoundError"),
    ]
    assert "no such dependency" in str(failed[0][1])


def test_at_the_playbook_start_it_imports_then_freezes_what_the_process_holds(monkeypatch):
    calls = []
    monkeypatch.setattr(preload, "preload", lambda: calls.append("preload") or ([], []))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    preload.CallbackModule().v2_playbook_on_start(None)
    assert calls == ["preload", "freeze"]


def _env():
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NO_COLOR="1")


def test_the_project_enables_it_and_it_documents_itself():
    dump = subprocess.run(
        [str(BIN / "ansible-config"), "dump", "--only-changed"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dump.returncode == 0, dump.stderr
    line = next(ln for ln in dump.stdout.splitlines() if ln.startswith("CALLBACKS_ENABLED"))
    assert "mlx.cluster.preload" in line, line
    doc = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "callback", "mlx.cluster.preload"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert doc.returncode == 0 and "compiles" in doc.stdout, doc.stderr
