# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_picture: on a Mac, runs the module mlx_picture as usual; the controller's
own picture it renders in ansible-playbook's own process (plugin_utils/controller_action.py, with
module_utils/mlx_picture.py: one copy of the argument spec and of the logic), instead of starting
a module process to run Graphviz once. The documentation is library/mlx_picture.py.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_picture import ARGUMENT_SPEC, PictureError, render
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import Runner
from ansible_collections.mlx.cluster.plugins.plugin_utils.controller_action import InProcessOnController


class ActionModule(InProcessOnController):
    MODULE = "mlx.cluster.mlx_picture"
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run_in_process(self, params):
        try:
            return render(
                params["src"],
                params["dest"],
                params["dot"],
                Runner(params["command_timeout"]),
                check_mode=bool(self._task.check_mode),
            )
        except PictureError as exc:
            return dict(failed=True, msg=exc.msg)
