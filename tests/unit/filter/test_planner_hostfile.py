"""mlx_planner.hostfile: exactly what mlx.launch reads, checked by MLX's own launcher code."""

from __future__ import annotations

import json
from types import SimpleNamespace
from unittest import mock

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_hostfile,
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


def build(hosts, cables, rdma=True, order=None, **kw):
    links = plan_cables.links(make_facts(hosts, cables))
    topo = plan_topology.topology(links, order or hosts, rdma=rdma, **kw)
    return topo, plan_addresses.ip_plan(links)


def mesh3_with_double_pair():
    hosts, cables = mesh_cables(3)
    return hosts, cables + [cable("m00", "en7", "m01", "en7")]


def test_jaccl_shape():
    hosts, cables = mesh3_with_double_pair()
    topo, plan = build(hosts, cables, order=["m01", "m00", "m02"])
    hf = plan_hostfile.hostfile(topo, plan, LAN, envs=["MLX_METAL_FAST_SYNCH=1"])
    # m00-m01 has two cables, the other pairs one: every pair gets one device (as MLX)
    assert hf == {
        "backend": "jaccl",
        "envs": ["MLX_METAL_FAST_SYNCH=1"],
        "hosts": [
            {"ssh": "m01", "ips": ["10.1.0.11"], "rdma": [None, "rdma_en2", "rdma_en4"]},
            {"ssh": "m00", "ips": ["10.1.0.10"], "rdma": ["rdma_en3", None, "rdma_en4"]},
            {"ssh": "m02", "ips": ["10.1.0.12"], "rdma": ["rdma_en3", "rdma_en2", None]},
        ],
    }


def test_jaccl_lists_every_pairs_cables_when_every_pair_has_as_many():
    hosts, cables = mesh_cables(3)
    cables += [cable("m00", "en7", "m01", "en7"), cable("m00", "en8", "m02", "en8"), cable("m01", "en9", "m02", "en10")]
    topo, plan = build(hosts, cables, order=["m02", "m00", "m01"])
    rows = [h["rdma"] for h in plan_hostfile.hostfile(topo, plan, LAN)["hosts"]]
    # m02 ranks first: its interface names order the m02-m01 pair ("en10" < "en3" as strings)
    assert rows == [
        [None, ["rdma_en2", "rdma_en8"], ["rdma_en10", "rdma_en3"]],
        [["rdma_en4", "rdma_en8"], None, ["rdma_en3", "rdma_en7"]],
        [["rdma_en9", "rdma_en4"], ["rdma_en2", "rdma_en7"], None],
    ]


def test_jaccl_ring_shape():
    hosts, cables = ring_cables(4)
    topo, plan = build(hosts, cables)
    hf = plan_hostfile.hostfile(topo, plan, LAN)
    assert hf["backend"] == "jaccl-ring"
    assert [h["ssh"] for h in hf["hosts"]] == topo["ring"] == ["r00", "r01", "r02", "r03"]
    assert [h["rdma"] for h in hf["hosts"]] == [
        [None, "rdma_en2", None, "rdma_en3"],
        ["rdma_en3", None, "rdma_en2", None],
        [None, "rdma_en3", None, "rdma_en2"],
        ["rdma_en2", None, "rdma_en3", None],
    ]
    assert [h["ips"] for h in hf["hosts"]] == [["10.1.0.20"], ["10.1.0.21"], ["10.1.0.22"], ["10.1.0.23"]]


def test_jaccl_ring_uses_ring_width_devices_per_neighbour():
    hosts, cables = ring_cables(3, per_hop=2)
    topo, plan = build(hosts, cables, backend="jaccl-ring")
    hf = plan_hostfile.hostfile(topo, plan, LAN)
    assert topo["ring_width"] == 2
    assert hf["hosts"][0]["rdma"] == [None, ["rdma_en2", "rdma_en3"], ["rdma_en4", "rdma_en5"]]


def test_ring_shape_addresses_towards_the_left_neighbour():
    hosts, cables = ring_cables(4)
    topo, plan = build(hosts, cables, rdma=False)
    hf = plan_hostfile.hostfile(topo, plan)  # no coordinators needed
    assert hf["backend"] == "ring"
    for rank, entry in enumerate(hf["hosts"]):
        left = topo["ring"][rank - 1]
        mine = [e["address"] for e in plan["hosts"][entry["ssh"]] if e["peer_host"] == left]
        assert entry["ips"] == mine and entry["rdma"] == []


def test_ring_width_two_gives_two_addresses():
    hosts, cables = ring_cables(3, per_hop=2)
    topo, plan = build(hosts, cables, rdma=False)
    hf = plan_hostfile.hostfile(topo, plan)
    assert [len(h["ips"]) for h in hf["hosts"]] == [2, 2, 2]


def test_two_hosts_ring():
    topo, plan = build(["a", "b"], [cable("a", "en2", "b", "en3")], rdma=False)
    hf = plan_hostfile.hostfile(topo, plan)
    entry = plan["cables"]["a:en2~b:en3"]
    assert hf["hosts"] == [
        {"ssh": "a", "ips": [entry["a"]["address"]], "rdma": []},
        {"ssh": "b", "ips": [entry["b"]["address"]], "rdma": []},
    ]


@pytest.mark.parametrize(
    "address, match",
    [
        pytest.param("169.254.3.4", "link-local", id="link-local"),
        pytest.param("100.100.1.1", "CGNAT/Tailscale", id="tailscale"),
        pytest.param("127.0.0.1", "loopback", id="loopback"),
        pytest.param("fe80::1", "IPv6", id="ipv6"),
        pytest.param("m00.local", "not an IP address", id="hostname"),
        pytest.param(None, "no coordinator address", id="missing"),
    ],
)
def test_coordinator_validation(address, match):
    hosts, cables = mesh_cables(3)
    topo, plan = build(hosts, cables)
    coords = dict(LAN, m01=address)
    with pytest.raises(PlanError, match=match) as info:
        plan_hostfile.hostfile(topo, plan, coords)
    assert "m01" in info.value.message
    assert "set mlx_cluster_coordinator_address for m01 in the inventory" in info.value.message


def test_coordinator_must_not_be_a_cable_address():
    hosts, cables = mesh_cables(3)
    topo, plan = build(hosts, cables)
    coords = dict(LAN, m02=plan["hosts"]["m02"][0]["address"])
    with pytest.raises(PlanError, match="m02 is a Thunderbolt cable address"):
        plan_hostfile.hostfile(topo, plan, coords)


def test_no_backend_fits():
    topo, plan = build(["a", "b", "c"], [cable("a", "en2", "b", "en2")])
    with pytest.raises(PlanError, match="no MLX backend fits this wiring: .*no full mesh"):
        plan_hostfile.hostfile(topo, plan, {})


def test_backend_override():
    hosts, cables = mesh_cables(3)
    topo, plan = build(hosts, cables)
    assert plan_hostfile.hostfile(topo, plan, backend="ring")["backend"] == "ring"
    rtopo, rplan = build(*ring_cables(4))
    with pytest.raises(PlanError, match="jaccl needs a full mesh; missing cables: r00-r02, r01-r03"):
        plan_hostfile.hostfile(rtopo, rplan, LAN, backend="jaccl")
    norm_topo, _ = build(*ring_cables(4), rdma=False)
    with pytest.raises(PlanError, match="needs RDMA on every host"):
        plan_hostfile.hostfile(norm_topo, rplan, LAN, backend="jaccl-ring")


@pytest.mark.parametrize("envs", [["NOPE"], ["1X=2"], "A=1", [3]])
def test_bad_envs(envs):
    hosts, cables = mesh_cables(3)
    topo, plan = build(hosts, cables)
    with pytest.raises(PlanError, match="envs"):
        plan_hostfile.hostfile(topo, plan, LAN, envs=envs)


def test_plan_from_other_links():
    topo, _ = build(*ring_cables(4))
    _, other = build(*ring_cables(3))
    with pytest.raises(PlanError, match="has no cable between r00 and r03"):
        plan_hostfile.hostfile(topo, other, LAN)


# ------------------------------------------------------------------ MLX's launcher as oracle


def _launch(hf, tmp_path, backend):
    """Feed our hostfile to MLX's own Hostfile.from_file and launch_* (no process started)."""
    from mlx._distributed_utils import launch
    from mlx._distributed_utils.common import Hostfile

    path = tmp_path / "hostfile.json"
    path.write_text(json.dumps(hf))
    parsed = Hostfile.from_file(str(path))
    captured = {}

    class Parser:
        def error(self, msg):
            raise AssertionError("mlx.launch rejects the hostfile: " + msg)

    def fake_launch(_cls, items, _verbose):
        captured["items"] = items

    args = SimpleNamespace(
        starting_port=32323,
        connections_per_ip=1,
        env=list(parsed.envs),
        cwd=None,
        verbose=False,
        python="python3",
        backend=backend,
    )
    run = launch.launch_ring if backend == "ring" else launch.launch_jaccl
    with mock.patch.object(launch, "_launch_with_io", fake_launch):
        run(Parser(), parsed.hosts, args, ["true"])
    (rank0, host0, _py, _cwd, files, env, _cmd), _kw = captured["items"][0]
    return parsed, files, env


@pytest.mark.parametrize(
    "backend, build_args",
    [
        pytest.param("jaccl", (mesh3_with_double_pair, True), id="jaccl"),
        pytest.param("jaccl-ring", (lambda: ring_cables(4, per_hop=2), True), id="jaccl-ring"),
        pytest.param("ring", (lambda: ring_cables(4, per_hop=2), False), id="ring"),
    ],
)
def test_mlx_launch_accepts_our_hostfile(tmp_path, backend, build_args):
    make, rdma = build_args
    topo, plan = build(*make(), rdma=rdma)
    hf = plan_hostfile.hostfile(topo, plan, LAN, envs=["MLX_X=1"])
    assert hf["backend"] == backend
    parsed, files, env = _launch(hf, tmp_path, backend)
    assert parsed.backend == backend and parsed.envs == ["MLX_X=1"]
    if backend == "ring":
        ring = json.loads(files["MLX_HOSTFILE"])
        assert [[a.rsplit(":", 1)[0] for a in node] for node in ring] == [h["ips"] for h in hf["hosts"]]
    else:
        assert json.loads(files["MLX_IBV_DEVICES"]) == [h["rdma"] for h in hf["hosts"]]
        assert "MLX_JACCL_COORDINATOR=%s:32323" % hf["hosts"][0]["ips"][0] in env
