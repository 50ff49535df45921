# -*- coding: utf-8 -*-
"""Which commands the facts modules run, and what their exit codes mean.

The three facts modules (`thunderbolt_facts`, `rdma_facts`, `mlx_cluster_facts`) share
this sequence so the narrow modules and the one-shot module cannot drift apart. Nothing
here runs anything: each function gets a `run(argv, required=True)` callable from the
module, which looks argv[0] up on PATH, runs it in the C locale and returns
`(rc, stdout, stderr)`, or None when an optional (`required=False`) tool is missing.

Each function returns `(facts, warnings)`. A required command that fails, or output that
cannot be parsed, raises ParseError whose `command` is the argv joined by spaces (the
module keys its record of rc/stderr by the same text). Every command is bounded in time
(mlx_run): one that does not answer raises CommandTimeout, which fails the Mac, except for
the RDMA probes: a hung one is an RDMA problem of that Mac (collect_rdma), not a failure, and
the power and automatic-update probes (collect_power, collect_updates): their facts are then
unknown, with a warning.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import (
    WIRED_LIMIT_OID,
    cabled_ifaces,
    interfaces_facts,
    mgmt_by_address,
    mgmt_by_iface,
    parse_route_default,
    parse_sw_vers,
    parse_sysctl_hw,
    parse_wired_limit,
    ssh_server_address,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import (
    NETSTAT_ROUTES_ARGV,
    bridges_from_preferences,
    getinfo_argv,
    parse_getinfo,
    parse_netstat_routes,
    ping_argv,
    pings_from_here,
    route_of,
    slash30_partner,
    thunderbolt_devices,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import (
    PMSET_CUSTOM_ARGV,
    UPDATES_ARGV,
    parse_pmset_custom,
    updates_facts,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import rdma_facts
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import CommandTimeout
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import (
    BRIDGE_PORT,
    IFCONFIG_ARGV,
    parse_service_order,
    thunderbolt_facts,
)

SP_ARGV = ["system_profiler", "SPThunderboltDataType", "-json"]
HWPORTS_ARGV = ["networksetup", "-listallhardwareports"]
SERVICE_ORDER_ARGV = ["networksetup", "-listnetworkserviceorder"]
BRIDGE_ARGV = ["ifconfig", "bridge0"]
IBV_DEVICES_ARGV = ["ibv_devices"]
IBV_DEVINFO_ARGV = ["ibv_devinfo", "-v"]
RDMA_CTL_ARGV = ["rdma_ctl", "status"]
ROUTE_ARGV = ["route", "-n", "get", "default"]
SW_VERS_ARGV = ["sw_vers"]
SYSCTL_ARGV = ["sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"]
# apart from SYSCTL_ARGV: an unknown oid fails the whole sysctl run, and this one may be unknown
WIRED_LIMIT_ARGV = ["sysctl", "-n", WIRED_LIMIT_OID]

PMSET_ARGV = PMSET_CUSTOM_ARGV
# Whether sudo runs, without a password (-n: never asks, fails at once instead), what Ansible's
# become runs: `/bin/sh -c ...` as root (sudo become plugin, the shell executable /bin/sh). A
# sudoers rule that allows only some commands (`NOPASSWD: /usr/bin/true`) fails this probe as
# it would fail become, so the preflight checks become on that Mac. Read-only; run only when the
# preflight stage runs (planner.STAGE_NEEDS).
SUDO_PROBE_ARGV = ["sudo", "-n", "/bin/sh", "-c", "true"]

# What collect_cluster() runs on every Mac (`route -n get default` only when SSH_CONNECTION
# does not name the management address; `ibv_devinfo -v` only when `ibv_devices` exists).
# All read-only and independent: a module may start them at once and answer `run` from
# their results, in any order.
# bridge0 is read from the `ifconfig -v` there (it lists every interface): no `ifconfig bridge0`.
CLUSTER_ARGVS = (
    SYSCTL_ARGV,
    WIRED_LIMIT_ARGV,
    SP_ARGV,
    HWPORTS_ARGV,
    SERVICE_ORDER_ARGV,
    IBV_DEVICES_ARGV,
    IBV_DEVINFO_ARGV,
    RDMA_CTL_ARGV,
    IFCONFIG_ARGV,
    SW_VERS_ARGV,
    PMSET_ARGV,
    UPDATES_ARGV,
)


def label(argv):
    """The text that names a command in messages and in ParseError.command."""
    return " ".join(argv)


def side_by_side(runner, cmds, workers):
    """Run read-only commands (resolved argv lists) a few at a time, each bounded by the
    mlx_run.Runner `runner`; the (rc, out, err) of each, in order, the CommandTimeout of one
    that did not answer, or None for one that could not be started (the caller decides: run
    it again where a failure is reported properly, or count it as failed)."""

    def one(cmd):
        try:
            return runner.run(cmd)
        except CommandTimeout as exc:
            return exc
        except OSError:
            return None

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(cmds)))) as pool:
        return list(pool.map(one, cmds))


def module_runner(module, runner, record, done=None):
    """The `run(argv, required=True)` the functions here take, for an AnsibleModule: argv[0]
    looked up on PATH (None when an optional tool is missing), run by the mlx_run.Runner
    `runner` (C locale, bounded), its rc, command and stderr kept in `record` under
    label(argv) (for the failure message). `done` ({label: (cmd, result)}, commands a module
    already ran side by side; result (rc, out, err) or CommandTimeout) answers those without
    running them again. Raises CommandTimeout for a command that did not answer; ParseError
    for one that could not be started."""
    done = dict(done or {})

    def run(argv, required=True):
        key = label(argv)
        if key in done:
            cmd, result = done.pop(key)
        else:
            path = module.get_bin_path(argv[0], required=required)
            if path is None:
                return None
            cmd = [path] + list(argv[1:])
            try:
                result = runner.run(cmd)
            except CommandTimeout as exc:
                result = exc
            except OSError as exc:
                record[key] = {"rc": None, "cmd": cmd, "stderr": str(exc)}
                raise ParseError(key, f"could not be started: {exc}") from None
        if isinstance(result, CommandTimeout):
            record[key] = result.result()
            raise result
        rc, out, err = result
        record[key] = {"rc": rc, "cmd": cmd, "stderr": err}
        return rc, out, err

    return run


def _first_line(text):
    text = (text or "").strip()
    return text.splitlines()[0][:200] if text else "no output"


def required(run, argv):
    """stdout of a command that must succeed; ParseError naming it otherwise."""
    rc, out, err = run(argv)
    if rc != 0:
        raise ParseError(label(argv), f"exited with {rc}: {_first_line(err or out)}")
    return out


def optional(run, argv, warnings, missing_ok=True):
    """stdout of a command we can do without: None (plus a warning) when it fails."""
    result = run(argv, required=not missing_ok)
    if result is None:
        return None
    rc, out, err = result
    if rc != 0:
        warnings.append(f"`{label(argv)}` exited with {rc} ({_first_line(err or out)}); its facts are null")
        return None
    return out


def ifconfig_block(text, name):
    """The lines of interface `name` in `ifconfig` (or `-v`) output; None when it is not listed."""
    lines, inside = [], False
    for line in (text or "").splitlines():
        if line and not line[0].isspace():
            inside = line.startswith(name + ":")
        if inside:
            lines.append(line)
    return "\n".join(lines) + "\n" if lines else None


def collect_thunderbolt(run, model_id=None, raw=None, ifconfig_text=None, preferences=None, interfaces=None):
    """mlx_thunderbolt facts: system_profiler, networksetup (x2), ifconfig bridge0 (or the
    bridge0 block of `ifconfig_text`, `ifconfig -v` already read). `raw`, a dict, receives
    the `-listnetworkserviceorder` text (None when it could not be read). `preferences`, the
    bytes of the network preferences file (mlx_netcfg.read_preferences()), gives
    `bridge.persistent_members`: the members macOS puts into the bridge at the next boot
    (None when not given or not readable). `interfaces`, interfaces_facts() of `ifconfig -v`,
    finds the ports a Mac in another language names otherwise (mlx_tb.port_by_identity)."""
    sp = required(run, SP_ARGV)
    hwports = required(run, HWPORTS_ARGV)
    warnings = []
    order = optional(run, SERVICE_ORDER_ARGV, warnings, missing_ok=False)
    if raw is not None:
        raw["service_order"] = order
    if ifconfig_text is not None:
        bridge, bridge_label = ifconfig_block(ifconfig_text, "bridge0"), label(IFCONFIG_ARGV)
    else:
        bridge_label = label(BRIDGE_ARGV)
        rc, out, err = run(BRIDGE_ARGV)
        if rc == 0:
            bridge = out
        elif "does not exist" in f"{err}{out}":
            bridge = None  # no bridge0 at all: nothing to take apart
        else:
            raise ParseError(bridge_label, f"exited with {rc}: {_first_line(err or out)}")
    try:
        facts = thunderbolt_facts(sp, hwports, bridge, order, model_id=model_id, interfaces=interfaces)
    except ParseError as exc:
        if exc.command == "ifconfig":  # the only ifconfig output read here is bridge0's
            raise ParseError(bridge_label, exc.message) from None
        raise
    facts["warnings"] = warnings + facts["warnings"]
    defined = bridges_from_preferences(preferences) if preferences is not None else None
    device = facts["hardware_ports"].get(BRIDGE_PORT) or BRIDGE_ARGV[1]
    facts["bridge"]["persistent_members"] = (
        None if defined is None else list((defined.get(device) or {}).get("members") or [])
    )
    return facts, facts["warnings"]


def collect_rdma(run, cabled=None):
    """mlx_rdma facts: ibv_devices, ibv_devinfo -v, rdma_ctl status (each may be absent).

    A probe that does not answer (CommandTimeout) does not fail the Mac: RDMA is then
    unusable there, with the command and its fix as the first problem (and a warning); the
    probes after it are not run (each would wait out the bound again)."""
    warnings = []
    devices_text = devinfo_text = ctl_text = None
    try:
        devices = run(IBV_DEVICES_ARGV, required=False)
        if devices is not None:
            rc, out, err = devices
            if rc != 0:
                # The verbs library fails this way when RDMA is off: that is "no devices".
                warnings.append(f"`ibv_devices` exited with {rc} ({_first_line(err or out)}); taken as no device")
                out = ""
            devices_text = out
            info = run(IBV_DEVINFO_ARGV, required=False)
            if info is not None:
                rc, out, err = info
                devinfo_text = out if rc == 0 else ""
                if rc != 0 and devices_text.strip() and "rdma_" in devices_text:
                    warnings.append(
                        f"`ibv_devinfo -v` exited with {rc} ({_first_line(err or out)}); port states are unknown"
                    )
        ctl_text = optional(run, RDMA_CTL_ARGV, warnings)
    except CommandTimeout as exc:
        warnings.append(exc.msg)
        hung = {"command": exc.command, "msg": exc.reason, "fix": exc.fix}
        return rdma_facts(devices_text, devinfo_text, ctl_text, cabled_ifaces=cabled, hung=hung), warnings
    return rdma_facts(devices_text, devinfo_text, ctl_text, cabled_ifaces=cabled), warnings


def collect_power(run, warnings):
    """The stored power settings, {source: {setting: value}} (mlx_power.parse_pmset_custom), or
    None (and a warning) when `pmset -g custom` failed, did not answer or printed something
    else: the power stage then reads them itself. A soft fact: it never fails the Mac."""
    try:
        out = optional(run, PMSET_ARGV, warnings)
        return parse_pmset_custom(out) if out is not None else None
    except CommandTimeout as exc:
        warnings.append(f"{exc.reason}; the power settings are unknown")
    except ParseError as exc:
        warnings.append(f"cannot read `{exc.command}`: {exc.message}; the power settings are unknown")
    return None


def collect_updates(run, warnings):
    """The automatic-update settings (mlx_power.updates_facts): each True, False or None
    (never written, unreadable, `defaults` missing or not answering). Never fails the Mac."""
    try:
        return updates_facts(run(UPDATES_ARGV, required=False))
    except CommandTimeout as exc:
        warnings.append(f"{exc.reason}; the automatic-update settings are unknown")
    return updates_facts(None)


def sudo_facts(result, user):
    """`sudo` of mlx_cluster from SUDO_PROBE_ARGV's result: (rc, out, err), a CommandTimeout, or
    None (no sudo on PATH, or it could not be started). {"user", "passwordless", "message"}:
    message is what sudo said when it did not run the command (its first line), else None."""
    if isinstance(result, CommandTimeout):
        return {"user": user, "passwordless": False, "message": result.reason}
    if result is None:
        return {
            "user": user,
            "passwordless": False,
            "message": "`sudo` could not be run (not on PATH, or it could not start)",
        }
    rc, out, err = result
    if rc == 0:
        return {"user": user, "passwordless": True, "message": None}
    return {
        "user": user,
        "passwordless": False,
        "message": _first_line(err or out) or f"`{label(SUDO_PROBE_ARGV)}` exited with {rc}",
    }


def _mgmt(run, interfaces, ssh_connection, warnings):
    mgmt = mgmt_by_address(interfaces, ssh_server_address(ssh_connection))
    if mgmt is None:
        rc, out, _ = run(ROUTE_ARGV)  # rc 1 "not in table": no default route
        mgmt = mgmt_by_iface(interfaces, parse_route_default(out) if rc == 0 else None)
    if mgmt is None:
        warnings.append(
            "the management interface is unknown: SSH_CONNECTION names no local "
            "IPv4 address and there is no default route"
        )
        mgmt = {"iface": None, "address": None}
    return mgmt


def cluster_argvs(power=True, updates=True):
    """CLUSTER_ARGVS without `pmset -g custom` (power False) or the SoftwareUpdate read (updates
    False): what collect_cluster() runs with the same flags."""
    skip = ([] if power else [PMSET_ARGV]) + ([] if updates else [UPDATES_ARGV])
    return tuple(argv for argv in CLUSTER_ARGVS if argv not in skip)


def collect_cluster(run, ssh_connection, disk, preferences=None, power=True, updates=True):
    """mlx_cluster facts: everything in one run. `disk` is {"path", "free_bytes"} from the
    module; `preferences` the bytes of the network preferences file (see collect_thunderbolt).
    `power` / `updates` False: the power settings / automatic-update settings are not read
    (no `power` / `updates` key), for a run whose stages do not use them."""
    hw = parse_sysctl_hw(required(run, SYSCTL_ARGV))
    wired = run(WIRED_LIMIT_ARGV, required=False)  # (rc, out, err), None: no sysctl at all
    hw["wired_limit_mb"] = parse_wired_limit(*wired[:2]) if wired else None
    ifconfig_text = required(run, IFCONFIG_ARGV)
    try:  # (read once: the ports' types for the Thunderbolt facts, and the interfaces fact)
        interfaces = interfaces_facts(ifconfig_text)
    except ParseError as exc:
        raise ParseError(label(IFCONFIG_ARGV), exc.message) from None
    raw = {}
    thunderbolt, warnings = collect_thunderbolt(
        run, model_id=hw["model"], raw=raw, ifconfig_text=ifconfig_text, interfaces=interfaces, preferences=preferences
    )
    rdma, rdma_warnings = collect_rdma(run, cabled_ifaces(thunderbolt))
    warnings = list(warnings) + rdma_warnings
    facts = {
        "thunderbolt": thunderbolt,
        "rdma": rdma,
        "interfaces": interfaces,
        # every network service in order (the network stage applies against these, read once)
        "services": parse_service_order(raw["service_order"]) if raw["service_order"] is not None else None,
        "mgmt": _mgmt(run, interfaces, ssh_connection, warnings),
        "os": parse_sw_vers(required(run, SW_VERS_ARGV)),
        "hw": hw,
        "disk": disk,
    }
    if power:
        facts["power"] = collect_power(run, warnings)
    if updates:
        facts["updates"] = collect_updates(run, warnings)
    return facts, warnings


# ---- the links as they are: what the network stage would read, read once at discovery ----


def link_probe_argvs(facts, ping="ping", count=2, timeout=2, known=None):
    """The read-only commands that tell whether a Mac's Thunderbolt links are in place and
    working, from its discovery facts: `networksetup -getinfo` of every service on a
    Thunderbolt port not already answered in `known` ({service: getinfo}, e.g. from
    services_from_preferences()); when a Thunderbolt port holds a /30, one `netstat -rn -f inet` (the
    host routes to the other ends) and, for each such port with carrier whose end holds the
    /30's first address (pings_from_here: one ping per cable, from one end), one `ping` over
    it. [] on a Mac never set up (no such service, no such address): a first run costs
    nothing more.
    Returns [(kind, key, argv)]: kind "info" (key: service), "routes" (key: the other ends'
    addresses, a tuple), "ping" (key: iface)."""
    tb = thunderbolt_devices((facts.get("thunderbolt") or {}).get("hardware_ports"), facts.get("interfaces"))
    out, peers, pings = [], [], []
    for svc in facts.get("services") or []:
        if svc.get("device") in tb and svc.get("name") and svc["name"] not in (known or {}):
            out.append(("info", svc["name"], getinfo_argv(svc["name"])))
    for iface in sorted(tb):
        info = (facts.get("interfaces") or {}).get(iface) or {}
        for a in info.get("ipv4") or []:
            peer = slash30_partner(a.get("address"), a.get("prefix"))
            if peer is None:
                continue
            peers.append(peer)
            if info.get("status") == "active" and pings_from_here(a["address"], a.get("prefix")):
                link = {"address": a["address"], "peer_address": peer}
                pings.append(("ping", iface, ping_argv(ping, link, count, timeout)))
            break  # one cluster address per port
    if peers:
        out.append(("routes", tuple(peers), list(NETSTAT_ROUTES_ARGV)))
    return out + pings


def link_probe_facts(probes, results, known=None):
    """`links_state` of mlx_cluster from link_probe_argvs() and their (rc, out, err), with
    the services already answered in `known`: {"service_info": {service: getinfo},
    "routes": {peer: route}, "pings": {iface: {"address", "peer_address", "ok"}}}. A getinfo
    or routing table that cannot be read is left out (the network stage reads it again)."""
    state = {"service_info": dict(known or {}), "routes": {}, "pings": {}}
    for (kind, key, argv), (rc, out, _err) in zip(probes, results):
        if kind == "info":
            try:
                state["service_info"][key] = parse_getinfo(out if rc == 0 else "")
            except ParseError:
                continue
        elif kind == "routes":
            try:
                table = parse_netstat_routes(out) if rc == 0 else None
            except ParseError:
                table = None
            if table is not None:
                state["routes"] = {peer: route_of(table, peer) for peer in key}
        else:
            state["pings"][key] = {"address": argv[-2], "peer_address": argv[-1], "ok": rc == 0}
    return state
