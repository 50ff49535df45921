# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_files: on a Mac, runs the module mlx_files as usual; for the controller's
own files (``delegate_to: localhost``, the local connection, no become) it does the same work
in ansible-playbook's own process (module_utils/mlx_files.py: one copy of the argument spec and
of the logic), instead of starting a module process to write a few kilobytes: about 0.3 s per
task on a 2-core machine (docs/benchmarks.md). The documentation is library/mlx_files.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import ARGUMENT_SPEC, FilesError, write_files


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _in_process(self):
        """The files are the controller's: the local connection, as the user running Ansible."""
        return getattr(self._connection, "transport", None) == "local" and not self._play_context.become

    def run(self, tmp=None, task_vars=None):
        if not self._in_process():
            result = super().run(tmp, task_vars)
            result.update(self._execute_module(module_name="mlx.cluster.mlx_files", module_args=self._task.args,
                                               task_vars=task_vars))
            return result
        result = super().run(tmp, task_vars)
        checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(self._task.args))
        if checked.error_messages:
            raise AnsibleActionFail("mlx_files: " + "; ".join(checked.error_messages))
        try:
            result.update(write_files(checked.validated_parameters["files"],
                                      checked.validated_parameters["directory_mode"],
                                      check_mode=bool(self._task.check_mode), diff=bool(self._task.diff)))
        except FilesError as exc:
            result.update(failed=True, msg=exc.msg, **({"path": exc.path} if exc.path else {}))
        return result
