# -*- coding: utf-8 -*-
"""Filters over the planner's steps in plugins/plugin_utils/, one module each: mlx_links
(plan_cables), mlx_topology (plan_topology), mlx_ip_plan (plan_addresses), mlx_hostfile
(plan_hostfile), mlx_dot (plan_picture), mlx_discovery_request, mlx_hostfile_writes and
mlx_bench_backends (planner, the plan step); and over plugin_utils/sync_plan.py: mlx_sync_rounds,
mlx_sync_copied, mlx_sync_by_cable.

Thin on purpose (as ansible.utils' ipsubnet): check the argument types, call the pure
function, turn its PlanError into AnsibleFilterError carrying the filter's name. The
documentation of each filter is its sidecar file (mlx_links.yml, ...), as ansible-core does.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_common,
    plan_hostfile,
    plan_picture,
    plan_topology,
    planner,
    sync_plan,
)
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain


def _check(filter_name, arg, value, types, what):
    if not isinstance(value, types):
        raise AnsibleFilterError("%s: %s must be %s, got %s" % (filter_name, arg, what, type(value).__name__))


def _call(filter_name, function, *args, **kwargs):
    try:
        return function(*[plain(a) for a in args], **{k: plain(v) for k, v in kwargs.items()})
    except plan_common.PlanError as exc:
        raise AnsibleFilterError("%s: %s" % (filter_name, exc.message)) from None
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s: %s" % (filter_name, exc)) from None


def mlx_links(facts_by_host):
    """{host: mlx_thunderbolt facts} -> {cables, one_sided, external, problems, warnings}."""
    _check("mlx_links", "input", facts_by_host, Mapping, "a mapping host -> mlx_thunderbolt facts")
    return _call("mlx_links", plan_cables.links, facts_by_host)


def mlx_topology(links, hosts, rdma=False, backend="auto", rdma_through_docks=False, rdma_required=False):
    """links -> {hosts, mesh, ring, ring_width, backend, backend_reason, missing, message, ...}."""
    _check("mlx_topology", "input", links, Mapping, "the result of mlx_links")
    _check("mlx_topology", "hosts", hosts, (list, tuple), "a list of inventory hostnames")
    _check("mlx_topology", "rdma", rdma, (bool, Mapping), "a boolean, a mapping host -> bool or host -> mlx_rdma facts")
    if backend is not None:
        _check("mlx_topology", "backend", backend, str, "auto, jaccl, jaccl-ring or ring")
    _check("mlx_topology", "rdma_through_docks", rdma_through_docks, bool, "true or false")
    _check("mlx_topology", "rdma_required", rdma_required, bool, "true or false")
    return _call(
        "mlx_topology",
        plan_topology.topology,
        links,
        hosts,
        rdma=rdma,
        backend=backend,
        rdma_through_docks=rdma_through_docks,
        rdma_required=rdma_required,
    )


def mlx_ip_plan(links, pool=None, interfaces=None, exclude=None, current=None):
    """links -> {pool, cables: {id: {network, a, b}}, hosts: {host: [...]}}."""
    _check("mlx_ip_plan", "input", links, Mapping, "the result of mlx_links")
    if pool is None:
        pool = plan_addresses.DEFAULT_POOL
    _check("mlx_ip_plan", "pool", pool, str, "an IPv4 CIDR string")
    if interfaces is not None:
        _check("mlx_ip_plan", "interfaces", interfaces, Mapping, "a mapping host -> interfaces")
    if exclude is None:
        exclude = []
    _check("mlx_ip_plan", "exclude", exclude, (list, tuple), "a list of CIDR strings")
    if current is not None:
        _check("mlx_ip_plan", "current", current, Mapping, "a mapping host -> {iface: addresses}")
    return _call(
        "mlx_ip_plan", plan_addresses.ip_plan, links, pool=pool, interfaces=interfaces, exclude=exclude, current=current
    )


def mlx_hostfile(topology, plan, coordinators=None, envs=None, backend=None, coordinator=None):
    """topology -> the dict `mlx.launch --hostfile` reads."""
    _check("mlx_hostfile", "input", topology, Mapping, "the result of mlx_topology")
    _check("mlx_hostfile", "plan", plan, Mapping, "the result of mlx_ip_plan")
    if coordinators is None:
        coordinators = coordinator  # the name design.md first used
    if coordinators is not None:
        _check("mlx_hostfile", "coordinators", coordinators, Mapping, "a mapping host -> address")
    if envs is None:
        envs = []
    _check("mlx_hostfile", "envs", envs, (list, tuple), "a list of NAME=value strings")
    if backend is not None:
        _check("mlx_hostfile", "backend", backend, str, "jaccl, jaccl-ring or ring")
    return _call(
        "mlx_hostfile", plan_hostfile.hostfile, topology, plan, coordinators=coordinators, envs=envs, backend=backend
    )


def mlx_discovery_request(run_tags, skip_tags=(), remote_dir="", hostfile_name="", wired_limit=""):
    """ansible_run_tags -> {probe_links, probe_sudo, read_power, read_updates, read_files}: what discovery reads
    for the later stages."""
    _check("mlx_discovery_request", "input", run_tags, (list, tuple), "ansible_run_tags")
    _check("mlx_discovery_request", "skip_tags", skip_tags, (list, tuple), "ansible_skip_tags")
    _check("mlx_discovery_request", "remote_dir", remote_dir, str, "mlx_cluster_remote_dir (a path or '')")
    _check("mlx_discovery_request", "hostfile_name", hostfile_name, str, "a file name or ''")
    _check(
        "mlx_discovery_request", "wired_limit", wired_limit, (str, int), "mlx_cluster_wired_limit ('', auto, off, MB)"
    )
    return _call(
        "mlx_discovery_request",
        planner.discovery_request,
        run_tags,
        skip_tags,
        remote_dir,
        hostfile_name or planner.HOSTFILE_NAME,
        str(wired_limit),
    )


def mlx_dot(links, topology=None, plan=None):
    """links -> Graphviz DOT text."""
    _check("mlx_dot", "input", links, Mapping, "the result of mlx_links")
    if topology is not None:
        _check("mlx_dot", "topology", topology, Mapping, "the result of mlx_topology")
    if plan is not None:
        _check("mlx_dot", "plan", plan, Mapping, "the result of mlx_ip_plan")
    return _call("mlx_dot", plan_picture.dot, links, topology=topology, plan=plan)


def mlx_hostfile_writes(plan, files=None):
    """planner.hostfile_writes: the hostfile a Mac needs written ([] when it is right)."""
    _check("mlx_hostfile_writes", "input", plan, Mapping, "the cluster plan (mlx_cluster_plan)")
    if files is not None:
        _check("mlx_hostfile_writes", "files", files, Mapping, "discovery's files fact ({path: {sha256, mode}})")
    return _call("mlx_hostfile_writes", planner.hostfile_writes, plan, files)


def mlx_bench_backends(plan, backends=None):
    """planner.side_by_side: the hostfile of each backend benchmark_backends lists."""
    _check("mlx_bench_backends", "input", plan, Mapping, "the cluster plan (mlx_cluster_plan)")
    return _call("mlx_bench_backends", planner.side_by_side, plan, [] if backends is None else backends)


def mlx_sync_rounds(plan, source=None, hosts=None, fanout=0, files=None, spread=False):
    """the cluster plan -> the model's tree: {rounds: [[{dest, src, path, via, address, split, ...}]] by
    hops, copies, depth, lan, warnings}."""
    _check("mlx_sync_rounds", "input", plan, Mapping, "the cluster plan (mlx_cluster_plan)")
    if source is not None:
        _check("mlx_sync_rounds", "source", source, str, "the inventory name of the Mac that has the model")
    source = source or None  # empty: the controller
    if hosts is not None:
        _check("mlx_sync_rounds", "hosts", hosts, (list, tuple), "a list of inventory names")
    _check("mlx_sync_rounds", "fanout", fanout, int, "a number of copies (0 = no limit)")
    if files is not None:
        _check("mlx_sync_rounds", "files", files, Mapping, "the model's files {relpath: {size, mtime}}")
    _check("mlx_sync_rounds", "spread", spread, bool, "true when each copy uses every cable of its pair")
    return _call(
        "mlx_sync_rounds",
        sync_plan.plan_rounds,
        plan,
        source=source,
        hosts=hosts,
        fanout=fanout,
        files=files,
        spread=spread,
    )


def mlx_sync_copied(source_files, hosts, before, received, sent=None):
    """the source's manifest files -> what the models stage moved to each Mac in this run:
    {host: {bytes, files, via}} (sync_plan.copied)."""
    _check("mlx_sync_copied", "input", source_files, Mapping, "the source manifest's files {relpath: {size}}")
    _check("mlx_sync_copied", "hosts", hosts, (list, tuple), "a list of inventory names")
    _check("mlx_sync_copied", "before", before, Mapping, "{host: model_manifest's result before the copy}")
    _check("mlx_sync_copied", "received", received, Mapping, "{host: model_receive's finished result}")
    if sent is not None:
        _check("mlx_sync_copied", "sent", sent, Mapping, "{host: [model_send's cables entries]}")
    return _call("mlx_sync_copied", sync_plan.copied, source_files, list(hosts), before, received, sent)


def mlx_sync_by_cable(copies, host, play_hosts):
    """the tree's copies -> whether `host` gets its copy over a cable without ssh in this run
    (sync_plan.receives_by_cable)."""
    _check("mlx_sync_by_cable", "input", copies, Mapping, "the copies of mlx_sync_rounds {host: copy}")
    _check("mlx_sync_by_cable", "host", host, str, "an inventory name")
    _check("mlx_sync_by_cable", "play_hosts", play_hosts, (list, tuple), "ansible_play_hosts")
    return sync_plan.receives_by_cable(copies, host, list(play_hosts))


class FilterModule:
    """mlx-cluster planner filters."""

    def filters(self):
        return {
            "mlx_links": mlx_links,
            "mlx_topology": mlx_topology,
            "mlx_ip_plan": mlx_ip_plan,
            "mlx_hostfile": mlx_hostfile,
            "mlx_dot": mlx_dot,
            "mlx_discovery_request": mlx_discovery_request,
            "mlx_sync_rounds": mlx_sync_rounds,
            "mlx_sync_copied": mlx_sync_copied,
            "mlx_sync_by_cable": mlx_sync_by_cable,
            "mlx_hostfile_writes": mlx_hostfile_writes,
            "mlx_bench_backends": mlx_bench_backends,
        }
