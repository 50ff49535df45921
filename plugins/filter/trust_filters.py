# -*- coding: utf-8 -*-
"""Filters over plugins/module_utils/mlx_trust.py: the authorized_keys line of a cluster key."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_trust import authorized_line
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

# Each filter is documented in its own file beside this one (plugins/filter/<name>.yml):
# `ansible-doc -t filter mlx.cluster.<name>`.


def sender_addresses(facts, cables):
    """Every IPv4 address the sending Mac may connect from: its interfaces' (discovery) and its
    ends of the planned cables (addressed in this run, maybe after discovery); no loopback."""
    out = []
    for iface in ((facts or {}).get("interfaces") or {}).values():
        out += [a.get("address") for a in (iface or {}).get("ipv4") or [] if isinstance(a, dict)]
    out.append(((facts or {}).get("mgmt") or {}).get("address"))
    out += [c.get("address") for c in cables or [] if isinstance(c, dict)]
    return sorted({a for a in out if isinstance(a, str) and a and not a.startswith("127.")})


def mlx_cluster_key_line(public_key, sender, facts, cables, command_file, directory, rsync_path=""):
    try:
        return authorized_line(
            public_key, sender_addresses(plain(facts), plain(cables)), command_file, directory, rsync_path or ""
        )
    except (ValueError, AttributeError, TypeError) as exc:
        raise AnsibleFilterError(f"mlx_cluster_key_line: the cluster key of {sender}: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"mlx_cluster_key_line": mlx_cluster_key_line}
