# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_picture: on a Mac, runs the module mlx_picture as usual; for the
controller's own picture (``delegate_to: localhost``, the local connection, no become) it does
the same work in ansible-playbook's own process (module_utils/mlx_picture.py: one copy of the
argument spec and of the logic), instead of starting a module process to run Graphviz once. The
documentation is library/mlx_picture.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_picture import ARGUMENT_SPEC, PictureError, render
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import Runner


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _in_process(self):
        """The picture is the controller's: the local connection, as the user running Ansible."""
        return getattr(self._connection, "transport", None) == "local" and not self._play_context.become

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if not self._in_process():
            result.update(self._execute_module(module_name="mlx.cluster.mlx_picture", module_args=self._task.args,
                                               task_vars=task_vars))
            return result
        checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(self._task.args))
        if checked.error_messages:
            raise AnsibleActionFail("mlx_picture: " + "; ".join(checked.error_messages))
        p = checked.validated_parameters
        try:
            result.update(render(p["src"], p["dest"], p["dot"], Runner(p["command_timeout"]),
                                 check_mode=bool(self._task.check_mode)))
        except PictureError as exc:
            result.update(failed=True, msg=exc.msg)
        return result
