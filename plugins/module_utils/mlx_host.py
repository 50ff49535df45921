# -*- coding: utf-8 -*-
"""Pure parsers for the host part of `ansible_facts.mlx_cluster` (docs/design.md).

`sw_vers`, `sysctl -n hw.memsize hw.model hw.ncpu`, `sysctl -n iogpu.wired_limit_mb`,
`route -n get default`, the
choice of the management interface (the one the SSH session arrived on), and whether the
module runs as the user Ansible logs in as. The Thunderbolt and RDMA parts live in mlx_tb
and mlx_rdma.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError, small_int, to_text
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_tb import parse_ifconfig

SW_VERS_COMMAND = "sw_vers"
SYSCTL_COMMAND = "sysctl -n hw.memsize hw.model hw.ncpu"
ROUTE_COMMAND = "route -n get default"
# the GPU's wired-memory limit in MB (module_utils/mlx_wired.py: what it means, how it is raised)
WIRED_LIMIT_OID = "iogpu.wired_limit_mb"
WIRED_LIMIT_COMMAND = f"sysctl -n {WIRED_LIMIT_OID}"


def parse_sw_vers(text):
    """Parse `sw_vers` into {"product_version": "26.2", "build_version": "25C56"}."""
    text, _ = to_text(text, SW_VERS_COMMAND)
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    product, build = values.get("ProductVersion"), values.get("BuildVersion")
    if not product or not build:
        raise ParseError(SW_VERS_COMMAND, "no ProductVersion or BuildVersion line")
    return {"product_version": product, "build_version": build}


def parse_sysctl_hw(text):
    """Parse `sysctl -n hw.memsize hw.model hw.ncpu` (three lines, in that order)."""
    text, _ = to_text(text, SYSCTL_COMMAND)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 3:
        raise ParseError(SYSCTL_COMMAND, f"expected 3 lines (memsize, model, ncpu), got {len(lines)}")
    memsize, model, ncpu = lines
    if small_int(memsize) is None or small_int(ncpu) is None:
        raise ParseError(SYSCTL_COMMAND, f"memsize {memsize[:40]!r} or ncpu {ncpu[:40]!r} is not a number")
    return {"memsize": small_int(memsize), "model": model, "ncpu": small_int(ncpu)}


def parse_wired_limit(rc, text):
    """The GPU wired-memory limit in MB from `sysctl -n iogpu.wired_limit_mb`: 0 means macOS's
    own default (a share of memory it decides); None when the Mac has no such setting (exit
    status non-zero, "unknown oid") or printed something else."""
    if rc != 0:
        return None
    text, _ = to_text(text, WIRED_LIMIT_COMMAND)
    value = small_int(text.strip())
    return value if value is not None and value >= 0 else None


def parse_route_default(text):
    """The interface of `route -n get default` ("interface: en0"), or None without a default route."""
    text, _ = to_text(text, ROUTE_COMMAND)
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() == "interface" and value.strip():
            return value.strip()
    return None


def ssh_server_address(ssh_connection):
    """The server IPv4 of SSH_CONNECTION ("client_ip client_port server_ip server_port"), or None."""
    if not isinstance(ssh_connection, str):
        return None
    parts = ssh_connection.split()
    if len(parts) != 4:
        return None
    try:
        return str(ipaddress.IPv4Address(parts[2]))
    except ValueError:
        return None


def mgmt_by_address(interfaces, address):
    """{"iface", "address"} of the interface holding IPv4 `address`, or None."""
    if address is None:
        return None
    for name in sorted(interfaces):
        if any(a["address"] == address for a in interfaces[name]["ipv4"]):
            return {"iface": name, "address": address}
    return None


def mgmt_by_iface(interfaces, iface):
    """{"iface", "address"} for the default-route interface (its first IPv4), or None."""
    if iface is None:
        return None
    addrs = (interfaces.get(iface) or {}).get("ipv4") or []
    return {"iface": iface, "address": addrs[0]["address"] if addrs else None}


def interfaces_facts(ifconfig_text):
    """`interfaces` of mlx_cluster from `ifconfig -v` (macOS lists every interface; `type` says
    which are Thunderbolt ports, mlx_tb.THUNDERBOLT_TYPE)."""
    return {
        name: {
            "ipv4": entry["ipv4"],
            "up": entry["up"],
            "mtu": entry["mtu"],
            "status": entry["status"],
            "members": entry["members"],
            "type": entry["type"],
        }
        for name, entry in parse_ifconfig(ifconfig_text).items()
    }


def cabled_ifaces(thunderbolt):
    """Interfaces whose Thunderbolt port has a Mac on the other end (RDMA should be up there)."""
    return sorted(p["iface"] for p in thunderbolt["ports"] if p["status"] == "connected" and p["peer"] and p["iface"])


def become_problem(sudo_user, user, home):
    """Why discovery must not go on when it runs through sudo as another user (`sudo_user`: sudo's
    SUDO_USER, the user Ansible logged in as; `user`, `home`: who it runs as now), else "".

    That is become on for the whole run (`-b`, or ansible_become in the inventory): everything
    the toolkit keeps on the Mac would then be `user`'s, under `home` (root's /var/root), and
    the ranks would run as `user`. The toolkit's own tasks ask for sudo where they need it."""
    if not sudo_user or not user or sudo_user == user:
        return ""
    return (
        f"discovery ran through sudo as {user}, not as {sudo_user}, the user Ansible logs in as: become is on for "
        f"the whole run (-b/--become on the command line, or ansible_become in the inventory), so everything the "
        f"toolkit keeps on this Mac (~/mlx-cluster, the venv, the model) would be {user}'s, under {home}, and the "
        f"ranks would run as {user}. Fix: run without -b/--become and remove ansible_become; the toolkit runs sudo "
        f"itself for the commands that need it, with sudo's password from -K (--ask-become-pass) or "
        f"ansible_become_password where sudo asks for one"
    )
