"""Fixtures for the planner tests (plugins/plugin_utils/plan_*.py, planner.py and their filters).

The synthetic wiring builders live in planner_synth.py beside this file (test modules import
it directly; hypothesis strategies must exist at import time, before any fixture).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.unit.filter.controller import controller_imports

ROOT = Path(__file__).resolve().parents[3]
FILTERS = "ansible_collections.mlx.cluster.plugins.filter"


def load_filter_plugin(name="plan_filters"):
    """plugins/filter/<name>.py, imported by its collection name."""
    with controller_imports():
        return importlib.import_module(f"{FILTERS}.{name}")


@pytest.fixture(scope="session")
def filters():
    """{name: function} of the FilterModule."""
    return load_filter_plugin().FilterModule().filters()


@pytest.fixture(scope="session")
def checks_filters():
    """{name: function} of plugins/filter/check_filters.py (preflight, re-run shortcuts, play hosts)."""
    return load_filter_plugin("check_filters").FilterModule().filters()


@pytest.fixture(scope="session")
def filter_loader():
    """load_filter_plugin(name): the filter plugin module plugins/filter/<name>.py."""
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
