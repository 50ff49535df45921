"""Captured answers of a Mac's commands for module tests, keyed by the argv the module must run."""

from __future__ import annotations

BINS = {
    "system_profiler": "/usr/sbin/system_profiler",
    "networksetup": "/usr/sbin/networksetup",
    "ifconfig": "/sbin/ifconfig",
    "route": "/sbin/route",
    "netstat": "/usr/sbin/netstat",
    "sysctl": "/usr/sbin/sysctl",
    "sw_vers": "/usr/bin/sw_vers",
    "ibv_devices": "/usr/bin/ibv_devices",
    "ibv_devinfo": "/usr/bin/ibv_devinfo",
    "rdma_ctl": "/usr/bin/rdma_ctl",
    "pmset": "/usr/bin/pmset",
    "defaults": "/usr/bin/defaults",
}

SP = ("/usr/sbin/system_profiler", "SPThunderboltDataType", "-json")
HWPORTS = ("/usr/sbin/networksetup", "-listallhardwareports")
ORDER = ("/usr/sbin/networksetup", "-listnetworkserviceorder")
BRIDGE = ("/sbin/ifconfig", "bridge0")
IBV_DEVICES = ("/usr/bin/ibv_devices",)
IBV_DEVINFO = ("/usr/bin/ibv_devinfo", "-v")
RDMA_CTL = ("/usr/bin/rdma_ctl", "status")
IFCONFIG = ("/sbin/ifconfig", "-v")
ROUTE = ("/sbin/route", "-n", "get", "default")
NETSTAT = ("/usr/sbin/netstat", "-rn", "-f", "inet")
SW_VERS = ("/usr/bin/sw_vers",)
SYSCTL = ("/usr/sbin/sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu")
WIRED_LIMIT = ("/usr/sbin/sysctl", "-n", "iogpu.wired_limit_mb")
PMSET = ("/usr/bin/pmset", "-g", "custom")
SU = "/Library/Preferences/com.apple.SoftwareUpdate"
UPDATES = ("/usr/bin/defaults", "read", SU)

# argv -> (rc, fixture name or None, stderr)
STUDIO_A = {
    SP: (0, "sp_direct_studio_a.json", ""),
    HWPORTS: (0, "networksetup_hwports_studio_with_bridge.txt", ""),
    ORDER: (0, "networksetup_order_bridge_enabled.txt", ""),
    BRIDGE: (0, "ifconfig_bridge0_members.txt", ""),
    IBV_DEVICES: (0, "ibv_devices_3.txt", ""),
    IBV_DEVINFO: (0, "ibv_devinfo_v_mini_active_ipv4.txt", ""),
    RDMA_CTL: (0, "rdma_ctl_status_enabled.txt", ""),
    IFCONFIG: (0, "ifconfig_all_studio.txt", ""),
    ROUTE: (0, "route_get_default_en0.txt", ""),
    SW_VERS: (0, "sw_vers_26_2.txt", ""),
    SYSCTL: (0, "sysctl_hw_studio_m4max.txt", ""),
    WIRED_LIMIT: (0, "sysctl_wired_limit_0.txt", ""),
    PMSET: (0, "pmset_g_custom_mini_never_sleeps.txt", ""),
    UPDATES: (
        0,
        "{\n    AutomaticCheckEnabled = 1;\n    AutomaticDownload = 1;\n"
        "    AutomaticallyInstallMacOSUpdates = 0;\n    CriticalUpdateInstall = 1;\n}\n",
        "",
    ),
}

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


def answers(read_fixture, table, **overrides):
    """{argv: (rc, stdout, stderr)} from a table of fixture names (or outputs: `1\\n`); overrides by
    argv name in this module."""
    table = dict(table)
    for name, value in overrides.items():
        table[globals()[name.upper()]] = value
    return {
        argv: (rc, (read_fixture(out) if out.endswith((".txt", ".json")) else out) if out else "", err)
        for argv, (rc, out, err) in table.items()
    }
