"""Fixtures for the planner tests (plugins/module_utils/mlx_planner.py and its filters).

The synthetic wiring builders live in planner_synth.py beside this file (test modules import
it directly; hypothesis strategies must exist at import time, before any fixture).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FILTER_PATH = ROOT / "plugins" / "filter" / "mlx_planner.py"

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@contextlib.contextmanager
def controller_imports():
    """Import Ansible controller code without leaving the process flagged as 'controller'.

    The first import of ansible.errors (any controller module) sets
    ansible.module_utils._internal.is_controller = True for the whole process, and from then
    on module_utils' warn() goes to the controller's display instead of the module result:
    the library/ module tests running later in the same pytest process would lose their
    warnings. Restore the flag once the import is done.
    """
    from ansible.module_utils import _internal

    before = _internal.is_controller
    try:
        yield
    finally:
        _internal.is_controller = before


def load_filter_plugin(path=FILTER_PATH):
    """plugins/filter/<name>.py (mlx_planner.py by default), loaded by path as Ansible does."""
    with controller_imports():
        spec = importlib.util.spec_from_file_location(f"_test_{Path(path).stem}_filter", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def filters():
    """{name: function} of the FilterModule."""
    return load_filter_plugin().FilterModule().filters()


@pytest.fixture(scope="session")
def checks_filters():
    """{name: function} of plugins/filter/mlx_checks.py (preflight, re-run shortcuts, play hosts)."""
    return load_filter_plugin(ROOT / "plugins" / "filter" / "mlx_checks.py").FilterModule().filters()


@pytest.fixture(scope="session")
def filter_loader():
    """load_filter_plugin: a fresh copy of the filter plugin module on each call."""
    return load_filter_plugin


@pytest.fixture(scope="session")
def filter_error():
    """ansible.errors.AnsibleFilterError (imported without flagging the process)."""
    with controller_imports():
        from ansible.errors import AnsibleFilterError
    return AnsibleFilterError


@pytest.fixture(scope="session")
def mlx_config():
    """MLX's own mlx.distributed_config implementation (the reference)."""
    from mlx._distributed_utils import config
    return config
