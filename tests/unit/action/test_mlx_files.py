"""Action plugin mlx_files: the controller's files in-process, a Mac's through the module."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.mlx.cluster.plugins.action.mlx_files import ActionModule


@pytest.fixture
def _action(make_action):
    def make(args, **kw):
        return make_action(ActionModule, args, module_result={"changed": True, "files": []}, **kw)

    return make


def test_controller_files_are_written_in_process(tmp_path, _action):
    path = tmp_path / "artifacts" / "hostfile.json"
    action = _action({"files": [{"path": str(path), "content": "{}\n"}]})
    res = action.run(task_vars={})
    assert res["changed"] and path.read_text() == "{}\n"
    action._execute_module.assert_not_called()
    assert not _action({"files": [{"path": str(path), "content": "{}\n"}]}).run(task_vars={})["changed"]


def test_check_mode_in_process_writes_nothing(tmp_path, _action):
    path = tmp_path / "f"
    res = _action({"files": [{"path": str(path), "content": "x"}]}, check_mode=True, diff=True).run(task_vars={})
    assert res["changed"] and res["diff"][0]["after"] == "x" and not path.exists()


@pytest.mark.parametrize("transport, become", [("ssh", False), ("local", True)], ids=["mac", "become"])
def test_a_mac_or_become_runs_the_module(tmp_path, transport, become, _action):
    action = _action({"files": [{"path": str(tmp_path / "f"), "content": "x"}]}, transport=transport, become=become)
    action.run(task_vars={})
    action._execute_module.assert_called_once()
    assert action._execute_module.call_args.kwargs["module_name"] == "mlx.cluster.mlx_files"
    assert not (tmp_path / "f").exists()


def test_bad_arguments_fail_as_the_module_would(tmp_path, _action):
    with pytest.raises(AnsibleActionFail, match="files"):
        _action({"files": [{"content": "x"}]}).run(task_vars={})


def test_a_write_error_is_a_failed_result_naming_the_file(tmp_path, _action):
    (tmp_path / "d").mkdir()
    res = _action({"files": [{"path": str(tmp_path / "d"), "content": "x"}]}).run(task_vars={})
    assert res["failed"] and "move it away" in res["msg"] and res["path"] == str(tmp_path / "d")
