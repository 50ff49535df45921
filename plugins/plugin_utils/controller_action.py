# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""The action plugin of a module that, for the controller's own work, runs in ansible-playbook's
own process (the action plugins mlx_files and mlx_picture).

On a Mac, or with become, the module runs as usual. For a task on the controller
(``delegate_to: localhost``, the local connection, as the user running Ansible) the plugin checks
the arguments against the module's own argument spec and calls the module's logic from its
module_utils (one copy of both), instead of starting a module process for a few kilobytes of
work: about 0.3 s per task on a 2-core machine (docs/benchmarks.md).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase


class InProcessOnController(ActionBase):
    """Subclasses set MODULE (the module's FQCN) and ARGUMENT_SPEC (its module_utils'), and
    implement run_in_process()."""

    TRANSFERS_FILES = False
    MODULE = ""
    ARGUMENT_SPEC: dict = {}

    def _in_process(self):
        """The work is the controller's: the local connection, as the user running Ansible."""
        return getattr(self._connection, "transport", None) == "local" and not self._play_context.become

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if not self._in_process():
            result.update(
                self._execute_module(module_name=self.MODULE, module_args=self._task.args, task_vars=task_vars)
            )
            return result
        checked = ArgumentSpecValidator(self.ARGUMENT_SPEC).validate(dict(self._task.args))
        if checked.error_messages:
            raise AnsibleActionFail(f"{self.MODULE.rsplit('.', 1)[-1]}: " + "; ".join(checked.error_messages))
        result.update(self.run_in_process(checked.validated_parameters))
        return result

    def run_in_process(self, params):
        """The module's work, here: its result (a failure as `failed` and `msg`)."""
        raise NotImplementedError
