"""plugins/filter/check_filters.py: mlx_links_in_place, the re-run shortcut of the network stage;
the per-cable results of the collective check and its slow-cable rule."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import slow_cables
from tests.unit.filter.controller import controller_imports


@pytest.fixture(scope="module")
def checks(checks_filters):
    return checks_filters


LINKS = [
    {
        "iface": "en2",
        "address": "10.208.0.1",
        "prefix": 30,
        "peer_address": "10.208.0.2",
        "peer_host": "m2",
        "peer_iface": "en2",
        "cable": "m1:en2~m2:en2",
    }
]
MANUAL = {"method": "manual", "address": "10.208.0.1", "subnet": "255.255.255.252", "router": None}


def in_place_facts():
    """m1 as discovery (probe_links) sees it after a converged run."""
    return {
        "thunderbolt": {
            "hardware_ports": {
                "Ethernet": "en0",
                "Thunderbolt 1": "en2",
                "Thunderbolt 2": "en3",
                "Thunderbolt Bridge": "bridge0",
            },
            # the bridge's definition (what macOS builds it from at boot): en2 is out
            "bridge": {"exists": True, "members": ["en3"], "persistent_members": ["en3"]},
        },
        "services": [
            {"name": "Ethernet", "hardware_port": "Ethernet", "device": "en0", "enabled": True},
            {
                "name": "Thunderbolt Bridge",
                "hardware_port": "Thunderbolt Bridge",
                "device": "bridge0",
                "enabled": False,
            },
            {"name": "Thunderbolt 1", "hardware_port": "Thunderbolt 1", "device": "en2", "enabled": True},
        ],
        "interfaces": {
            "en0": {"ipv4": [{"address": "10.99.0.2", "prefix": 24}], "status": "active", "members": []},
            "en2": {"ipv4": [{"address": "10.208.0.1", "prefix": 30}], "status": "active", "members": []},
            "en3": {"ipv4": [], "status": "inactive", "members": []},
            "bridge0": {"ipv4": [], "members": ["en3"]},
        },
        "links_state": {
            "service_info": {"Thunderbolt 1": dict(MANUAL)},
            "routes": {
                "10.208.0.2": {
                    "destination": "10.208.0.2",
                    "interface": "en2",
                    "flags": ["UP", "HOST", "DONE", "STATIC"],
                }
            },
            "pings": {"en2": {"address": "10.208.0.1", "peer_address": "10.208.0.2", "ok": True}},
        },
    }


def in_place(checks, facts, links=LINKS, **kw):
    return checks["mlx_links_in_place"](facts, links, protected=["en0"], pool="10.208.0.0/16", **kw)


def test_links_in_place_and_answering(checks):
    assert in_place(checks, in_place_facts()) is True


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda f: f["links_state"]["pings"]["en2"].update(ok=False), id="no-answer"),
        pytest.param(lambda f: f["links_state"]["pings"].clear(), id="not-pinged"),
        pytest.param(
            lambda f: f["links_state"]["service_info"]["Thunderbolt 1"].update(method="dhcp"), id="not-persistent"
        ),
        pytest.param(lambda f: f["links_state"]["routes"].clear(), id="no-host-route"),
        pytest.param(lambda f: f["interfaces"]["en2"].update(ipv4=[]), id="address-gone"),
        pytest.param(lambda f: f["interfaces"]["bridge0"].update(members=["en2", "en3"]), id="back-in-the-bridge"),
        # out of the bridge now, but its definition would put en2 back at the next boot
        pytest.param(
            lambda f: f["thunderbolt"]["bridge"].update(persistent_members=["en2", "en3"]),
            id="back-in-the-bridge-after-a-reboot",
        ),
        pytest.param(lambda f: f["thunderbolt"]["bridge"].update(persistent_members=None), id="definition-unread"),
        pytest.param(lambda f: f["services"][2].update(enabled=False), id="service-disabled"),
        pytest.param(
            lambda f: f["interfaces"]["en3"].update(ipv4=[{"address": "10.208.0.9", "prefix": 30}]),
            id="stale-address-elsewhere",
        ),
        pytest.param(lambda f: f.pop("links_state"), id="not-probed"),
    ],
)
def test_any_doubt_means_apply(checks, spoil):
    facts = copy.deepcopy(in_place_facts())
    spoil(facts)
    assert in_place(checks, facts) is False


def test_a_changed_plan_means_apply(checks):
    moved = [dict(LINKS[0], address="10.208.0.5", peer_address="10.208.0.6")]
    assert in_place(checks, in_place_facts(), links=moved) is False


def test_refusals_are_left_to_the_module_and_verify_off_needs_no_ping(checks):
    mgmt = [dict(LINKS[0], iface="en0")]
    assert in_place(checks, in_place_facts(), links=mgmt) is False  # the module names the refusal
    facts = in_place_facts()
    facts["links_state"]["pings"].clear()
    assert in_place(checks, facts, verify=False) is True
    assert in_place(checks, in_place_facts(), links=[]) is False  # nothing planned: nothing to skip


def test_wrong_input_is_a_filter_error(checks):
    with controller_imports():
        from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="mlx_links_in_place"):
        checks["mlx_links_in_place"]("nope", LINKS)
    with pytest.raises(AnsibleFilterError, match="only is error or warning, not 'errors'"):
        checks["mlx_preflight_report"]([], only="errors")


def test_files_differ_by_content_mode_or_absence(checks, tmp_path):
    same, other, loose = tmp_path / "hostfile.json", tmp_path / "plan.json", tmp_path / "topology.dot"
    for p, text in ((same, "{}\n"), (other, "old\n"), (loose, "graph\n")):
        p.write_text(text)
        p.chmod(0o600)
    loose.chmod(0o644)
    files = [
        {"path": str(same), "content": "{}\n"},
        {"path": str(other), "content": "new\n"},
        {"path": str(loose), "content": "graph\n"},
        {"path": str(tmp_path / "new" / "x"), "content": ""},
    ]
    assert [f["path"] for f in checks["mlx_files_differ"](files)] == [
        str(other),
        str(loose),
        str(tmp_path / "new" / "x"),
    ]
    assert checks["mlx_files_differ"](files[:1]) == []


def far_end_facts():
    """m2, the other end of LINKS: it holds the /30's second address, so discovery did not
    ping the cable from here (m1 did)."""
    facts = in_place_facts()
    facts["interfaces"]["en2"]["ipv4"] = [{"address": "10.208.0.2", "prefix": 30}]
    facts["links_state"] = {
        "service_info": {"Thunderbolt 1": dict(MANUAL, address="10.208.0.2")},
        "routes": {
            "10.208.0.1": {"destination": "10.208.0.1", "interface": "en2", "flags": ["UP", "HOST", "DONE", "STATIC"]}
        },
        "pings": {},
    }
    return facts


FAR_LINKS = [
    {
        "iface": "en2",
        "address": "10.208.0.2",
        "prefix": 30,
        "peer_address": "10.208.0.1",
        "peer_host": "m1",
        "peer_iface": "en2",
        "cable": "m1:en2~m2:en2",
    }
]


def test_the_far_end_takes_the_answer_of_the_end_that_pinged(checks):
    m1 = in_place_facts()
    assert in_place(checks, far_end_facts(), links=FAR_LINKS, peers={"m1": m1}) is True
    # no peer facts (m1 failed discovery, or the caller passed none): doubt, apply
    assert in_place(checks, far_end_facts(), links=FAR_LINKS) is False
    assert in_place(checks, far_end_facts(), links=FAR_LINKS, peers={}) is False
    # m1's ping went unanswered, or was over other addresses, or m1 pinged another port
    for spoil in ({"ok": False}, {"peer_address": "10.208.0.6"}):
        bad = copy.deepcopy(m1)
        bad["links_state"]["pings"]["en2"].update(spoil)
        assert in_place(checks, far_end_facts(), links=FAR_LINKS, peers={"m1": bad}) is False
    assert in_place(checks, far_end_facts(), links=[dict(FAR_LINKS[0], peer_iface="en3")], peers={"m1": m1}) is False
    # the end that pings never looks at its peers
    assert in_place(checks, in_place_facts(), peers={"m2": None}) is True


def test_cable_hostfiles_measure_a_cable_without_rdma_over_tcp(checks):
    """With a jaccl-ring plan, a TB4 diagonal (not in rdma_cables) is measured over the TCP
    ring on its own /30, never as an RDMA pair it cannot carry."""
    from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_addresses, plan_cables, plan_topology
    from tests.unit.filter.planner_synth import cable, make_facts, mesh_cables

    hosts, cables = mesh_cables(4)
    cables = [
        cable(*c["a"], *c["b"], speed=40) if {c["a"][0], c["b"][0]} in ({"m00", "m02"}, {"m01", "m03"}) else c
        for c in cables
    ]
    links = plan_cables.links(make_facts(hosts, cables))
    topo = plan_topology.topology(links, hosts, rdma=True)
    assert topo["backend"] == "jaccl-ring"
    plan = {
        "topology": topo,
        "ip_plan": plan_addresses.ip_plan(links),
        "coordinators": {h: "10.1.0.%d" % (10 + i) for i, h in enumerate(hosts)},
    }
    items = checks["mlx_cable_hostfiles"](plan)
    kinds = {x["cable"]: x["hostfile"]["backend"] for x in items}
    assert kinds == {cid: "jaccl" if cid in topo["rdma_cables"] else "ring" for cid in plan["ip_plan"]["cables"]}
    assert sorted(kinds.values()).count("ring") == 2
    # each RDMA cable has its ring twin over its own /30 (the fallback); a TCP cable needs none
    for x in items:
        cab = plan["ip_plan"]["cables"][x["cable"]]
        if x["hostfile"]["backend"] == "jaccl":
            assert x["ring_file"] == x["file"][: -len(".json")] + "-ring.json"
            assert [h["ips"] for h in x["ring_hostfile"]["hosts"]] == [[cab["a"]["address"]], [cab["b"]["address"]]]
        else:
            assert x["ring_file"] is None and x["ring_hostfile"] is None


def test_cable_results_keep_the_cable_id_and_slow_cables_use_the_rule(checks):
    mlx_cable_results, mlx_slow_cables = checks["mlx_cable_results"], checks["mlx_slow_cables"]
    loop = [
        {
            "item": {"cable": "m1:en2~m2:en2", "name": "m1:en2 <-> m2:en2"},
            "result": {"results": [{"bus_bandwidth_gbps": 1.0}, {"bus_bandwidth_gbps": 8.0}]},
        },
        {"item": {"cable": "m1:en3~m3:en2", "name": "m1:en3 <-> m3:en2"}, "result": {"results": []}},
        {"skipped": True},
    ]
    assert mlx_cable_results(loop) == [
        {"cable": "m1:en2~m2:en2", "name": "m1:en2 <-> m2:en2", "gbps": 8.0, "runs": [8.0]},
        {"cable": "m1:en3~m3:en2", "name": "m1:en3 <-> m3:en2", "gbps": None, "runs": [None]},
    ]
    res = [{"name": "a", "gbps": 10.0}, {"name": "b", "gbps": 2.0}, {"name": "c", "gbps": 9.0}]
    assert mlx_slow_cables(res) == slow_cables(res) == [{"name": "b", "gbps": 2.0, "median_gbps": 9.0}]


def test_a_cable_measured_again_is_one_entry_with_its_best_run(checks):
    mlx_cable_results, mlx_slow_cables = checks["mlx_cable_results"], checks["mlx_slow_cables"]

    def run(cable, gbps):
        return {
            "item": {"cable": cable, "name": cable.replace("~", " <-> ")},
            "result": {"results": [{"bus_bandwidth_gbps": gbps}] if gbps is not None else []},
        }

    first = [run("a~b", 9.0), run("a~c", 1.0), run("b~c", 8.5), run("c~d", 0.5)]
    # a~c was slow once only (the Mac was busy); c~d is slow every time (a TB4 cable)
    again = [run("a~c", 8.8), run("c~d", 0.6), run("c~d", None)]
    res = mlx_cable_results(first + again)
    assert [(r["cable"], r["gbps"], r["runs"]) for r in res] == [
        ("a~b", 9.0, [9.0]),
        ("a~c", 8.8, [1.0, 8.8]),
        ("b~c", 8.5, [8.5]),
        ("c~d", 0.6, [0.5, 0.6, None]),
    ]
    assert [r["cable"] for r in mlx_slow_cables(mlx_cable_results(first), 0.5)] == ["a~c", "c~d"]
    assert [r["cable"] for r in mlx_slow_cables(res, 0.5)] == ["c~d"]


# ---- mlx_power_plan: the power stage's shortcut --------------------------------------------

DESKTOP = {
    "AC Power": {
        "Sleep On Power Button": 1,
        "sleep": 1,
        "disksleep": 10,
        "displaysleep": 10,
        "autorestart": 0,
        "womp": 1,
    }
}
LAPTOP = {"Battery Power": {"sleep": 1, "disksleep": 10}, "AC Power": {"sleep": 0, "disksleep": 0, "womp": 1}}
ASKED = {"sleep": 0, "disksleep": 0, "autorestart": 1}


def test_power_plan_names_what_differs_on_ac(checks):
    plan = checks["mlx_power_plan"](DESKTOP, ASKED)
    assert plan["changes"] == {
        "sleep": {"before": 1, "after": 0},
        "disksleep": {"before": 10, "after": 0},
        "autorestart": {"before": 0, "after": 1},
    }
    settled = {"AC Power": dict(DESKTOP["AC Power"], sleep=0, disksleep=0, autorestart=1)}
    assert checks["mlx_power_plan"](settled, ASKED)["changes"] == {}


def test_power_plan_of_a_laptop_has_nothing_to_change_and_no_autorestart(checks):
    plan = checks["mlx_power_plan"](LAPTOP, ASKED)
    assert plan["changes"] == {} and plan["unsupported"] == ["autorestart"]


def test_power_plan_unknown_settings_mean_run_the_module(checks):
    assert checks["mlx_power_plan"](None, ASKED) is None
    assert checks["mlx_power_plan"]({"UPS Power": {"sleep": 0}}, ASKED) is None


def test_power_plan_bad_settings_fail_naming_them(checks):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="mlx_power_plan: power_settings: 'hibernatemode'"):
        checks["mlx_power_plan"](DESKTOP, {"hibernatemode": 0})
    with pytest.raises(AnsibleFilterError, match="minutes from 0"):
        checks["mlx_power_plan"](None, {"sleep": "never"})


def test_power_plan_refuses_what_is_not_the_power_fact(checks):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="expects the mlx_cluster.power fact"):
        checks["mlx_power_plan"](["AC Power"], ASKED)


# ---- mlx_wired_limit_in_place: the wired limit's shortcut -------------------------------------


def test_wired_limit_in_place_from_discovery(checks):
    import hashlib

    from ansible.errors import AnsibleFilterError

    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import (
        GIB,
        PLIST_PATH,
        daemon_bytes,
        safe_wired_limit_mb,
    )

    auto = safe_wired_limit_mb(128 * GIB)
    hw = {"memsize": 128 * GIB, "model": "Mac16,9", "ncpu": 32, "wired_limit_mb": auto}
    files = {PLIST_PATH: {"sha256": hashlib.sha256(daemon_bytes(auto)).hexdigest(), "mode": "0644"}}
    assert checks["mlx_wired_limit_in_place"](hw, files, "auto") is True
    assert checks["mlx_wired_limit_in_place"](hw, files, auto) is True  # a number from YAML
    assert checks["mlx_wired_limit_in_place"](dict(hw, wired_limit_mb=0), files, "auto") is False
    assert checks["mlx_wired_limit_in_place"](hw, {}, "auto") is False  # not read: run the module
    assert checks["mlx_wired_limit_in_place"](dict(hw, wired_limit_mb=0), {PLIST_PATH: None}, "off") is True
    with pytest.raises(AnsibleFilterError, match="mlx_wired_limit_in_place: expects"):
        checks["mlx_wired_limit_in_place"]([hw], files, "auto")


def test_port_endpoints_of_the_plan_and_its_fallback_ring(checks):
    ring = {
        "backend": "ring",
        "envs": [],
        "hosts": [{"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []}, {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []}],
    }
    jaccl = {
        "backend": "jaccl",
        "envs": [],
        "hosts": [
            {"ssh": "m1", "ips": ["192.168.1.10"], "rdma": []},
            {"ssh": "m2", "ips": ["192.168.1.11"], "rdma": []},
        ],
    }
    one = checks["mlx_port_endpoints"](jaccl)
    both = checks["mlx_port_endpoints"]([jaccl, ring])
    assert [e["role"] for e in one] == ["coordinator"]
    assert [(e["role"], e["address"]) for e in both] == [
        ("coordinator", "192.168.1.10"),
        ("ring", "10.208.0.1"),
        ("ring", "10.208.0.2"),
    ]
    # no fallback (the role passes none): the plan's alone
    assert checks["mlx_port_endpoints"]([jaccl, None]) == one
    assert [e["port"] for e in checks["mlx_port_endpoints"]([ring], 40000)] == [40000, 40001]


TINY_DIMS = {"layers": 4, "heads": 8, "kv_heads": 4, "head_dim": 8, "intermediate_size": 128, "group_size": None}


@pytest.mark.parametrize(
    "args, count, words",
    [
        pytest.param((TINY_DIMS, 4, ["tensor", "pipeline"], "tiny", True), 0, "", id="splits"),
        pytest.param(
            (TINY_DIMS, 3, ["tensor", "pipeline"], "tiny", True),
            1,
            "4 key/value heads (not a multiple of 3)",
            id="tensor-refused",
        ),
        pytest.param((None, 3, ["tensor"]), 0, "", id="no-dims-no-check"),
        pytest.param((TINY_DIMS, "8", ("pipeline",), "tiny"), 1, "tiny has 4 layer(s)", id="ranks-as-text"),
    ],
)
def test_model_split_is_the_split_check(checks, args, count, words):
    problems = checks["mlx_model_split"](*args)
    assert len(problems) == count and words in "".join(p["msg"] for p in problems)


@pytest.mark.parametrize(
    "args, words",
    [
        pytest.param(([TINY_DIMS], 4, ["tensor"]), "expects weights.dims", id="dims-not-a-dict"),
        pytest.param((TINY_DIMS, 4, ["tensor", "data"]), "modes must be a list of tensor, pipeline", id="unknown-mode"),
        pytest.param((TINY_DIMS, 4, "tensor"), "modes must be a list", id="modes-not-a-list"),
        pytest.param((TINY_DIMS, "four", ["tensor"]), "malformed input", id="ranks-not-a-number"),
    ],
)
def test_model_split_refuses_malformed_input_naming_itself(checks, args, words):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=f"mlx_model_split: .*{words}"):
        checks["mlx_model_split"](*args)


def test_the_plan_artifact_keeps_what_follows_from_the_wiring_and_the_settings(checks):
    """plan.json is rewritten only when the plan changes: the per-run `kept` markers go, and so
    do the /30s of the pool found on ports no cable uses now (the old end of a moved cable,
    which the same run clears); the LAN and the settings' exclusions stay."""
    plan = {
        "ip_plan": {
            "pool": "10.208.0.0/16",
            "cables": {"c": {"network": "10.208.1.0/30", "kept": True}},
            "excluded": [
                {"network": "10.208.94.40/30", "source": "m1:en2"},
                {"network": "10.208.0.0/22", "source": "m1:en0"},
                {"network": "10.208.7.0/30", "source": "exclude"},
                {"network": "192.168.1.0/30", "source": "m2:en5"},
            ],
        }
    }
    out = checks["mlx_plan_artifact"](plan)
    assert out["ip_plan"]["cables"] == {"c": {"network": "10.208.1.0/30"}}
    assert out["ip_plan"]["excluded"] == [
        {"network": "10.208.0.0/22", "source": "m1:en0"},
        {"network": "10.208.7.0/30", "source": "exclude"},
        {"network": "192.168.1.0/30", "source": "m2:en5"},
    ]
    assert plan["ip_plan"]["cables"]["c"]["kept"] is True and len(plan["ip_plan"]["excluded"]) == 4  # not mutated
