# -*- coding: utf-8 -*-
"""Pure preflight / RDMA checks over the facts of every host.

`preflight(facts_by_host, links, topology, settings)` returns a list of problems, each
`{severity: "error"|"warning", check, host, port, msg, fix}`; `report(problems)` renders
them as one summary. No I/O: the role gathers facts once and calls these on the
controller.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import SOFTWARE_UPDATE_DOMAIN, UPDATE_KEYS
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import enable_fix
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import (  # noqa: F401 - safe_wired_limit_mb: part of this module's rules
    GIB,
    MIB,
    default_limit_bytes,
    default_share,
    safe_wired_limit_mb,
)
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import cable_name

DEFAULTS = {
    "rdma_wanted": True,  # plan for RDMA (jaccl) when the hardware has it
    "rdma_required": False,  # fail (not warn) when RDMA is not usable everywhere
    "min_macos_rdma": "26.2",
    "min_memory_gb": 0,
    "min_free_disk_gb": 10,
}


def version_tuple(text):
    parts = []
    for piece in str(text or "").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _p(severity, check, host, msg, fix, port=None):
    return {"severity": severity, "check": check, "host": host, "port": port, "msg": msg, "fix": fix}


def _macos_problems(facts_by_host, hosts, versions):
    """A Mac whose macOS version differs from the others'; with one version everywhere, a Mac
    on another build (a beta, a rapid security response or a staged update: RDMA, the
    Thunderbolt driver and Metal change between builds of one version)."""
    problems = []
    counts = Counter(v for v in versions.values() if v)
    if len(counts) > 1:
        majority = counts.most_common(1)[0][0]
        for h in hosts:
            if versions[h] != majority:
                others = ", ".join(x for x in hosts if versions[x] == majority)
                problems.append(
                    _p(
                        "error",
                        "macos_version",
                        h,
                        f"{h} runs macOS {versions[h]} while {others} run {majority}",
                        f"update {h} (System Settings > General > Software Update) so every node runs the same macOS",
                    )
                )
    else:
        # Same version, another build: a beta, a rapid security response or a staged update on
        # one Mac. RDMA, the Thunderbolt driver and Metal change between builds of one version.
        builds = {h: (facts_by_host[h].get("os") or {}).get("build_version") for h in hosts}
        bcounts = Counter(b for b in builds.values() if b)
        if len(bcounts) > 1:
            majority = bcounts.most_common(1)[0][0]
            for h in hosts:
                if builds[h] and builds[h] != majority:
                    others = ", ".join(x for x in hosts if builds[x] == majority)
                    problems.append(
                        _p(
                            "error",
                            "macos_build",
                            h,
                            f"{h} runs macOS {versions[h]} build {builds[h]} while {others} run build {majority}",
                            f"install the same build on every Mac: on {h}, turn Beta Updates off "
                            f"(System Settings > General > Software Update) and update, or update the "
                            f"others to build {builds[h]}",
                        )
                    )
    return problems


def preflight(facts_by_host, links=None, topology=None, settings=None, ip_plan=None):
    s = dict(DEFAULTS, **(settings or {}))
    rdma_sev = "error" if s["rdma_required"] else "warning"
    problems = []
    hosts = sorted(facts_by_host)

    # macOS versions: equal everywhere (and the same build), new enough for RDMA where wanted.
    versions = {h: (facts_by_host[h].get("os") or {}).get("product_version") for h in hosts}
    problems.extend(_macos_problems(facts_by_host, hosts, versions))
    cabled = _cabled_ifaces(links)
    for h in hosts:
        f = facts_by_host[h]
        if s["rdma_wanted"] and versions[h] and version_tuple(versions[h]) < version_tuple(s["min_macos_rdma"]):
            problems.append(
                _p(
                    rdma_sev,
                    "macos_rdma",
                    h,
                    f"{h} runs macOS {versions[h]}; RDMA over Thunderbolt needs {s['min_macos_rdma']} or newer",
                    f"update {h} to macOS {s['min_macos_rdma']}+",
                )
            )
        problems.extend(
            _rdma_problems(
                h,
                f.get("rdma") or {},
                cabled.get(h, set()),
                rdma_sev,
                s["rdma_wanted"],
                (f.get("os") or {}).get("product_version"),
            )
        )
        problems.extend(_bridge_problems(h, f.get("thunderbolt") or {}, cabled.get(h, set())))
        problems.extend(_resource_problems(h, f, s))
        problems.extend(_update_problems(h, f))
        problems.extend(_cluster_dir_problems(h, f))

    held = _pool_addresses(facts_by_host, (ip_plan or {}).get("pool"))
    problems.extend(_link_problems(links or {}, rdma_sev if s["rdma_wanted"] else "warning", held))
    external = {(e.get("host"), e.get("iface")) for e in (links or {}).get("external") or []}
    problems.extend(_stale_links(facts_by_host, cabled, held, external))
    problems.extend(_unaddressed_cables(facts_by_host, ip_plan))
    if topology and not topology.get("backend"):
        problems.append(
            _p(
                "error",
                "topology",
                None,
                topology.get("message") or "no usable topology",
                topology.get("backend_fix") or _missing_fix(topology),
            )
        )
    elif topology and s["rdma_wanted"] and topology.get("backend_fix"):
        # RDMA was kept off some cable or host: say which backend that leaves, and why.
        problems.append(
            _p(
                "warning",
                "backend",
                None,
                f"backend {topology['backend']}: {topology.get('backend_reason')}",
                topology["backend_fix"],
            )
        )
    return problems


def _cabled_ifaces(links):
    out = {}
    for c in (links or {}).get("cables", []):
        for end in (c["a"], c["b"]):
            if end.get("iface"):
                out.setdefault(end["host"], set()).add(end["iface"])
    return out


def _rdma_problems(host, rdma, cabled, sev, wanted, macos=None):
    if not wanted:
        return []
    out = []
    state = rdma.get("rdma_ctl")
    devices = {d.get("iface"): d for d in rdma.get("devices") or []}
    hung = next((p for p in rdma.get("problems") or [] if p.get("code") == "no_answer"), None)
    if hung:  # an RDMA probe did not answer: what the others would say is unknown
        return [_p(sev, "rdma", host, f"RDMA on {host} is unusable: {hung.get('msg')}", hung.get("fix"))]
    if state == "disabled":
        return [
            _p(
                sev,
                "rdma",
                host,
                f"RDMA is disabled on {host} (rdma_ctl status: disabled)",
                enable_fix(macos),
            )
        ]
    if not devices:
        return [
            _p(
                sev,
                "rdma",
                host,
                f"{host} has no RDMA devices (ibv_devices is empty)",
                "RDMA needs Thunderbolt 5 hardware and macOS 26.2+; on Thunderbolt 4 use the `ring` backend",
            )
        ]
    for iface in sorted(cabled):
        dev = devices.get(iface)
        if dev is None:
            out.append(
                _p(
                    sev,
                    "rdma_port",
                    host,
                    f"{host}:{iface} is cabled but has no RDMA device rdma_{iface}",
                    "the port is not RDMA-capable (Thunderbolt 4 port or dock); move the cable to a Thunderbolt 5 port",
                    iface,
                )
            )
        elif dev.get("port_state") != "PORT_ACTIVE":
            out.append(
                _p(
                    sev,
                    "rdma_port",
                    host,
                    f"{host}:rdma_{iface} is {dev.get('port_state')}",
                    f"reseat or replace the cable on {host}:{iface}",
                    iface,
                )
            )
    return out


def _bridge_problems(host, tb, cabled):
    bridge = tb.get("bridge") or {}
    # the name System Settings shows: the bridge's service's, in the Mac's language
    shown = bridge.get("service") or "Thunderbolt Bridge"
    by_hand = f"System Settings > Network > ... > Manage Virtual Interfaces > {shown} > remove the ports"
    members = [m for m in bridge.get("members") or [] if m in cabled]
    if bridge.get("exists") and members:
        return [
            _p(
                "warning",
                "thunderbolt_bridge",
                host,
                f"the Thunderbolt Bridge on {host} holds cabled ports {', '.join(members)}: "
                f"bridging a mesh makes a broadcast loop and blocks per-cable addresses",
                f"the network stage takes the ports out of the bridge and out of its definition (or: {by_hand})",
            )
        ]
    # out of the bridge now, but still in its definition: macOS puts them back at boot
    persistent = [m for m in bridge.get("persistent_members") or [] if m in cabled]
    if persistent:
        return [
            _p(
                "warning",
                "thunderbolt_bridge",
                host,
                f"the Thunderbolt Bridge definition on {host} still lists cabled ports {', '.join(persistent)}: "
                f"macOS puts them back into the bridge at the next boot (whether or not its service is enabled)",
                f"the network stage removes them from the definition (or: {by_hand})",
            )
        ]
    return []


def _resource_problems(host, f, s):
    out = []
    mem = (f.get("hw") or {}).get("memsize")
    if mem is not None and s["min_memory_gb"] and mem < s["min_memory_gb"] * 2**30:
        out.append(
            _p(
                "error",
                "memory",
                host,
                f"{host} has {mem / 2**30:.0f} GB of memory, less than the {s['min_memory_gb']} GB required",
                "use a larger model split or a host with more memory",
            )
        )
    free = (f.get("disk") or {}).get("free_bytes")
    if free is not None and free < s["min_free_disk_gb"] * 2**30:
        out.append(
            _p(
                "error",
                "disk",
                host,
                f"{host} has {free / 2**30:.1f} GB free in "
                f"{(f.get('disk') or {}).get('path')}, less than {s['min_free_disk_gb']} GB",
                f"free disk space on {host} or lower preflight_min_free_disk_gb",
            )
        )
    return out


def _update_problems(host, f):
    """A Mac that installs macOS updates by itself restarts when it likes, perhaps in the middle
    of a run, and comes back on another build than the others. Read only: reported, never
    changed. Unknown (never written, unreadable) is not reported; with automatic checking off
    nothing is found to install."""
    updates = f.get("updates") or {}
    if updates.get("install_macos_updates") is not True or updates.get("automatic_check") is False:
        return []
    key = UPDATE_KEYS["install_macos_updates"]
    return [
        _p(
            "warning",
            "macos_updates",
            host,
            f"{host} installs macOS updates by itself ({key} = 1): it restarts to install one when "
            f"it chooses, perhaps in the middle of a run, and then runs another build than the other Macs",
            f"on {host}, System Settings > General > Software Update > Automatic Updates: turn off "
            f'"Install macOS updates" (or `sudo defaults write {SOFTWARE_UPDATE_DOMAIN} {key} -bool false`; '
            f"`sudo softwareupdate --schedule off` stops the automatic checks altogether), then update "
            f"every Mac together, by hand",
        )
    ]


def _cluster_dir_problems(host, f):
    """The toolkit's directory holds the venv, the scripts and the server's files that run as
    the user, and under launchd at every boot: a directory another user can change (or a link
    of theirs on the way) hands them what runs there. Checked by discovery (fact cluster_dir)."""
    d = f.get("cluster_dir") or {}
    if not d.get("problem"):
        return []
    return [
        _p(
            "error",
            "cluster_dir",
            host,
            f"the toolkit's directory {d.get('path')} on {host} is not this user's alone: {d['problem']}",
            f"on {host}, make it (and every folder above it) a directory no other user can write "
            f"(`chmod go-w`, or `sudo chown` it to the login user; a link must be root's), or set "
            f"mlx_cluster_remote_dir to one that is, e.g. ~/mlx-cluster",
        )
    ]


def _link_problems(links, slow_sev, held=None):
    """The planner's wiring findings; `held` ({(host, iface): [address]}, _pool_addresses) names
    the cluster address a port cabled to a Mac outside the inventory still holds."""
    out = []
    for p in links.get("problems") or []:
        out.append(
            _p(
                "error",
                "wiring",
                p.get("host"),
                p.get("msg") or str(p),
                p.get("fix") or "check the cable at both ends and re-run",
                p.get("iface"),
            )
        )
    for u in links.get("unmatched") or []:
        out.append(
            _p(
                "warning",
                "wiring",
                u.get("host"),
                u.get("msg") or str(u),
                u.get("fix") or "gather facts again",
                u.get("iface"),
            )
        )
    for e in links.get("external") or []:
        port = f"{e.get('host')}:{e.get('iface')}"
        kept = (held or {}).get((e.get("host"), e.get("iface")))
        out.append(
            _p(
                "warning",
                "wiring",
                e.get("host"),
                f"{port} is cabled to a Mac not in the inventory ({e.get('peer_name')})"
                + (
                    f"; it still has the cluster address {kept[0]}/30 from when that Mac was in the cluster, "
                    "which the network stage leaves as it is while the cable is plugged in"
                    if kept
                    else ""
                ),
                "add that Mac to the inventory or unplug the cable"
                + (f" (the next network stage then removes {port}'s old address)" if kept else ""),
                e.get("iface"),
            )
        )
    for c in links.get("cables") or []:
        a, b = c["a"], c["b"]
        name = cable_name(a, b)
        if c.get("sighting") == "one-sided":
            out.append(
                _p(
                    "warning",
                    "wiring",
                    a["host"],
                    f"cable {name} is seen from one side only"
                    f"{' (through ' + ', '.join(c.get('via') or []) + ')' if c.get('via') else ''}",
                    "a dock or hub is in the way: cable the Macs directly for full speed and RDMA",
                    a["iface"],
                )
            )
        if c.get("link_class") and c["link_class"] != "TB5":
            out.append(
                _p(
                    slow_sev,
                    "link_speed",
                    a["host"],
                    f"cable {name} runs at {c.get('speed_gbps')} Gb/s ({c['link_class']}); RDMA needs Thunderbolt 5",
                    "use a Thunderbolt 5 cable between Thunderbolt 5 ports (no dock)",
                    a["iface"],
                )
            )
    return out


def _pool_addresses(facts_by_host, pool):
    """{(host, iface): [address]}: the /30 addresses from the cluster's `pool` each port holds
    (none anywhere: a cluster never configured)."""
    if not pool:
        return {}
    try:
        pool = ipaddress.ip_network(pool, strict=False)
    except (TypeError, ValueError):
        return {}
    out = {}
    for h in sorted(facts_by_host):
        for iface, info in sorted((facts_by_host[h].get("interfaces") or {}).items()):
            for a in info.get("ipv4") or []:
                try:
                    addr = ipaddress.ip_address(a.get("address"))
                    prefix = int(a.get("prefix", 32))
                except (TypeError, ValueError):
                    continue
                if addr in pool and prefix == 30:
                    out.setdefault((h, iface), []).append(str(addr))
    return out


def _stale_links(facts_by_host, cabled, held, external=()):
    """Ports that still hold a cluster address but no longer have a cable: unplugged or moved.

    `held` is _pool_addresses(); a port cabled to a Mac outside the inventory (`external`, as
    (host, iface)) has a cable, and its own warning says what it holds. The address's /30
    partner, when another host still has it, names the old peer.
    """
    if not held:
        return []
    owners = {}
    for h, f in facts_by_host.items():
        for iface, info in (f.get("interfaces") or {}).items():
            for a in info.get("ipv4") or []:
                owners[a.get("address")] = (h, iface)
    out = []
    for (h, iface), addrs in sorted(held.items()):
        if iface in cabled.get(h, set()) or (h, iface) in external:
            continue
        for addr in addrs:
            net = ipaddress.ip_network(f"{addr}/30", strict=False)
            partner = [str(x) for x in net.hosts() if str(x) != addr]
            peer = owners.get(partner[0]) if partner else None
            was = f" (it was the cable to {peer[0]}:{peer[1]})" if peer and peer[0] != h else ""
            out.append(
                _p(
                    "warning",
                    "stale_link",
                    h,
                    f"{h}:{iface} still has the cluster address {addr}/30 but no cable is seen on it"
                    f"{was}: unplugged or moved",
                    f"plug the cable back into {h}:{iface}, or run the network stage: it plans the "
                    f"new wiring and removes the old address",
                    iface,
                )
            )
    return out


def dropped_out(ip_plan, hosts):
    """Lines naming the Macs that left a run part-way (unreachable or failed), the cables that
    lead to them, and the repair. `ip_plan` is the plan's ip_plan, `hosts` the Macs gone."""
    lines = []
    for host in sorted(hosts or []):
        ends = sorted(
            f"{peer}:{link['iface']} <-> {host}:{link.get('peer_iface', '?')}"
            for peer, links in sorted(((ip_plan or {}).get("hosts") or {}).items())
            if peer != host
            for link in links
            if link.get("peer_host") == host
        )
        waiting = f"; its cables {', '.join(ends)} are configured on the other side only" if ends else ""
        lines.append(
            f"{host} dropped out of the network stage (unreachable, or failed above){waiting}. "
            f"Fix: bring {host} back (power, LAN, System Settings > General > Sharing > Remote "
            f"Login), then re-run the network stage (--tags network): the Macs that finished are "
            f"left as they are."
        )
    return lines


def _unaddressed_cables(facts_by_host, ip_plan):
    """Cables of a cluster configured before (cluster addresses exist) whose two ends do not
    hold the plan's addresses yet: a new cable, one moved to another port, or a network stage
    that did not finish. The network stage addresses them; until then they carry nothing."""
    ip_plan = ip_plan or {}
    if not _pool_addresses(facts_by_host, ip_plan.get("pool")):
        return []
    out = []
    for _cid, c in sorted((ip_plan.get("cables") or {}).items()):
        if c.get("kept") is not False:
            continue
        a, b = c["a"], c["b"]
        out.append(
            _p(
                "warning",
                "unaddressed_cable",
                a["host"],
                f"cable {cable_name(a, b)} has no cluster address "
                f"at both ends yet: a new cable, one moved from another port, or an unfinished run",
                "the network stage addresses it: run it (ansible-playbook site.yml --tags network)",
                a["iface"],
            )
        )
    return out


def _missing_fix(topology):
    missing = topology.get("missing") or []
    if missing:
        return "add cables " + ", ".join(f"{a} <-> {b}" for a, b in missing) + " (full mesh), or cable a ring"
    return "cable the Macs as a full mesh or a ring"


# A cable whose collective-check bandwidth is below this fraction of the median of all cables is
# slow (net_check_slow_ratio's default; the report falls back to it for results that lack theirs).
SLOW_RATIO = 0.5


def slow_cables(results, ratio=SLOW_RATIO):
    """The per-cable results (``[{name, gbps, ...}]``) whose ``gbps`` is below ``ratio`` x the
    median of all cables, each with ``median_gbps`` added. A cable far slower than its siblings
    is a TB4 cable, a dock, a bad port or not the cable planned."""
    mid = median([r["gbps"] for r in results if is_number(r.get("gbps"))])
    if mid is None:
        return []
    return [dict(r, median_gbps=mid) for r in results if is_number(r.get("gbps")) and r["gbps"] < ratio * mid]


def median(values):
    """The median of a list of numbers; None for an empty one."""
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def is_number(value):
    """True for an int or a float, False for a bool (JSON's true is no number) and the rest."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def report(problems, only=None):
    """One text summary: errors first, then warnings; each line names host, port and fix. With
    `only` (a severity), the lines of that severity alone, under the same count of all, which
    says where the others were shown (the stop on errors, after the whole summary)."""
    if not problems:
        return "preflight: no problems"
    order = {"error": 0, "warning": 1}
    lines = []
    shown = [p for p in problems if only is None or p["severity"] == only]
    for p in sorted(
        shown, key=lambda p: (order.get(p["severity"], 2), p.get("host") or "", p.get("port") or "", p["check"])
    ):
        where = p.get("host") or "cluster"
        if p.get("port"):
            where += f":{p['port']}"
        lines.append(f"[{p['severity'].upper()}] {where}: {p['msg']} -> fix: {p['fix']}")
    n_err = sum(p["severity"] == "error" for p in problems)
    n_warn = sum(p["severity"] == "warning" for p in problems)
    head = f"preflight: {n_err} error(s), {n_warn} warning(s)"
    if len(shown) < len(problems):
        head += f" (the {only}s below; every finding is in the summary above)"
    return "\n".join([head] + lines)


# ---- memory fit: each rank's share of the model against what its Mac's GPU may wire ----

# What the GPU may wire and the safe value to raise it to: module_utils/mlx_wired.py (the
# module mac_wired_limit uses the same numbers on the Macs).


def gpu_limit(hw):
    """(bytes the GPU may wire, how that was decided) from the `hw` facts, or (None, why): the
    sysctl's value when set (Metal's limit follows it exactly), else macOS's default as the Mac
    reports it (`gpu_working_set_mb`, Metal's recommendedMaxWorkingSetSize, read by the env
    stage), else that default estimated low from the memory size, and said to be an estimate."""
    hw = hw or {}
    mem = hw.get("memsize")
    wired = hw.get("wired_limit_mb")
    reported = hw.get("gpu_working_set_mb")
    if wired and mem:
        return min(wired * MIB, mem), f"iogpu.wired_limit_mb={wired}"
    if not wired and is_number(reported) and reported > 0:
        limit = reported * MIB
        return (min(limit, mem) if mem else limit), (
            f"macOS's default as the Mac reports it (Metal's recommendedMaxWorkingSetSize): {reported} MB"
        )
    if not mem:
        return None, "memory size unknown"
    share = default_share(mem)
    return default_limit_bytes(mem), (
        f"iogpu.wired_limit_mb={wired}: macOS's default, estimated as {'2/3' if share < 0.7 else '3/4'} of "
        f"{mem / GIB:.0f} GB until the env stage reads the Mac's own value (its MLX)"
    )


def pipeline_split(layers, ranks):
    """mlx-lm's pipeline split: rank r runs split[r] layers, the low ranks get the extra ones,
    and rank r's layers come after those of ranks r+1 .. size-1 (rank 0 runs the last)."""
    base, extra = divmod(layers, ranks)
    split = [base + (1 if r < extra else 0) for r in range(ranks)]
    return [(sum(split[r + 1 :]), split[r]) for r in range(ranks)]


def rank_bytes(weights, mode, ranks):
    """Bytes of weights each rank holds ([per rank]), or None when `mode` cannot split the model
    over `ranks` (pipeline with fewer layers than ranks). Tensor parallel: the layers divided
    evenly (mlx-lm shards their projections), the shared weights whole on every rank."""
    shared, layer_bytes = weights["shared_bytes"], weights["layer_bytes"]
    if ranks <= 1:
        return [weights["total_bytes"]]
    if mode == "pipeline":
        if len(layer_bytes) < ranks:
            return None
        return [shared + sum(layer_bytes[start : start + n]) for start, n in pipeline_split(len(layer_bytes), ranks)]
    return [shared + -(-sum(layer_bytes) // ranks)] * ranks


def memory_fit(weights, hosts, hw_by_host, modes, headroom, model="the model"):
    """Does each rank's share of the model fit in what its Mac's GPU may wire?

    `weights`: model_manifest's RV(weights); `hosts`: the Macs in rank order; `hw_by_host`:
    {host: mlx_cluster.hw}; `modes`: the modes that will run; `headroom`: the fraction kept
    free beyond the weights (KV cache, activations). Returns {"problems": [preflight problems],
    "ranks": {mode: [{host, rank, bytes, need, limit, how}]}, "fits": {mode: bool}}: an error per
    Mac and mode that does not fit, naming the numbers and the fix.
    """
    problems, table = [], {}
    n = len(hosts)
    fits = {}
    if not weights.get("files") and not weights.get("total_bytes"):
        # no safetensors weights to measure (another format): nothing to say
        return {"problems": [], "ranks": {}, "fits": {mode: True for mode in modes}}
    for mode in modes:
        per_rank = rank_bytes(weights, mode, n)
        if per_rank is None:
            problems.append(
                _p(
                    "error",
                    "memory",
                    None,
                    f"{model} has {len(weights['layer_bytes'])} layer(s): pipeline mode cannot "
                    f"give each of {n} Macs at least one",
                    "run tensor mode, or fewer Macs",
                )
            )
            continue
        rows = []
        for rank, (host, held) in enumerate(zip(hosts, per_rank)):
            limit, how = gpu_limit(hw_by_host.get(host))
            need = int(held * (1 + headroom))
            rows.append({"host": host, "rank": rank, "bytes": held, "need": need, "limit": limit, "how": how})
        table[mode] = rows
        fits[mode] = [r for r in rows if r["limit"] is not None and r["need"] > r["limit"]]
    for mode, over in fits.items():
        others = [m for m in fits if m != mode and not fits[m]]
        for r in over:
            mem = (hw_by_host.get(r["host"]) or {}).get("memsize") or 0
            safe = safe_wired_limit_mb(mem) * MIB if mem else 0
            fixes = []
            if others:
                fixes.append(f"run {others[0]} mode instead (it fits)")
            if safe >= r["need"] > r["limit"]:
                fixes.append(
                    f"raise the GPU's limit on {r['host']}: mlx_cluster_wired_limit: auto and --tags power "
                    f"(iogpu.wired_limit_mb={safe // MIB}, kept across restarts), or once: sudo sysctl "
                    f"iogpu.wired_limit_mb={safe // MIB} (until the next restart)"
                )
            fixes.append("add Macs, or use a smaller quantization of the model")
            problems.append(
                _p(
                    "error",
                    "memory",
                    r["host"],
                    f"{mode} mode over {n} Mac(s) puts {r['bytes'] / GIB:.2f} GB of {model}'s weights on "
                    f"{r['host']} (rank {r['rank']}; {r['need'] / GIB:.2f} GB with {headroom:.0%} headroom), "
                    f"more than its GPU may use: {r['limit'] / GIB:.2f} GB ({r['how']})",
                    "; or ".join(fixes),
                )
            )
    return {"problems": problems, "ranks": table, "fits": {mode: mode in fits and not fits[mode] for mode in modes}}
