"""The plan step (planner.make_plan, the action mlx.cluster.mlx_cluster_plan): the same plan the
filters give one by one, one absolute directory on every Mac (right when homes differ, refused
with the fix when it cannot be), what discovery reads per stage, and each fact written once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.plugin_utils import (
    plan_addresses,
    plan_cables,
    plan_common,
    plan_hostfile,
    plan_topology,
    planner,
)
from tests.unit.filter.planner_synth import cable, make_facts

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ["m1", "m2", "m3"]
CABLES = [cable("m1", "en2", "m2", "en2"), cable("m2", "en3", "m3", "en2"), cable("m3", "en3", "m1", "en3")]


def cluster_facts(homes=None, rdma=False):
    tb = make_facts(HOSTS, CABLES)
    homes = homes or {}
    return {
        h: {
            "thunderbolt": tb[h],
            "interfaces": {},
            "rdma": {"rdma_ctl": "disabled", "devices": []} if not rdma else None,
            "mgmt": {"iface": "en0", "address": "10.1.0.%d" % (i + 11)},
            "home": homes.get(h, "/Users/admin"),
            "disk": {"path": homes.get(h, "/Users/admin"), "free_bytes": 1},
        }
        for i, h in enumerate(HOSTS)
    }


def settings(**kw):
    base = {
        "hosts": HOSTS,
        "coordinators": {h: "10.1.0.%d" % (i + 11) for i, h in enumerate(HOSTS)},
        "ssh": {h: {"host": h} for h in HOSTS},
        "backend": "auto",
        "rdma_wanted": True,
        "rdma_required": False,
        "rdma_through_docks": False,
        "ip_pool": "10.208.0.0/16",
        "exclude_networks": [],
        "envs": [],
        "remote_dir": "",
    }
    base.update(kw)
    return base


def test_plan_is_the_filters_composed():
    facts = cluster_facts()
    plan = planner.make_plan(facts, settings())
    links = plan_cables.links({h: facts[h]["thunderbolt"] for h in HOSTS})
    topo = plan_topology.topology(links, HOSTS, rdma={h: facts[h]["rdma"] for h in HOSTS})
    ips = plan_addresses.ip_plan(links, pool="10.208.0.0/16", interfaces={h: {} for h in HOSTS}, exclude=[])
    assert plan["links"] == links and plan["topology"] == topo and plan["ip_plan"] == ips
    assert plan["hostfile"] == plan_hostfile.hostfile(topo, ips, coordinators=settings()["coordinators"], envs=[])
    assert plan["hostfile"]["backend"] == "ring"
    assert plan["hosts"] == HOSTS and plan["ssh"] == settings()["ssh"]
    assert set(plan) == {
        "hosts",
        "links",
        "topology",
        "ip_plan",
        "coordinators",
        "hostfile",
        "ssh",
        "remote_dir",
        "hostfile_name",
        "hostfile_path",
        "fallback",
    }
    assert plan["fallback"] is None


def _rdma_facts():
    """Every cable TB5 with its RDMA devices PORT_ACTIVE at both ends: the plan is jaccl."""
    facts = cluster_facts()
    for a, ai, b, bi in (("m1", "en2", "m2", "en2"), ("m2", "en3", "m3", "en2"), ("m3", "en3", "m1", "en3")):
        for host, iface in ((a, ai), (b, bi)):
            rdma = facts[host]["rdma"] = (
                facts[host]["rdma"]
                if facts[host]["rdma"].get("rdma_ctl") == "enabled"
                else {"rdma_ctl": "enabled", "devices": [], "usable": True, "problems": []}
            )
            rdma["devices"].append(
                {
                    "name": "rdma_" + iface,
                    "iface": iface,
                    "port_state": "PORT_ACTIVE",
                    "active_mtu": 4096,
                    "ipv4_gid": True,
                    "gids": [],
                }
            )
    return facts


def test_the_ring_fallback_is_planned_over_the_same_cables_only_for_rdma_plans():
    facts = _rdma_facts()
    plan = planner.make_plan(facts, settings(fallback_backend="ring"))
    assert plan["hostfile"]["backend"] == "jaccl"
    fb = plan["fallback"]
    assert (fb["backend"], fb["from"], fb["hostfile_name"]) == ("ring", "jaccl", "hostfile-ring.json")
    assert fb["hostfile"] == plan_hostfile.hostfile(plan["topology"], plan["ip_plan"], backend="ring")
    cable_addresses = {e["address"] for host in plan["ip_plan"]["hosts"].values() for e in host}
    assert {ip for h in fb["hostfile"]["hosts"] for ip in h["ips"]} <= cable_addresses
    assert planner.make_plan(facts, settings())["fallback"] is None  # not set
    assert planner.make_plan(cluster_facts(), settings(fallback_backend="ring"))["fallback"] is None  # ring plan
    named = planner.make_plan(facts, settings(fallback_backend="ring", hostfile_name="lab.json"))
    assert named["fallback"]["hostfile_name"] == "lab-ring.json"


def test_an_unknown_fallback_is_refused():
    with pytest.raises(plan_common.PlanError, match="fallback_backend must be one of"):
        planner.make_plan(_rdma_facts(), settings(fallback_backend="mpi"))


def test_rdma_not_wanted_plans_no_rdma_and_is_not_required():
    plan = planner.make_plan(cluster_facts(), settings(rdma_wanted=False, rdma_required=True))
    assert plan["topology"]["backend"] == "ring"


def test_no_backend_gives_no_hostfile():
    facts = cluster_facts()
    for h in HOSTS:
        facts[h]["thunderbolt"] = make_facts(HOSTS, [])[h]
    plan = planner.make_plan(facts, settings())
    assert plan["hostfile"] is None and plan["topology"]["backend"] is None


def test_remote_dir_defaults_to_the_shared_home():
    plan = planner.make_plan(cluster_facts(), settings())
    assert plan["remote_dir"] == "/Users/admin/mlx-cluster"
    assert plan["hostfile_path"] == "/Users/admin/mlx-cluster/hostfile.json"
    assert plan["hostfile_name"] == planner.HOSTFILE_NAME


def test_homes_that_differ_need_one_absolute_directory():
    facts = cluster_facts(homes={"m2": "/Users/alice"})
    with pytest.raises(plan_common.PlanError) as err:
        planner.make_plan(facts, settings())
    msg = err.value.message
    assert "m1 /Users/admin/mlx-cluster" in msg and "m2 /Users/alice/mlx-cluster" in msg
    assert "mlx_cluster_remote_dir" in msg and "e.g. /opt/mlx-cluster, made once on each Mac" in msg
    assert "not below /Users/Shared" in msg
    plan = planner.make_plan(facts, settings(remote_dir="/opt/mlx-cluster/", hostfile_name="h.json"))
    assert plan["remote_dir"] == "/opt/mlx-cluster"
    assert plan["hostfile_path"] == "/opt/mlx-cluster/h.json"


@pytest.mark.parametrize("setting", ["mlx-cluster", "./x", "~alice/x"])
def test_relative_remote_dir_is_refused(setting):
    with pytest.raises(plan_common.PlanError, match="relative"):
        planner.make_plan(cluster_facts(), settings(remote_dir=setting))


@pytest.mark.parametrize(
    "setting, match",
    [
        ("/opt/mlx cluster", "holds whitespace or characters a shell reads"),
        ("~/mlx-cluster;id", "holds whitespace or characters a shell reads"),
        ("/opt/$(id)", "holds whitespace or characters a shell reads"),
        ("~/../shared", "holds '.' or '..' components"),
    ],
)
def test_a_remote_dir_a_shell_would_read_is_refused(setting, match):
    """The directory reaches the cluster key's forced command and rsync's remote paths: the
    toolkit's one rule for such paths (module_utils/mlx_files.py unsafe_path), naming the setting."""
    with pytest.raises(plan_common.PlanError, match=match) as err:
        planner.make_plan(cluster_facts(), settings(remote_dir=setting))
    assert err.value.message.startswith("mlx_cluster_remote_dir")
    with pytest.raises(plan_common.PlanError, match=match):
        planner.discovery_request(remote_dir_setting=setting)


def test_a_home_a_shell_would_read_is_refused_once_resolved():
    with pytest.raises(
        plan_common.PlanError,
        match=r"mlx_cluster_remote_dir \(~/mlx-cluster in each Mac's home\) "
        r"'/Users/a b/mlx-cluster' holds whitespace",
    ):
        planner.make_plan(cluster_facts(homes={h: "/Users/a b" for h in ("m1", "m2", "m3")}), settings())


def test_unknown_home_is_named():
    facts = cluster_facts()
    facts["m3"]["home"] = None
    facts["m3"]["disk"]["path"] = None
    with pytest.raises(plan_common.PlanError, match="m3: its home directory is unknown"):
        planner.make_plan(facts, settings())


def test_missing_facts_name_the_host():
    facts = cluster_facts()
    del facts["m2"]
    with pytest.raises(plan_common.PlanError, match="no discovery facts for m2"):
        planner.make_plan(facts, settings())


@pytest.mark.parametrize("backend", ["auto", "ring"])
def test_one_mac_under_two_inventory_names_is_named_before_the_topology(backend):
    """m4 is m1 reached by another name (an alias): its ports report m1's domain UUIDs. With
    the backend named, the topology would fail first, blaming m1's and m4's cables."""
    facts = cluster_facts()
    facts["m4"] = facts["m1"]
    hosts = HOSTS + ["m4"]
    with pytest.raises(plan_common.PlanError) as err:
        planner.make_plan(facts, settings(hosts=hosts, backend=backend, ssh={h: {"host": h} for h in hosts}))
    assert err.value.message.startswith("m1 and m4 report the same Thunderbolt ports (domain UUIDs)"), err.value
    assert "Keep one inventory host for each Mac" in err.value.message


def test_hostfile_name_is_a_name():
    with pytest.raises(plan_common.PlanError, match="file name"):
        planner.make_plan(cluster_facts(), settings(hostfile_name="a/b.json"))


@pytest.mark.parametrize(
    "run_tags,skip_tags,probe,read,sudo",
    [
        (["all"], [], True, True, True),
        (["network"], [], True, False, False),
        (["hostfile"], [], False, True, False),
        (["preflight"], [], False, False, True),
        (["rdma_check"], [], False, False, True),
        (["network", "hostfile"], [], True, True, False),
        (["all"], ["network"], False, True, True),
        (["tagged"], [], True, True, True),
        (["all"], ["hostfile", "network"], False, False, True),
        (["all"], ["preflight"], True, True, False),
    ],
)
def test_discovery_reads_what_the_later_stages_need(run_tags, skip_tags, probe, read, sudo):
    got = planner.discovery_request(run_tags, skip_tags, "", planner.HOSTFILE_NAME)
    power = bool({"all", "tagged", "power"} & set(run_tags)) and "power" not in skip_tags
    assert got == {
        "probe_links": probe,
        "probe_sudo": sudo,
        "read_updates": sudo,
        "read_power": power,
        "read_files": ["~/mlx-cluster/hostfile.json"] if read else [],
        "cluster_dir": "~/mlx-cluster",
    }


def test_a_configure_run_reads_no_power_or_update_settings():
    got = planner.discovery_request(["network", "hostfile"], [], "", planner.HOSTFILE_NAME)
    assert not got["read_power"] and not got["read_updates"] and not got["probe_sudo"]
    assert planner.discovery_request(["power"], [], "", planner.HOSTFILE_NAME)["read_power"]


def test_discovery_reads_the_wired_limit_daemon_only_when_the_power_stage_manages_it():
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import PLIST_PATH

    assert planner.discovery_request(["power"], [], "", "h.json", "auto")["read_files"] == [PLIST_PATH]
    assert planner.discovery_request(["power"], [], "", "h.json", "off")["read_files"] == [PLIST_PATH]
    assert planner.discovery_request(["power"], [], "", "h.json", "")["read_files"] == []  # not managed
    assert planner.discovery_request(["preflight"], [], "", "h.json", "auto")["read_files"] == []
    assert planner.discovery_request(["all"], ["power"], "", "h.json", "auto")["read_files"] == ["~/mlx-cluster/h.json"]


def test_discovery_reads_the_hostfile_where_the_plan_puts_it():
    for setting in ("", "~/x/", "/opt/mlx-cluster"):
        (path,) = planner.discovery_request(["hostfile"], [], setting, "h.json")["read_files"]
        home = "/Users/admin"
        expanded = home + path[1:] if path.startswith("~") else path
        facts = cluster_facts()
        assert (
            planner.make_plan(facts, settings(remote_dir=setting, hostfile_name="h.json"))["hostfile_path"] == expanded
        )


def test_every_stage_of_the_table_is_a_play_and_its_tags():
    plays = set()
    for play_file in (ROOT / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(play_file.read_text()):
            plays.add(tuple(play.get("tags") or []))
    assert set(planner.STAGE_NEEDS) <= plays


def test_the_tags_a_run_may_name_are_the_plays_own():
    tags = set()
    for play_file in (ROOT / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(play_file.read_text()):
            tags |= set(play.get("tags") or [])
    assert set(planner.STAGE_TAGS) == (tags - set(planner.ANSIBLE_TAGS)) | {"validate"}
    assert len(planner.STAGE_TAGS) == len(set(planner.STAGE_TAGS))


def test_a_misspelt_tag_is_named_with_what_it_would_have_done():
    assert planner.unknown_tags(["rdma_check", "all"], ["never", "capture"]) == []
    (msg,) = planner.unknown_tags(["rdma_chek", "network"])
    assert msg.startswith("--tags rdma_chek: no stage has that tag, so it selects no stage (check the spelling; ")
    assert "rdma_check, power, network" in msg
    (msg,) = planner.unknown_tags(["all"], ["modles", "benchmrk", "env"])
    assert msg.startswith("--skip-tags modles,benchmrk: no stage has these tags, so it skips nothing")


# ---- each fact once: the YAML that cannot import the table is checked against it ----------


def _spec(role, entry="main"):
    return yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"][entry]


def test_backend_choices_are_the_planners():
    assert (
        tuple(_spec("mlx_cluster", "validate")["options"]["mlx_cluster_backend"]["choices"]) == planner.BACKEND_CHOICES
    )
    validate = (ROOT / "roles" / "mlx_cluster" / "tasks" / "validate.yml").read_text()
    assert "mlx_cluster_backend in %s" % list(planner.BACKEND_CHOICES) in validate
    from ansible_collections.mlx.cluster.plugins.modules import mlx_cluster_plan

    doc = yaml.safe_load(mlx_cluster_plan.DOCUMENTATION)
    assert tuple(doc["options"]["backend"]["choices"]) == planner.BACKEND_CHOICES


def test_fallback_choices_are_the_planners():
    spec = _spec("mlx_cluster", "validate")["options"]["mlx_cluster_fallback_backend"]
    assert tuple(spec["choices"]) == planner.FALLBACK_CHOICES and spec["default"] == ""
    validate = (ROOT / "roles" / "mlx_cluster" / "tasks" / "validate.yml").read_text()
    assert "mlx_cluster_fallback_backend in %s" % list(planner.FALLBACK_CHOICES) in validate
    from ansible_collections.mlx.cluster.plugins.modules import mlx_cluster_plan

    doc = yaml.safe_load(mlx_cluster_plan.DOCUMENTATION)
    assert tuple(doc["options"]["fallback_backend"]["choices"]) == planner.FALLBACK_CHOICES


def test_hostfile_name_default_is_the_planners():
    assert (
        yaml.safe_load((ROOT / "roles" / "hostfile" / "defaults" / "main.yml").read_text())["hostfile_name"]
        == planner.HOSTFILE_NAME
    )
    assert _spec("hostfile")["options"]["hostfile_name"]["default"] == planner.HOSTFILE_NAME


def test_plan_settings_defaults_are_the_roles():
    from ansible_collections.mlx.cluster.plugins.modules import mlx_cluster_plan

    options = yaml.safe_load(mlx_cluster_plan.DOCUMENTATION)["options"]
    defaults = yaml.safe_load((ROOT / "roles" / "mlx_cluster" / "defaults" / "main.yml").read_text())
    for option in (
        "backend",
        "rdma_wanted",
        "rdma_required",
        "rdma_through_docks",
        "ip_pool",
        "exclude_networks",
        "envs",
        "remote_dir",
        "fallback_backend",
    ):
        assert options[option]["default"] == defaults["mlx_cluster_" + option], option
    assert options["ip_pool"]["default"] == plan_addresses.DEFAULT_POOL


def test_every_backend_list_is_the_planners():
    """One tuple in Python (module_utils/mlx_launch, which both rooms may import); the filters'
    documentation and the server role's check list the same backends."""
    from ansible_collections.mlx.cluster.plugins.module_utils import mlx_launch, mlx_server

    assert mlx_server.BACKENDS is planner.BACKENDS is mlx_launch.BACKENDS
    for name, choices in (("mlx_topology", planner.BACKEND_CHOICES), ("mlx_hostfile", planner.BACKENDS)):
        doc = yaml.safe_load((ROOT / "plugins" / "filter" / f"{name}.yml").read_text())["DOCUMENTATION"]
        assert tuple(doc["options"]["backend"]["choices"]) == choices, name
    start = (ROOT / "roles" / "mlx_server" / "tasks" / "start.yml").read_text()
    (listed,) = re.findall(r"mlx_cluster_plan\.hostfile\.backend in (\[[^]]*\])", start)
    assert set(yaml.safe_load(listed)) == set(planner.BACKENDS)


def test_preflight_thresholds_are_the_roles():
    from ansible_collections.mlx.cluster.plugins.plugin_utils import preflight

    defaults = yaml.safe_load((ROOT / "roles" / "preflight" / "defaults" / "main.yml").read_text())
    spec = _spec("preflight")["options"]
    for key in ("min_macos_rdma", "min_memory_gb", "min_free_disk_gb"):
        assert defaults["preflight_" + key] == preflight.DEFAULTS[key] == spec["preflight_" + key]["default"], key


def test_hostfile_text_is_what_to_nice_json_wrote_so_existing_hostfiles_stay_right():
    from ansible.plugins.filter.core import to_nice_json

    plan = planner.make_plan(cluster_facts(), settings())
    assert planner.hostfile_text(plan["hostfile"]) == to_nice_json(plan["hostfile"], indent=2) + "\n"


def test_hostfile_writes_only_what_differs():
    import hashlib

    plan = planner.make_plan(cluster_facts(), settings())
    (entry,) = planner.hostfile_writes(plan)
    assert entry == {"path": plan["hostfile_path"], "content": planner.hostfile_text(plan["hostfile"]), "mode": "0600"}
    right = {"sha256": hashlib.sha256(entry["content"].encode()).hexdigest(), "mode": "0600"}
    assert planner.hostfile_writes(plan, {plan["hostfile_path"]: right}) == []
    assert planner.hostfile_writes(plan, {plan["hostfile_path"]: dict(right, mode="0644")}) == [entry]
    assert planner.hostfile_writes(plan, {plan["hostfile_path"]: None}) == [entry]
    assert planner.hostfile_writes(dict(plan, hostfile=None)) == []


def test_backends_side_by_side_get_the_plans_hostfiles_or_the_ones_it_would_write():
    """benchmark_backends: the planned backend keeps the plan's hostfile, the ring over the cables
    is the fallback's when there is one, ring-lan a ring over the coordinator addresses; an empty
    list is the plan's backend alone."""
    facts = _rdma_facts()
    plan = planner.make_plan(facts, settings(fallback_backend="ring"))
    assert planner.side_by_side(plan, []) == [
        {
            "name": "jaccl",
            "backend": "jaccl",
            "over": "thunderbolt",
            "hostfile": plan["hostfile"],
            "hostfile_name": "hostfile.json",
            "content": planner.hostfile_text(plan["hostfile"]),
        }
    ]
    jaccl, ring, lan = planner.side_by_side(plan, ["jaccl", "ring", "ring-lan"])
    assert (ring["hostfile"], ring["hostfile_name"]) == (plan["fallback"]["hostfile"], "hostfile-ring.json")
    assert (lan["backend"], lan["over"], lan["hostfile_name"]) == ("ring", "lan", "hostfile-ring-lan.json")
    assert lan["hostfile"] == {
        "backend": "ring",
        "envs": [],
        "hosts": [{"ssh": h, "ips": ["10.1.0.%d" % (i + 11)], "rdma": []} for i, h in enumerate(HOSTS)],
    }
    # without a fallback the ring over the cables is the one the plan would write
    no_fallback = planner.make_plan(facts, settings())
    assert planner.side_by_side(no_fallback, ["ring"])[0]["hostfile"] == plan["fallback"]["hostfile"]
    # a ring plan: the ring is the plan's own; jaccl there is refused naming why
    ring_plan = planner.make_plan(cluster_facts(), settings())
    assert planner.side_by_side(ring_plan, ["ring"])[0]["hostfile_name"] == "hostfile.json"
    with pytest.raises(plan_common.PlanError, match="benchmark_backends jaccl: .*RDMA"):
        planner.side_by_side(ring_plan, ["ring", "jaccl"])


@pytest.mark.parametrize(
    ("names", "coordinators", "message"),
    [
        (["ring", "mpi"], None, r"benchmark_backends: 'mpi' not one of jaccl, jaccl-ring, ring, ring-lan"),
        (["ring", "ring"], None, "benchmark_backends lists ring more than once"),
        ("ring", None, "benchmark_backends must be a list"),
        (["ring-lan"], {"m1": "10.1.0.11", "m2": "", "m3": "10.1.0.13"}, "ring-lan: no coordinator address for m2"),
        (["ring-lan"], {"m1": "10.1.0.11", "m2": "169.254.3.4", "m3": "10.1.0.13"}, "ring-lan: .*169.254.3.4 for m2"),
    ],
)
def test_backends_side_by_side_refused_naming_what_to_fix(names, coordinators, message):
    plan = planner.make_plan(cluster_facts(), settings(**({"coordinators": coordinators} if coordinators else {})))
    with pytest.raises(plan_common.PlanError, match=message):
        planner.side_by_side(plan, names)
