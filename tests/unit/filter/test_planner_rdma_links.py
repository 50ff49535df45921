"""mlx_planner.topology/hostfile: RDMA only over cables that can carry it.

A cable carries RDMA when it is a TB5 link (80 Gb/s class), the RDMA device of each end is
present and PORT_ACTIVE (the hosts' mlx_rdma facts), and no dock or hub is on the way (unless
rdma_through_docks). Otherwise auto picks the best backend that works and says why, naming
the cable; an explicit RDMA backend over such cables fails naming cable and fix.
"""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_hostfile,
    plan_picture,
    plan_topology,
)
from ansible_collections.mlx.cluster.plugins.plugin_utils.plan_common import PlanError
from tests.unit.filter.planner_synth import cable, make_facts, mesh_cables, ring_cables

LAN = {
    "m00": "10.1.0.10",
    "m01": "10.1.0.11",
    "m02": "10.1.0.12",
    "m03": "10.1.0.13",
    "r00": "10.1.0.20",
    "r01": "10.1.0.21",
    "r02": "10.1.0.22",
    "r03": "10.1.0.23",
}


def rdma_facts(facts, down=(), missing=(), disabled=False):
    """{host: mlx_rdma facts}: a device per Thunderbolt port, PORT_ACTIVE unless in `down`."""
    out = {}
    for host, tb in facts.items():
        devices = [
            {
                "name": "rdma_%s" % p["iface"],
                "iface": p["iface"],
                "port_state": "PORT_DOWN" if (host, p["iface"]) in down else "PORT_ACTIVE",
            }
            for p in tb["ports"]
            if (host, p["iface"]) not in missing
        ]
        out[host] = {
            "rdma_ctl": "disabled" if disabled == host else "enabled",
            "usable": disabled != host and bool(devices),
            "devices": devices,
        }
    return out


def plan(hosts, cables, order=None, rdma=None, **kw):
    facts = make_facts(hosts, cables)
    links = plan_cables.links(facts)
    topo = plan_topology.topology(links, order or hosts, rdma=rdma_facts(facts) if rdma is None else rdma(facts), **kw)
    return links, topo, plan_addresses.ip_plan(links)


def mesh_with(n, i, j, **kw):
    """mesh_cables(n) with the cable between hosts i and j replaced by one with `kw`."""
    hosts, cables = mesh_cables(n)
    out = []
    for c in cables:
        if {c["a"][0], c["b"][0]} == {hosts[i], hosts[j]}:
            c = cable(c["a"][0], c["a"][1], c["b"][0], c["b"][1], **kw)
        out.append(c)
    return hosts, out


def test_tb5_mesh_with_active_devices_is_jaccl_and_says_why():
    _links, topo, _plan = plan(*mesh_cables(4))
    assert topo["backend"] == "jaccl" and topo["rdma_mesh"] and topo["no_rdma"] == []
    assert len(topo["rdma_cables"]) == 6 and topo["backend_fix"] == ""
    assert topo["backend_reason"].startswith("jaccl: RDMA on every host")


@pytest.mark.parametrize(
    "kw, reason, fix",
    [
        pytest.param({"speed": 40}, "TB4 40 Gb/s", "Thunderbolt 5 cable", id="tb4-cable"),
        pytest.param(
            {"via": ["CalDigit TS4"]}, "through CalDigit TS4", "mlx_cluster_rdma_through_docks", id="dock-both-sides"
        ),
        pytest.param(
            {"via": ["CalDigit TS4"], "seen_by": "a"},
            "through CalDigit TS4",
            "cable the two Macs directly",
            id="dock-one-sided",
        ),
        pytest.param({"speed": None}, "link speed unknown", "gather facts again", id="speed-unknown"),
    ],
)
def test_a_cable_that_cannot_carry_rdma_keeps_jaccl_out_and_is_named(kw, reason, fix):
    hosts, cables = mesh_with(3, 0, 2, **kw)
    _links, topo, ip = plan(hosts, cables)
    # the m00-m02 leg cannot carry RDMA: no RDMA mesh, and no RDMA ring of 3 without it
    assert topo["backend"] == "ring"
    (bad,) = topo["no_rdma"]
    assert bad["name"] == "m00:en4 <-> m02:en2" and reason in bad["reasons"][0] and fix in bad["fix"]
    assert "ring, not jaccl or jaccl-ring" in topo["backend_reason"]
    assert "m00:en4 <-> m02:en2 (%s" % reason in topo["backend_reason"]
    assert fix in topo["backend_fix"] and topo["backend_reason"] in topo["message"]
    assert plan_hostfile.hostfile(topo, ip)["backend"] == "ring"
    # asked for explicitly: a clear failure naming the cable and the fix, no hostfile
    for backend in ("jaccl", "jaccl-ring"):
        with pytest.raises(PlanError, match="backend %s needs .*m00:en4 <-> m02:en2.*fix: .*%s" % (backend, fix)):
            plan_topology.topology(
                plan_cables.links(make_facts(hosts, cables)),
                hosts,
                rdma=rdma_facts(make_facts(hosts, cables)),
                backend=backend,
            )


def test_rdma_through_docks_is_an_opt_in():
    hosts, cables = mesh_with(3, 0, 2, via=["CalDigit TS4"])
    assert plan(hosts, cables)[1]["backend"] == "ring"
    _links, topo, _ip = plan(hosts, cables, rdma_through_docks=True)
    assert topo["backend"] == "jaccl" and topo["no_rdma"] == []
    # the opt-in does not make a TB4 dock leg fast enough
    hosts, cables = mesh_with(3, 0, 2, via=["CalDigit TS4"], speed=40)
    topo = plan(hosts, cables, rdma_through_docks=True)[1]
    assert topo["backend"] == "ring" and topo["no_rdma"][0]["reasons"] == ["TB4 40 Gb/s"]


@pytest.mark.parametrize(
    "where, reason",
    [
        pytest.param("down", "rdma_en2 on m02 is PORT_DOWN", id="port-down"),
        pytest.param("missing", "no RDMA device rdma_en2 on m02", id="no-device"),
    ],
)
def test_an_end_without_an_active_device_is_named_with_its_host(where, reason):
    hosts, cables = mesh_cables(3)
    _links, topo, _ip = plan(hosts, cables, rdma=lambda f: rdma_facts(f, **{where: {("m02", "en2")}}))
    assert topo["backend"] == "ring"
    assert topo["no_rdma"] == [
        {
            "cable": "m00:en4~m02:en2",
            "name": "m00:en4 <-> m02:en2",
            "reasons": [reason],
            "fix": topo["no_rdma"][0]["fix"],
        }
    ]
    assert "m02" in topo["no_rdma"][0]["fix"] or "Thunderbolt 5 port" in topo["no_rdma"][0]["fix"]


def test_a_ring_of_rdma_cables_inside_a_mesh_is_jaccl_ring():
    # 4 hosts, full mesh; both diagonals are TB4: the TB5 cables still form the ring 0-1-2-3
    hosts, cables = mesh_cables(4)
    cables = [
        cable(*c["a"], *c["b"], speed=40) if {c["a"][0], c["b"][0]} in ({"m00", "m02"}, {"m01", "m03"}) else c
        for c in cables
    ]
    _links, topo, ip = plan(hosts, cables)
    assert topo["backend"] == "jaccl-ring" and topo["rdma_ring"] == ["m00", "m01", "m02", "m03"]
    assert topo["backend_reason"].startswith("jaccl-ring, not jaccl: m00-m02, m01-m03 have no cable that carries RDMA")
    assert "m00:en4 <-> m02:en2 (TB4 40 Gb/s)" in topo["backend_reason"]
    hf = plan_hostfile.hostfile(topo, ip, LAN)
    # the TB4 diagonals never appear in the RDMA matrix
    assert [h["rdma"] for h in hf["hosts"]] == [
        [None, "rdma_en3", None, "rdma_en5"],
        ["rdma_en2", None, "rdma_en4", None],
        [None, "rdma_en3", None, "rdma_en5"],
        ["rdma_en2", None, "rdma_en4", None],
    ]
    with pytest.raises(PlanError, match="jaccl needs a cable that carries RDMA between every pair"):
        plan_hostfile.hostfile(topo, ip, LAN, backend="jaccl")


def test_a_tb4_second_cable_stays_out_of_the_jaccl_matrix_and_is_named():
    hosts, cables = mesh_cables(3)
    cables += [
        cable("m00", "en7", "m01", "en7", speed=40),
        cable("m00", "en8", "m02", "en8"),
        cable("m01", "en9", "m02", "en9"),
    ]
    _links, topo, ip = plan(hosts, cables)
    assert topo["backend"] == "jaccl"
    assert "not used for RDMA: m00:en7 <-> m01:en7 (TB4 40 Gb/s)" in topo["backend_reason"]
    assert "1 cable per pair (pairs have 1/2 cables that carry RDMA" in topo["backend_reason"]
    rows = [h["rdma"] for h in plan_hostfile.hostfile(topo, ip, LAN)["hosts"]]
    assert all("rdma_en7" not in str(row) for row in rows)


def test_rdma_required_leaves_no_backend_and_names_the_cable_and_fix():
    hosts, cables = mesh_with(3, 0, 2, speed=40)
    _links, topo, _ip = plan(hosts, cables, rdma_required=True)
    assert topo["backend"] is None
    assert (
        "RDMA is required" in topo["backend_reason"] and "m00:en4 <-> m02:en2 (TB4 40 Gb/s)" in topo["backend_reason"]
    )
    assert "Thunderbolt 5 cable" in topo["backend_fix"]
    with pytest.raises(PlanError, match="backend ring needs RDMA"):
        plan(hosts, cables, rdma_required=True, backend="ring")
    # fine when RDMA does fit
    assert plan(*mesh_cables(3), rdma_required=True)[1]["backend"] == "jaccl"


def test_a_host_with_rdma_disabled_is_named_once_with_its_fix():
    hosts, cables = ring_cables(4)
    _links, topo, _ip = plan(hosts, cables, rdma=lambda f: rdma_facts(f, disabled="r02"))
    assert topo["backend"] == "ring" and topo["rdma"]["r02"] is False
    assert "RDMA is disabled on r02 (rdma_ctl status)" in topo["backend_reason"]
    assert "rdma_ctl enable" in topo["backend_fix"]
    assert topo["no_rdma"] == []  # the cables are not to blame


def test_rdma_false_says_it_was_not_planned_and_offers_no_fix():
    topo = plan_topology.topology(plan_cables.links(make_facts(*mesh_cables(3))), mesh_cables(3)[0], rdma=False)
    assert topo["backend"] == "ring" and "RDMA is not planned" in topo["backend_reason"]
    assert topo["backend_fix"] == ""


def test_dot_marks_the_cables_without_rdma():
    hosts, cables = mesh_with(3, 0, 2, speed=40)
    links, topo, ip = plan(hosts, cables)
    text = plan_picture.dot(links, topo, ip)
    assert text.count("no RDMA") == 1


def test_bad_flags_are_refused():
    links = plan_cables.links(make_facts(*mesh_cables(2)))
    with pytest.raises(PlanError, match="rdma_through_docks must be true or false"):
        plan_topology.topology(links, ["m00", "m01"], rdma=True, rdma_through_docks="yes")
    with pytest.raises(PlanError, match=r"rdma\[m00\].devices must be a list"):
        plan_topology.topology(links, ["m00", "m01"], rdma={"m00": {"usable": True, "devices": "rdma_en2"}})
