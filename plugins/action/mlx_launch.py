# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_launch: the module, shown while the job runs (`progress_interval`).

Thin on purpose: plugins/plugin_utils/progress.py runs the module as a plain task would and,
while it runs, reads its progress file and prints the ranks' latest `warm-up i/N` / `trial i/N`
line at most every `progress_interval` seconds; without it (0), in check mode or with `async:`
on the task, a plain module run. The documentation is library/mlx_launch.py.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import ProgressAction, launch_line


class ActionModule(ProgressAction):
    render = staticmethod(launch_line)
