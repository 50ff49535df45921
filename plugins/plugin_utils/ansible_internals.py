# -*- coding: utf-8 -*-
"""The ansible-core internals the toolkit relies on beyond the plugin API, one wrapper each, so
that a change in ansible-core breaks here, and in tests/unit/plugin_utils/test_ansible_internals.py,
rather than somewhere inside a stage. Used by plugins/plugin_utils/progress.py, whose reads of a
module's progress file run beside the module, over a connection of their own.

- ``own_settings(conn)``: a copy of a task's connection plugin whose settings can change without
  touching the task's own. ansible-core keeps a plugin's settings in the private dict
  ``_options`` and where each came from in ``_origins`` (AnsiblePlugin.get_option/set_option:
  set_option writes both), which ``copy.copy`` shares.
- ``run_raw(action, command)``: a command over an action's connection, as ansible-core runs a
  module's (ActionBase._low_level_execute_command: the shell, the ``sleep 0`` against the ssh race
  that drops output, the decoding); returns ``{rc, stdout, stderr}``.
- ``remote_tmpdir(action)``: the task's remote temporary directory (the connection's shell
  plugin's ``tmpdir``), None before the action made one.
"""

from __future__ import annotations

import copy


def own_settings(conn):
    """A shallow copy of the connection plugin `conn` with settings of its own."""
    twin = copy.copy(conn)
    twin._options = dict(conn._options)
    if isinstance(getattr(conn, "_origins", None), dict):
        twin._origins = dict(conn._origins)
    return twin


def run_raw(action, command):
    """Run the shell line `command` over `action`'s connection, without become."""
    return action._low_level_execute_command(command, sudoable=False)


def remote_tmpdir(action):
    """The remote temporary directory of `action`'s task, or None when none is made yet."""
    return action._connection._shell.tmpdir
