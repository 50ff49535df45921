"""plugins/filter/plan_filters.py: the Ansible face of the planner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.filter.planner_synth import cable, make_facts, mesh_cables

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
NAMES = [
    "mlx_links",
    "mlx_topology",
    "mlx_ip_plan",
    "mlx_hostfile",
    "mlx_dot",
    "mlx_discovery_request",
    "mlx_sync_rounds",
    "mlx_sync_copied",
    "mlx_sync_by_cable",
    "mlx_hostfile_writes",
    "mlx_bench_backends",
]


def test_exposes_the_plan_filters(filters):
    assert sorted(filters) == sorted(NAMES)


def test_the_filters_call_the_controllers_planner(filters):
    from ansible_collections.mlx.cluster.plugins.plugin_utils import plan_cables

    hosts, cables = mesh_cables(2)
    assert filters["mlx_links"](make_facts(hosts, cables)) == plan_cables.links(make_facts(hosts, cables))


def test_pipeline(filters):
    hosts, cables = mesh_cables(3)
    links = filters["mlx_links"](make_facts(hosts, cables))
    topo = filters["mlx_topology"](links, hosts, rdma=True)
    plan = filters["mlx_ip_plan"](links)
    assert plan["pool"] == "10.208.0.0/16"
    coords = {h: "10.1.0.%d" % i for i, h in enumerate(hosts, start=10)}
    hf = filters["mlx_hostfile"](topo, plan, coordinator=coords)  # design.md's first name
    assert hf["backend"] == "jaccl" and [h["ssh"] for h in hf["hosts"]] == hosts
    assert filters["mlx_hostfile"](topo, plan, coordinators=coords) == hf
    assert filters["mlx_dot"](links, topo, plan).startswith("graph mlx_cluster {")


@pytest.mark.parametrize(
    "name, args, kwargs, match",
    [
        pytest.param("mlx_links", ("nope",), {}, "mlx_links: input must be a mapping", id="links-type"),
        pytest.param("mlx_links", ({"m1": 3},), {}, "mlx_links: facts for m1 must be", id="links-plan-error"),
        pytest.param(
            "mlx_topology",
            ({"cables": []}, ["a"]),
            {},
            "mlx_topology: a cluster needs at least 2",
            id="topology-plan-error",
        ),
        pytest.param(
            "mlx_topology", ({"cables": []}, "a,b"), {}, "mlx_topology: hosts must be a list", id="topology-hosts-type"
        ),
        pytest.param(
            "mlx_topology",
            ({"cables": []}, ["a", "b"]),
            {"rdma": "yes"},
            "mlx_topology: rdma must be",
            id="topology-rdma-type",
        ),
        pytest.param(
            "mlx_ip_plan",
            ({"cables": []},),
            {"pool": "fd00::/64"},
            "mlx_ip_plan: pool fd00::/64 is not IPv4",
            id="ip-plan-pool",
        ),
        pytest.param(
            "mlx_ip_plan",
            ({"cables": []},),
            {"exclude": "10.0.0.0/8"},
            "mlx_ip_plan: exclude must be a list",
            id="ip-plan-exclude-type",
        ),
        pytest.param(
            "mlx_hostfile",
            ({"hosts": ["a", "b"], "backend": None, "message": "m"}, {"cables": {}}),
            {},
            "mlx_hostfile: no MLX backend fits",
            id="hostfile-no-backend",
        ),
        pytest.param("mlx_hostfile", ({}, []), {}, "mlx_hostfile: plan must be", id="hostfile-plan-type"),
        pytest.param("mlx_dot", ({"cables": []},), {"topology": "x"}, "mlx_dot: topology must be", id="dot-type"),
    ],
)
def test_errors_carry_the_filter_name(filters, filter_error, name, args, kwargs, match):
    with pytest.raises(filter_error, match=match):
        filters[name](*args, **kwargs)


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    hostnames: {hosts}
    facts: {facts}
    ifaces: {{m00: {{en0: {{ipv4: [{{address: 10.208.0.9, prefix: 24}}]}}}}}}
  tasks:
    - name: Run the planner filters through the real templating
      vars:
        links: "{{{{ facts | mlx.cluster.mlx_links }}}}"
        topo: "{{{{ links | mlx.cluster.mlx_topology(hostnames, rdma=dict(hostnames | zip([true, true, true]))) }}}}"
        plan: "{{{{ links | mlx.cluster.mlx_ip_plan(interfaces=ifaces, exclude=['10.208.1.0/24']) }}}}"
        hostfile: >-
          {{{{ topo | mlx.cluster.mlx_hostfile(plan,
               coordinators={{'m00': '10.1.0.1', 'm01': '10.1.0.2', 'm02': '10.1.0.3'}}) }}}}
      ansible.builtin.copy:
        dest: "{{{{ out }}}}"
        content: "{{{{ {{'links': links, 'topo': topo, 'plan': plan, 'hostfile': hostfile,
                       'dot': links | mlx.cluster.mlx_dot(topo, plan)}} | to_json }}}}"
        mode: "0600"
    - name: A planning error fails the task with the filter's name
      block:
        - name: Plan one host
          ansible.builtin.debug:
            msg: "{{{{ facts | mlx.cluster.mlx_links | mlx.cluster.mlx_topology(['m00']) }}}}"
      rescue:
        - name: Check the error
          ansible.builtin.assert:
            that: "'mlx_topology: a cluster needs at least 2 hosts' in ansible_failed_result.msg"
"""


def _env(tmp_path):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
    )
    return env


def test_filters_under_ansible_playbook(tmp_path):
    hosts, cables = mesh_cables(3)
    facts = make_facts(hosts, cables + [cable("m00", "en9", "m01", "en9")])
    book = tmp_path / "play.yml"
    book.write_text(PLAYBOOK.format(hosts=json.dumps(hosts), facts=json.dumps(facts)))
    out = tmp_path / "out.json"
    run = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "out=%s" % out,
            "-e",
            "ansible_python_interpreter=%s" % sys.executable,
            str(book),
        ],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert len(result["links"]["cables"]) == 4
    assert result["topo"]["backend"] == "jaccl"
    # m00-m01 has two cables, the other pairs one: one device per pair (as MLX)
    assert result["hostfile"]["hosts"][0]["rdma"] == [None, "rdma_en3", "rdma_en4"]
    for entry in result["plan"]["cables"].values():
        assert not entry["network"].startswith(("10.208.0.", "10.208.1."))
    assert result["dot"].startswith("graph mlx_cluster {")


def test_ansible_doc_renders_every_filter(tmp_path):
    run = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "filter", "--json"] + [f"mlx.cluster.{n}" for n in NAMES],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    docs = json.loads(run.stdout)
    assert len(docs) == len(NAMES)
    for name, doc in docs.items():
        assert name.rsplit(".", 1)[-1] in NAMES
        assert doc["doc"]["short_description"] and doc["examples"] and doc["return"]["_value"]
        assert "_input" in doc["doc"]["options"]


def test_what_the_models_stage_moved_to_each_mac(filters):
    """Over a cable: what the receiver counted; otherwise: the files whose size differed from the
    source's before the copy; a Mac measured neither way (its manifest skipped) is left out."""
    source = {"config.json": {"size": 900}, "a.safetensors": {"size": 5000}, "b.safetensors": {"size": 7000}}
    before = {
        "m1": {"files": dict(source)},  # the source itself: nothing to copy
        "m2": {"files": {"config.json": {"size": 900}, "a.safetensors": {"size": 12}}},  # a part, b missing
        "m3": {"skipped": True},  # got it over a cable: its receiver measured it
        "m4": {"skipped": True},
    }
    received = {"m3": {"bytes": 4321, "copied": ["a.safetensors", "b.safetensors"]}, "m1": None}
    got = filters["mlx_sync_copied"](source, ["m1", "m2", "m3", "m4"], before, received)
    assert got == {
        "m1": {"bytes": 0, "files": 0, "via": "rsync"},
        "m2": {"bytes": 12000, "files": 2, "via": "rsync"},
        "m3": {"bytes": 4321, "files": 2, "via": "thunderbolt"},
    }
    with pytest.raises(AnsibleFilterError, match="mlx_sync_copied: before must be"):
        filters["mlx_sync_copied"](source, ["m1"], None, {})
    # what each cable carried, from every send to the Mac (two cables, and the tree's direct share)
    sent = {
        "m3": [
            {"address": "10.0.0.2", "cable": "m1:en2 <-> m3:en2", "bytes": 3000},
            {"address": "10.0.0.6", "cable": "m1:en5 <-> m3:en5", "bytes": 1000},
            {"address": "10.0.0.2", "cable": "m1:en2 <-> m3:en2", "bytes": 321},
        ],
        "m2": [{"address": "10.0.0.10", "cable": "m1:en3 <-> m2:en3", "bytes": 99}],  # over rsync: not a receiver's
    }
    got = filters["mlx_sync_copied"](source, ["m1", "m2", "m3", "m4"], before, received, sent)
    assert got["m3"]["cables"] == [
        {"cable": "m1:en2 <-> m3:en2", "bytes": 3321},
        {"cable": "m1:en5 <-> m3:en5", "bytes": 1000},
    ]
    assert "cables" not in got["m2"] and "cables" not in got["m1"]
    with pytest.raises(AnsibleFilterError, match="mlx_sync_copied: sent must be"):
        filters["mlx_sync_copied"](source, ["m1"], {}, {}, [])
