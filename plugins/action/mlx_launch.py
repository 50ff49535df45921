# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_launch: the module, shown while the job runs (`progress_interval`).

Thin on purpose: plugins/plugin_utils/progress.py runs the module as an async job (time limit:
the job's `timeout`, the SSH check and the clean-up, `mlx_launch.job_limit`), polls it and
prints the ranks' latest `warm-up i/N` / `trial i/N` line at most every `progress_interval`
seconds; without it (0), in check mode or with `async:` on the task, a plain module run. The
documentation is library/mlx_launch.py.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import DEFAULT_SSH_CHECK_TIMEOUT, DEFAULT_TIMEOUT, job_limit
from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import ProgressAction, launch_line


class ActionModule(ProgressAction):
    render = staticmethod(launch_line)

    def job_limit(self, args):
        return job_limit(args.get("timeout", DEFAULT_TIMEOUT), args.get("ssh_check_timeout", DEFAULT_SSH_CHECK_TIMEOUT))
