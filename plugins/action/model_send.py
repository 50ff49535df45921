# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin model_send: the module, shown while it sends (`progress_interval`).

As model_rsync's: plugins/plugin_utils/progress.py runs the module as a plain task would and,
while it sends, reads its progress file and prints `[m2 -> m1] model: 1.2/3.4 GB (35%),
850.0 MB/s` at most every `progress_interval` seconds; without it (0), in check mode or with
`async:` on the task, a plain module run. The documentation is library/model_send.py.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.plugin_utils.progress import ProgressAction, copy_line


class ActionModule(ProgressAction):
    render = staticmethod(copy_line)
