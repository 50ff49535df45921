# -*- coding: utf-8 -*-
"""Filters over plugins/plugin_utils/preflight.py (preflight checks) and the pure helpers of the
plan artifacts, the per-cable checks and the network stage's messages."""

from __future__ import annotations

import ipaddress
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_netcfg, mlx_ports, mlx_power, mlx_wired
from ansible_collections.mlx.cluster.plugins.plugin_utils import model_split, plan_common, planner
from ansible_collections.mlx.cluster.plugins.plugin_utils import ports as port_rules
from ansible_collections.mlx.cluster.plugins.plugin_utils import preflight as preflight_rules
from ansible_collections.mlx.cluster.plugins.plugin_utils.plain import plain

# Each filter is documented in its own file beside this one (plugins/filter/<name>.yml):
# `ansible-doc -t filter mlx.cluster.<name>`.


def mlx_preflight(facts_by_host, links=None, topology=None, settings=None, ip_plan=None):
    if not isinstance(facts_by_host, dict):
        raise AnsibleFilterError("mlx_preflight: expects a dict of host -> mlx_cluster facts")
    try:
        return preflight_rules.preflight(facts_by_host, links, topology, settings, ip_plan)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"mlx_preflight: malformed facts ({exc})") from exc


def mlx_preflight_report(problems, only=None):
    if not isinstance(problems, list):
        raise AnsibleFilterError("mlx_preflight_report: expects the list from mlx_preflight")
    if only not in (None, "error", "warning"):
        raise AnsibleFilterError(f"mlx_preflight_report: only is error or warning, not {only!r}")
    return preflight_rules.report(problems, only)


def mlx_memory_fit(weights, hosts, hw_by_host, modes, headroom, model="the model"):
    if not isinstance(weights, dict) or "layer_bytes" not in weights:
        raise AnsibleFilterError(
            "mlx_memory_fit: expects the weights returned by mlx.cluster.model_manifest with weights: true"
        )
    if not isinstance(hw_by_host, dict) or not isinstance(modes, (list, tuple)):
        raise AnsibleFilterError("mlx_memory_fit: hw_by_host must be a dict host -> mlx_cluster.hw, modes a list")
    try:
        return preflight_rules.memory_fit(weights, list(hosts), hw_by_host, list(modes), float(headroom), str(model))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"mlx_memory_fit: malformed input ({exc})") from exc


def mlx_model_split(dims, ranks, modes, model="the model", index=True):
    if dims is not None and not isinstance(dims, dict):
        raise AnsibleFilterError(
            "mlx_model_split: expects weights.dims as returned by mlx.cluster.model_manifest "
            "with weights: true (or null)"
        )
    if not isinstance(modes, (list, tuple)) or not set(modes) <= set(model_split.MODES):
        raise AnsibleFilterError(f"mlx_model_split: modes must be a list of {', '.join(model_split.MODES)}")
    try:
        return model_split.split_problems(plain(dims), int(ranks), list(modes), str(model), bool(index))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"mlx_model_split: malformed input ({exc})") from exc


def mlx_coordinator(host_vars):
    """The address a host is reached on for coordination: the inventory override, else
    the address of the interface Ansible connects over (from mlx_cluster facts)."""
    try:
        return planner.coordinator(host_vars)
    except AttributeError as exc:
        raise AnsibleFilterError("mlx_coordinator: expects hostvars[host]") from exc


def mlx_plan_artifact(plan):
    """The plan as written to plan.json: only what follows from the wiring and settings.

    Drops the per-run `kept` markers of the IP plan (true once addresses exist), so an
    unchanged cluster writes an unchanged file and a second run reports no change.
    """
    if not isinstance(plan, dict):
        raise AnsibleFilterError("mlx_plan_artifact: expects the mlx_cluster_plan dict")

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "kept"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    out = strip(plan)
    ip_plan = out.get("ip_plan")
    if isinstance(ip_plan, dict) and isinstance(ip_plan.get("excluded"), list) and ip_plan.get("pool"):
        # A /30 of the pool found on a port no cable uses now is the old end of an unplugged or
        # moved cable, which this run's network stage clears: what this run saw, not the wiring
        try:
            pool = ipaddress.ip_network(ip_plan["pool"], strict=False)
            ip_plan["excluded"] = [e for e in ip_plan["excluded"] if not _stale_end(e, pool)]
        except ValueError:
            pass
    return out


def _stale_end(entry, pool):
    try:
        net = ipaddress.ip_network(entry["network"], strict=False)
    except (KeyError, TypeError, ValueError):
        return False
    return entry.get("source") != "exclude" and net.prefixlen == 30 and net.subnet_of(pool)


def mlx_cable_hostfiles(plan, envs=None):
    """One 2-rank hostfile per cable, so each cable can be measured alone.

    `plan` is mlx_cluster_plan. With a jaccl/jaccl-ring backend a cable that carries RDMA
    (the topology's rdma_cables) is measured over its RDMA devices (coordinator: the first
    end's management address); any other cable over the TCP ring on its own /30 addresses.
    Each RDMA cable also gets its ring twin (`ring_file`, `ring_hostfile`: the same cable over
    TCP), which a check runs on when RDMA cannot be brought up and the plan has a ring
    fallback; `ring_file` is null for a cable measured over TCP already.
    """
    try:
        topology = plan.get("topology") or {}
        backend = topology.get("backend")
        rdma_ids = topology.get("rdma_cables")
        coords = plan.get("coordinators") or {}
        out = []
        for cid, c in sorted((plan.get("ip_plan") or {}).get("cables", {}).items()):
            a, b = c["a"], c["b"]
            base = cid.replace(":", "_").replace("~", "__")
            ring = {
                "backend": "ring",
                "envs": list(envs or []),
                "hosts": [
                    {"ssh": a["host"], "ips": [a["address"]], "rdma": []},
                    {"ssh": b["host"], "ips": [b["address"]], "rdma": []},
                ],
            }
            item = {
                "cable": cid,
                "name": f"{a['host']}:{a['iface']} <-> {b['host']}:{b['iface']}",
                "file": base + ".json",
                "hostfile": ring,
                "ring_file": None,
                "ring_hostfile": None,
            }
            if backend in ("jaccl", "jaccl-ring") and (rdma_ids is None or cid in rdma_ids):
                hosts = [
                    {"ssh": a["host"], "ips": [coords.get(a["host"])], "rdma": [None, f"rdma_{a['iface']}"]},
                    {"ssh": b["host"], "ips": [coords.get(b["host"])], "rdma": [f"rdma_{b['iface']}", None]},
                ]
                item.update(
                    hostfile={"backend": "jaccl", "envs": list(envs or []), "hosts": hosts},
                    ring_file=base + "-ring.json",
                    ring_hostfile=ring,
                )
            out.append(item)
        return out
    except (AttributeError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"mlx_cable_hostfiles: malformed plan ({exc})") from exc


def mlx_cable_results(loop_results):
    """[{cable, name, gbps, runs}] from the registered results of the per-cable mlx_launch loops.

    A cable measured more than once (the first pass, then again when it looked slow) is one
    entry: `runs` lists every measurement in order, `gbps` is the best of them (a cable that is
    really slow is slow every time; a momentary slowdown is not the cable's)."""
    out, by_key = [], {}
    for r in loop_results or []:
        if not isinstance(r, dict) or r.get("skipped"):
            continue
        sizes = (r.get("result") or {}).get("results") or []
        item = r.get("item") or {}
        gbps = sizes[-1].get("bus_bandwidth_gbps") if sizes else None
        key = (item.get("cable"), item.get("name"))
        if key not in by_key:
            by_key[key] = {"cable": item.get("cable"), "name": item.get("name"), "gbps": None, "runs": []}
            out.append(by_key[key])
        entry = by_key[key]
        entry["runs"].append(gbps)
        measured = [g for g in entry["runs"] if isinstance(g, (int, float)) and not isinstance(g, bool)]
        entry["gbps"] = max(measured) if measured else None
    return out


def mlx_slow_cables(results, ratio=preflight_rules.SLOW_RATIO):
    """Cables whose bandwidth is below `ratio` x the median of all cables."""
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise AnsibleFilterError("mlx_slow_cables: expects a list of {name, gbps}")
    return preflight_rules.slow_cables(results, ratio)


def mlx_no_answer_msg(no_answer):
    """The failure message for the `no_answer` entries of thunderbolt_links / thunderbolt_ping."""
    if not isinstance(no_answer, list) or not all(isinstance(x, dict) and "problem" in x for x in no_answer):
        raise AnsibleFilterError("mlx_no_answer_msg: expects the no_answer list of thunderbolt_links/_ping")
    return mlx_netcfg.no_answer_msg(no_answer)


def mlx_dropped_out(ip_plan, hosts):
    """Lines naming each Mac that left the run part-way, its cables and the repair."""
    if not isinstance(ip_plan, dict) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("mlx_dropped_out: expects mlx_cluster_plan.ip_plan and a list of hosts")
    try:
        return preflight_rules.dropped_out(ip_plan, hosts)
    except (AttributeError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"mlx_dropped_out: malformed plan ({exc})") from exc


def mlx_links_in_place(facts, links, protected=(), pool=None, host_routes=True, verify=True, peers=None):
    """True when a Mac's discovery (mlx_cluster_facts with probe_links) shows its planned links
    exactly in place (thunderbolt_links would run nothing: same bridge, now and in its
    definition, services, addresses, routes; no stale cluster address) and, with `verify`, every planned link
    answered a ping
    between its planned addresses. Discovery pings each cable once, from the end holding the
    /30's first address: `peers` ({host: mlx_cluster facts}, e.g. hostvars) gives the other
    end's ping for cables this Mac did not ping. False on any doubt (no links_state, a refusal
    the module must report, a peer without facts): the network stage then applies and
    verifies as usual."""
    if not isinstance(facts, dict) or not isinstance(links, list):
        raise AnsibleFilterError("mlx_links_in_place: expects the mlx_cluster fact and this Mac's planned links")
    state = facts.get("links_state")
    if not links or not isinstance(state, dict) or facts.get("services") is None:
        return False
    netcfg = mlx_netcfg
    try:
        hwports = (facts.get("thunderbolt") or {}).get("hardware_ports") or {}
        interfaces = facts.get("interfaces") or {}
        # the bridge's definition (what macOS rebuilds it from at boot): unknown is a doubt
        persistent = ((facts.get("thunderbolt") or {}).get("bridge") or {}).get("persistent_members")
        if persistent is None:
            return False
        stale = netcfg.stale_ports(links, hwports, interfaces, pool, protected=protected)
        actions, _warnings, _before, _after = netcfg.plan_links(
            links,
            hwports,
            facts["services"],
            interfaces,
            state.get("service_info") or {},
            state.get("routes") or {},
            protected=protected,
            host_routes=host_routes,
            stale=stale,
            persistent={"members": persistent},
        )
    except (netcfg.LinkPlanError, KeyError, TypeError, ValueError, AttributeError):
        return False
    if actions:
        return False
    if verify:
        for link in links:
            if not _answered(link, state, peers, netcfg):
                return False
    return True


def _answered(link, state, peers, netcfg):
    """The discovery ping of `link`'s cable answered between its planned addresses, from
    whichever end pinged it (this Mac's links_state, or the peer's in `peers`)."""
    mine, theirs = link.get("address"), link.get("peer_address")
    if netcfg.pings_from_here(mine, link.get("prefix", 30)):
        seen = (state.get("pings") or {}).get(link.get("iface")) or {}
        return bool(seen.get("ok")) and seen.get("address") == mine and seen.get("peer_address") == theirs
    try:
        seen = (peers[link.get("peer_host")].get("links_state") or {}).get("pings") or {}
    except (KeyError, TypeError, AttributeError):  # no peers, no such peer, a peer without facts
        return False
    seen = seen.get(link.get("peer_iface")) or {}
    return bool(seen.get("ok")) and seen.get("address") == theirs and seen.get("peer_address") == mine


def mlx_files_differ(files, mode="0600"):
    """The entries of `files` ([{path, content}], as mlx_files takes them) whose file on the
    controller is missing or differs in content (UTF-8) or mode: a re-run that would write
    nothing skips the module run."""
    if not isinstance(files, list) or not all(isinstance(f, dict) and "path" in f and "content" in f for f in files):
        raise AnsibleFilterError("mlx_files_differ: expects a list of {path, content}")
    out = []
    for f in files:
        try:
            with open(os.path.expanduser(f["path"]), "rb") as fh:
                same = fh.read() == str(f["content"]).encode("utf-8")
            same = same and "%04o" % (os.stat(os.path.expanduser(f["path"])).st_mode & 0o7777) == f.get("mode", mode)
        except OSError:
            same = False
        if not same:
            out.append(f)
    return out


def mlx_power_plan(power, settings):
    """What `pmset -c` would change on a Mac, from its discovered power settings (`mlx_cluster.power`:
    {source: {setting: value}}) and the settings asked for: {source, changes, unsupported,
    current} (mlx_power.plan_power), or None when discovery could not read them (the power
    stage then runs its module, which reads them itself). Bad settings fail, naming them."""
    try:
        settings = mlx_power.check_settings(plain(settings))
    except ValueError as exc:
        raise AnsibleFilterError(f"mlx_power_plan: power_settings: {exc}") from None
    power = plain(power)
    if power is None:
        return None
    if not isinstance(power, dict):
        raise AnsibleFilterError("mlx_power_plan: expects the mlx_cluster.power fact ({source: {setting: value}})")
    try:
        return mlx_power.plan_power(power, settings)
    except ValueError:
        return None  # no AC settings seen: let the module read and say so


def mlx_wired_limit_in_place(hw, files, setting):
    """True when discovery (`mlx_cluster.hw`, `mlx_cluster.files`) shows a Mac's GPU wired limit
    and its LaunchDaemon already as `setting` (mlx_cluster_wired_limit) asks
    (mlx_wired.discovered_in_place); any doubt is False and the power stage runs its module."""
    hw, files = plain(hw), plain(files)
    if hw is not None and not isinstance(hw, dict) or files is not None and not isinstance(files, dict):
        raise AnsibleFilterError("mlx_wired_limit_in_place: expects mlx_cluster.hw and mlx_cluster.files (dicts)")
    return mlx_wired.discovered_in_place(str(plain(setting)), hw, files)


def mlx_play_hosts(hosts, play_tags, run_tags=("all",), skip_tags=()):
    """`hosts` when the tag selection of this run (--tags / --skip-tags: ansible_run_tags,
    ansible_skip_tags) runs the tasks of a play tagged `play_tags`, else [] (the play matches
    no host and is skipped whole). Ansible would still run the argument validation each role
    gets (tagged always) on every host of a play none of whose tasks run. The rule is
    planner.stage_runs, the one discovery uses to know what later stages need."""
    try:
        return hosts if planner.stage_runs(play_tags, run_tags, skip_tags) else []
    except plan_common.PlanError as exc:
        raise AnsibleFilterError("mlx_play_hosts: %s" % exc.message) from exc


def mlx_unknown_tags(run_tags, skip_tags=()):
    """planner.unknown_tags: the messages for tags no stage has."""
    if not isinstance(run_tags, (list, tuple)) or not isinstance(skip_tags or [], (list, tuple)):
        raise AnsibleFilterError("mlx_unknown_tags: expects ansible_run_tags and ansible_skip_tags as lists")
    return planner.unknown_tags(run_tags, skip_tags)


def mlx_port_endpoints(hostfile, starting_port=None):
    port = mlx_ports.STARTING_PORT if starting_port is None else starting_port
    try:
        if isinstance(hostfile, (list, tuple)):
            return mlx_ports.merged_endpoints([plain(h) for h in hostfile if h], int(port))
        return mlx_ports.endpoints(plain(hostfile), int(port))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"mlx_port_endpoints: {exc}") from exc


def mlx_port_problems(endpoints, listened, connected, timeout=5, launched=None):
    if (
        not isinstance(endpoints, list)
        or not isinstance(listened, dict)
        or not isinstance(connected, dict)
        or not isinstance(launched or {}, dict)
    ):
        raise AnsibleFilterError(
            "mlx_port_problems: expects the endpoints (mlx_port_endpoints), then dicts host -> "
            "the listen result, host -> the connect results and (optional) host -> the connect's "
            "launchd result of mlx.cluster.mlx_port_probe"
        )
    try:
        return port_rules.port_problems(
            plain(endpoints), plain(listened), plain(connected), int(timeout), plain(launched or {})
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"mlx_port_problems: malformed input ({exc})") from exc


class FilterModule:
    def filters(self):
        return {
            "mlx_preflight": mlx_preflight,
            "mlx_preflight_report": mlx_preflight_report,
            "mlx_coordinator": mlx_coordinator,
            "mlx_plan_artifact": mlx_plan_artifact,
            "mlx_cable_hostfiles": mlx_cable_hostfiles,
            "mlx_slow_cables": mlx_slow_cables,
            "mlx_cable_results": mlx_cable_results,
            "mlx_no_answer_msg": mlx_no_answer_msg,
            "mlx_dropped_out": mlx_dropped_out,
            "mlx_links_in_place": mlx_links_in_place,
            "mlx_play_hosts": mlx_play_hosts,
            "mlx_unknown_tags": mlx_unknown_tags,
            "mlx_files_differ": mlx_files_differ,
            "mlx_memory_fit": mlx_memory_fit,
            "mlx_model_split": mlx_model_split,
            "mlx_wired_limit_in_place": mlx_wired_limit_in_place,
            "mlx_power_plan": mlx_power_plan,
            "mlx_port_endpoints": mlx_port_endpoints,
            "mlx_port_problems": mlx_port_problems,
        }
