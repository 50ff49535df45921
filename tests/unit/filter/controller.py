"""Importing Ansible's controller code in a test process that also runs modules."""

from __future__ import annotations

import contextlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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
