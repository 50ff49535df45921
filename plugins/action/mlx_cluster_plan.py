# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""Action plugin mlx_cluster_plan: the discovery facts of every Mac + the cluster settings ->
the cluster plan (links, topology, addresses, hostfile, remote paths), returned as ``plan``; the
role keeps it as the host variable ``mlx_cluster_plan`` on every host of the play (set_fact).

Thin on purpose: it gathers each host's ``mlx_cluster`` and coordinator address from
hostvars, then calls the one pure function ``planner.make_plan``. The documentation is
library/mlx_cluster_plan.py (a stub, as for mlx_ssh_targets).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_common, planner
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

_SETTINGS = (
    "ssh",
    "backend",
    "rdma_wanted",
    "rdma_required",
    "rdma_through_docks",
    "ip_pool",
    "exclude_networks",
    "envs",
    "remote_dir",
    "hostfile_name",
    "fallback_backend",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts",) + _SETTINGS)
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        hosts = args.get("hosts")
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            raise AnsibleActionFail("mlx_cluster_plan: hosts must be a list of inventory names")
        hostvars = task_vars.get("hostvars", {})
        facts, coordinators, unknown = {}, {}, []
        for name in hosts:
            if name not in hostvars:
                unknown.append(name)
                continue
            hv = hostvars[name]
            facts[name] = self._templar.template(hv.get("mlx_cluster"))
            coordinators[name] = self._templar.template(
                planner.coordinator(
                    {
                        "mlx_cluster_coordinator_address": hv.get("mlx_cluster_coordinator_address"),
                        "mlx_cluster": facts[name],
                    }
                )
            )
        if unknown:
            raise AnsibleActionFail("mlx_cluster_plan: %s not in the inventory" % ", ".join(unknown))
        settings = {k: args[k] for k in _SETTINGS if k in args}
        settings.update(hosts=list(hosts), coordinators=coordinators)
        for key in ("exclude_networks", "envs"):
            if key in settings and not isinstance(settings[key], (list, tuple)):
                raise AnsibleActionFail("mlx_cluster_plan: %s must be a list" % key)
        if "ssh" in settings and not isinstance(settings["ssh"], Mapping):
            raise AnsibleActionFail("mlx_cluster_plan: ssh must be the targets of mlx_ssh_targets")
        try:
            plan = planner.make_plan(plain(facts), plain(settings))
        except plan_common.PlanError as exc:
            raise AnsibleActionFail("mlx_cluster_plan: %s" % exc.message) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise AnsibleActionFail(
                "mlx_cluster_plan: malformed discovery facts (%s): re-run the discover stage" % exc
            ) from None
        result.update(changed=False, plan=plan)
        return result
