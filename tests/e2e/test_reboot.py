"""A Mac rebooted after the network stage: the Thunderbolt Bridge stays out of the way.

macOS rebuilds bridge0 at every boot from its definition in the network preferences
(`VirtualNetworkInterfaces` > `Bridge` > `bridge0` > `Interfaces`), up and with every listed
member, whether or not the Thunderbolt Bridge service is enabled; what `ifconfig bridge0
deletem` did is gone. The simulated Mac's boot does the same (tests/simcluster/shims/macos.py
`boot`), so only a network stage that edits the definition passes this."""

from __future__ import annotations

import json

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_netcfg
from tests.e2e.runner import is_mutating, run_site

pytestmark = [pytest.mark.sim, pytest.mark.slow]

REBOOTED = "m2"


def plan_of(cluster):
    return json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())


def definition(cluster, host):
    """bridge0's members as the Mac's own preferences file lists them (the file configd reads)."""
    data = cluster.exec(host, ["cat", mlx_netcfg.SC_PREFERENCES], check=True).stdout.encode()
    return (mlx_netcfg.bridges_from_preferences(data) or {}).get("bridge0", {}).get("members")


def bridged(cluster, host):
    """The ports the Linux bridge standing in for bridge0 really holds."""
    out = json.loads(cluster.exec(host, ["ip", "-j", "link", "show", "master", "bridge0"]).stdout or "[]")
    return {d["ifname"] for d in out}


def addresses(cluster, host, iface):
    out = json.loads(cluster.exec(host, ["ip", "-j", "addr", "show", "dev", iface]).stdout or "[]")
    return [(a["local"], a["prefixlen"]) for d in out for a in d.get("addr_info", []) if a.get("family") == "inet"]


def answers(cluster, host, link):
    """macOS ping over one cable, from this end's /30 address (the shim sends a real ping)."""
    argv = ["ping", "-c", "2", "-o", "-t", "3", "-S", link["address"], link["peer_address"]]
    return cluster.exec(host, argv, timeout=30).returncode == 0


def test_a_rebooted_mac_keeps_its_ports_out_of_the_bridge(sim_cluster):
    cluster = sim_cluster("ring4")
    cluster.reset()
    # factory state: every Thunderbolt port in bridge0, now and in its definition
    before = definition(cluster, REBOOTED)
    assert before and bridged(cluster, REBOOTED) == set(before)

    first = run_site(cluster, tags=["network", "hostfile"])  # hostfile: writes the plan
    assert first.rc == 0, first.failures()
    links = plan_of(cluster)["ip_plan"]["hosts"][REBOOTED]
    ports = {link["iface"] for link in links}
    assert len(ports) == 2  # a ring: two cables per Mac
    assert not ports & set(definition(cluster, REBOOTED)), definition(cluster, REBOOTED)
    order = cluster.exec(REBOOTED, ["networksetup", "-listnetworkserviceorder"]).stdout
    assert "(*) Thunderbolt Bridge\n" in order  # its service is off too (no address on bridge0)

    cluster.reboot(REBOOTED)

    # bridge0 is back, up (configd rebuilt it), without the cabled ports
    ifconfig = cluster.exec(REBOOTED, ["ifconfig", "bridge0"]).stdout
    assert ifconfig.startswith("bridge0: flags=8863<UP,"), ifconfig
    for port in ports:
        assert f"member: {port} " not in ifconfig, ifconfig
    assert not ports & bridged(cluster, REBOOTED)
    # the /30s came back from the persistent services, and every cable answers both ways
    for link in links:
        assert (link["address"], 30) in addresses(cluster, REBOOTED, link["iface"]), link
        assert answers(cluster, REBOOTED, link), link
        peer = {"address": link["peer_address"], "peer_address": link["address"]}
        assert answers(cluster, link["peer_host"], peer), link

    # a re-run of the network stage finds the bridge, the definition, the services and the
    # addresses in place: on the rebooted Mac it only adds back the host routes (runtime
    # state on macOS too), elsewhere nothing
    cluster.clear_argv_logs()
    again = run_site(cluster, tags=["network"])
    assert again.rc == 0, again.failures()
    changed = {h for h, n in again.stats.get("changed", {}).items() if n}
    assert changed == {REBOOTED}, again.stats
    done = {h: [a for a in cluster.argv_log(h) if is_mutating(a)] for h in cluster.hosts}
    assert {h for h, argvs in done.items() if argvs} == {REBOOTED}, done
    assert sorted(a[a.index("route") :][:5] for a in done[REBOOTED]) == sorted(
        ["route", "-n", "add", "-host", link["peer_address"]] for link in links
    ), done[REBOOTED]

    cluster.clear_argv_logs()
    last = run_site(cluster, tags=["network"])
    assert last.rc == 0, last.failures()
    assert last.changed() == 0, last.stats
    assert not any(is_mutating(a) for h in cluster.hosts for a in cluster.argv_log(h))
