# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_files: on a Mac, runs the module mlx_files as usual; the controller's own
files it writes in ansible-playbook's own process (plugin_utils/controller_action.py, with
module_utils/mlx_files.py: one copy of the argument spec and of the logic). The documentation is
library/mlx_files.py.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import ARGUMENT_SPEC, FilesError, write_files
from ansible_collections.mlx.cluster.plugins.plugin_utils.controller_action import InProcessOnController


class ActionModule(InProcessOnController):
    MODULE = "mlx.cluster.mlx_files"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_in_process(self, params):
        try:
            return write_files(
                params["files"],
                params["directory_mode"],
                check_mode=bool(self._task.check_mode),
                diff=bool(self._task.diff),
            )
        except FilesError as exc:
            return dict(failed=True, msg=exc.msg, **({"path": exc.path} if exc.path else {}))
