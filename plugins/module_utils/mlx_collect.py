# -*- coding: utf-8 -*-
"""Which commands the facts modules run, and what their exit codes mean.

The three facts modules (`thunderbolt_facts`, `rdma_facts`, `mlx_cluster_facts`) share
this sequence so the narrow modules and the one-shot module cannot drift apart. Nothing
here runs anything: each function gets a `run(argv, required=True)` callable from the
module, which looks argv[0] up on PATH, runs it in the C locale and returns
`(rc, stdout, stderr)`, or None when an optional (`required=False`) tool is missing.

Each function returns `(facts, warnings)`. A required command that fails, or output that
cannot be parsed, raises ParseError whose `command` is the argv joined by spaces (the
module keys its record of rc/stderr by the same text).
"""

from __future__ import annotations

try:  # inside an Ansible module
    from ansible.module_utils.mlx_host import (
        cabled_ifaces,
        interfaces_facts,
        mgmt_by_address,
        mgmt_by_iface,
        parse_route_default,
        parse_sw_vers,
        parse_sysctl_hw,
        ssh_server_address,
    )
    from ansible.module_utils.mlx_rdma import rdma_facts
    from ansible.module_utils.mlx_tb import ParseError, thunderbolt_facts
except ImportError:  # unit tests: plugins/module_utils is on sys.path
    from mlx_host import (  # type: ignore[no-redef]
        cabled_ifaces,
        interfaces_facts,
        mgmt_by_address,
        mgmt_by_iface,
        parse_route_default,
        parse_sw_vers,
        parse_sysctl_hw,
        ssh_server_address,
    )
    from mlx_rdma import rdma_facts  # type: ignore[no-redef]
    from mlx_tb import ParseError, thunderbolt_facts  # type: ignore[no-redef]

SP_ARGV = ["system_profiler", "SPThunderboltDataType", "-json"]
HWPORTS_ARGV = ["networksetup", "-listallhardwareports"]
SERVICE_ORDER_ARGV = ["networksetup", "-listnetworkserviceorder"]
BRIDGE_ARGV = ["ifconfig", "bridge0"]
IBV_DEVICES_ARGV = ["ibv_devices"]
IBV_DEVINFO_ARGV = ["ibv_devinfo", "-v"]
RDMA_CTL_ARGV = ["rdma_ctl", "status"]
IFCONFIG_ARGV = ["ifconfig"]
ROUTE_ARGV = ["route", "-n", "get", "default"]
SW_VERS_ARGV = ["sw_vers"]
SYSCTL_ARGV = ["sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"]


def label(argv):
    """The text that names a command in messages and in ParseError.command."""
    return " ".join(argv)


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


def collect_thunderbolt(run, model_id=None):
    """mlx_thunderbolt facts: system_profiler, networksetup (x2), ifconfig bridge0."""
    sp = required(run, SP_ARGV)
    hwports = required(run, HWPORTS_ARGV)
    warnings = []
    order = optional(run, SERVICE_ORDER_ARGV, warnings, missing_ok=False)
    rc, out, err = run(BRIDGE_ARGV)
    if rc == 0:
        bridge = out
    elif "does not exist" in f"{err}{out}":
        bridge = None  # no bridge0 at all: nothing to take apart
    else:
        raise ParseError(label(BRIDGE_ARGV), f"exited with {rc}: {_first_line(err or out)}")
    try:
        facts = thunderbolt_facts(sp, hwports, bridge, order, model_id=model_id)
    except ParseError as exc:
        if exc.command == "ifconfig":  # the only ifconfig output read here is bridge0's
            raise ParseError(label(BRIDGE_ARGV), exc.message) from None
        raise
    facts["warnings"] = warnings + facts["warnings"]
    return facts, facts["warnings"]


def collect_rdma(run, cabled=None):
    """mlx_rdma facts: ibv_devices, ibv_devinfo -v, rdma_ctl status (each may be absent)."""
    warnings = []
    devices = run(IBV_DEVICES_ARGV, required=False)
    devices_text = devinfo_text = None
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
                warnings.append(f"`ibv_devinfo -v` exited with {rc} ({_first_line(err or out)}); "
                                f"port states are unknown")
    ctl_text = optional(run, RDMA_CTL_ARGV, warnings)
    return rdma_facts(devices_text, devinfo_text, ctl_text, cabled_ifaces=cabled), warnings


def _mgmt(run, interfaces, ssh_connection, warnings):
    mgmt = mgmt_by_address(interfaces, ssh_server_address(ssh_connection))
    if mgmt is None:
        rc, out, _ = run(ROUTE_ARGV)  # rc 1 "not in table": no default route
        mgmt = mgmt_by_iface(interfaces, parse_route_default(out) if rc == 0 else None)
    if mgmt is None:
        warnings.append("the management interface is unknown: SSH_CONNECTION names no local "
                        "IPv4 address and there is no default route")
        mgmt = {"iface": None, "address": None}
    return mgmt


def collect_cluster(run, ssh_connection, disk):
    """mlx_cluster facts: everything in one run. `disk` is {"path", "free_bytes"} from the module."""
    hw = parse_sysctl_hw(required(run, SYSCTL_ARGV))
    thunderbolt, warnings = collect_thunderbolt(run, model_id=hw["model"])
    rdma, rdma_warnings = collect_rdma(run, cabled_ifaces(thunderbolt))
    warnings = list(warnings) + rdma_warnings
    interfaces = interfaces_facts(required(run, IFCONFIG_ARGV))
    facts = {
        "thunderbolt": thunderbolt,
        "rdma": rdma,
        "interfaces": interfaces,
        "mgmt": _mgmt(run, interfaces, ssh_connection, warnings),
        "os": parse_sw_vers(required(run, SW_VERS_ARGV)),
        "hw": hw,
        "disk": disk,
    }
    return facts, warnings
