"""plugins/plugin_utils/ansible_internals.py against the installed ansible-core: each wrapper of an
internal does what the toolkit relies on, so a release of ansible-core that changes one fails here
(and names it), not inside a stage on a real cluster."""

from __future__ import annotations

import inspect
import io

from tests.unit.filter.controller import controller_imports


def test_own_settings_gives_a_copy_whose_settings_are_its_own():
    with controller_imports():
        from ansible.playbook.play_context import PlayContext
        from ansible.plugins.loader import connection_loader

        from ansible_collections.mlx.cluster.plugins.plugin_utils.ansible_internals import own_settings
    conn = connection_loader.get("ssh", PlayContext(), io.StringIO())
    assert isinstance(getattr(conn, "_options", None), dict), "ansible-core keeps no _options dict on a plugin"
    conn.set_option("control_path_dir", "/tmp/a")
    origin = conn.get_option_and_origin("control_path")[1]  # (from the defaults: not set directly)
    twin = own_settings(conn)
    twin.set_option("control_path_dir", "/tmp/b")
    twin.set_option("control_path", "/tmp/b/%C")
    assert twin.get_option("control_path_dir") == "/tmp/b"
    assert conn.get_option("control_path_dir") == "/tmp/a"  # the task's connection is left as it was
    # where each of its settings came from too (set_option records it beside the value)
    assert conn.get_option_and_origin("control_path")[1] == origin != "Direct"
    assert twin is not conn and type(twin) is type(conn)


def test_run_raw_and_remote_tmpdir_use_what_ansible_core_has():
    with controller_imports():
        from ansible.plugins.action import ActionBase

        from ansible_collections.mlx.cluster.plugins.plugin_utils import ansible_internals
    params = inspect.signature(ActionBase._low_level_execute_command).parameters
    assert "cmd" in params and "sudoable" in params, list(params)

    class Shell:
        tmpdir = "/tmp/ansible-tmp-1"

    class Conn:
        _shell = Shell()

    class Action:
        _connection = Conn()

        def _low_level_execute_command(self, cmd, sudoable=True):
            return {"rc": 0, "stdout": cmd, "stderr": "", "sudoable": sudoable}

    assert ansible_internals.run_raw(Action(), "cat f") == {"rc": 0, "stdout": "cat f", "stderr": "", "sudoable": False}
    assert ansible_internals.remote_tmpdir(Action()) == "/tmp/ansible-tmp-1"
    # the shell plugins ansible-core ships keep the task's temporary directory as `tmpdir`
    with controller_imports():
        from ansible.plugins.loader import shell_loader
    assert shell_loader.get("sh").tmpdir is None
