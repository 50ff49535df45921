# -*- coding: utf-8 -*-
"""Filters over plugins/module_utils/mlx_server.py: the server's LaunchDaemon plist, from the
one writer the port probe's launchd job uses too."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import launchd_plist
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

# Each filter is documented in its own file beside this one (plugins/filter/<name>.yml):
# `ansible-doc -t filter mlx.cluster.<name>`.


def mlx_launchd_plist(argv, label, user, home, workdir, log, exit_timeout, keep_alive=True, comment=""):
    if not isinstance(argv, (list, tuple)) or not argv:
        raise AnsibleFilterError("mlx_launchd_plist: expects the job's argv, a non-empty list")
    try:
        return launchd_plist(
            str(label),
            [str(a) for a in plain(list(argv))],
            user=str(user),
            home=str(home),
            workdir=str(workdir),
            log=str(log),
            exit_timeout=int(exit_timeout),
            keep_alive=bool(keep_alive),
            comment=str(comment or ""),
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"mlx_launchd_plist: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"mlx_launchd_plist": mlx_launchd_plist}
