"""The fault suite: each fault ends in bounded time with a message naming host, port/cable
and fix; nothing hangs; after repair a re-run converges with no manual step.
Writes docs/reliability.md (tests/e2e/reliability.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.reliability import Fault
from tests.e2e.runner import ROOT, host_vars, is_mutating, run_site
from tests.unit.roles.test_validate_names import validate

pytestmark = [pytest.mark.sim, pytest.mark.slow]


def plan_of(cluster):
    return json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())


def fail_text(run):
    return "\n".join(m for _, _, m in run.failures())


def debug_lines(run, task):
    """The msg lines of a debug task's result (first host that ran it)."""
    for e in run.events:
        d = e.get("event_data", {})
        if e.get("event") == "runner_on_ok" and d.get("task") == task:
            msg = d["res"].get("msg")
            return msg if isinstance(msg, list) else [msg]
    return []


def mutating_hosts(cluster):
    return {h for h in cluster.hosts if any(is_mutating(a) for a in cluster.argv_log(h))}


def cable_answers(cluster, link, host):
    """A ping over one planned cable from `host`'s end (macOS flags, source address)."""
    return (
        cluster.exec(
            host, ["ping", "-c", "2", "-o", "-t", "3", "-S", link["address"], link["peer_address"]], timeout=30
        ).returncode
        == 0
    )


def addresses(cluster, host, iface):
    out = json.loads(cluster.exec(host, ["ip", "-j", "addr", "show", "dev", iface]).stdout or "[]")
    return [a["local"] for d in out for a in d.get("addr_info", []) if a.get("family") == "inet"]


DROPPED = "Name the Macs that dropped out of the network stage, and their cables"


def converge(cluster, **kw):
    first = run_site(cluster, **kw)
    assert first.rc == 0, first.failures()
    return first


def mutations(cluster):
    return [a for h in cluster.hosts for a in cluster.argv_log(h) if is_mutating(a)]


def test_unplugged_cable_is_named_and_replanning_touches_only_it(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    converge(cluster)
    before = plan_of(cluster)["ip_plan"]["cables"]
    cid = sorted(before)[0]
    with Fault("cable unplugged (mesh4)") as f:
        cluster.unplug(cid)
        try:
            check = run_site(cluster, tags=["rdma_check"])
            text = check.preflight_summary()
            f.message(next(ln for ln in text.splitlines() if "stale" in ln or "no cable" in ln))
            a = before[cid]["a"]
            assert f"{a['host']}:{a['iface']}" in text and "unplugged or moved" in text, text
            after_run = converge(cluster)
            after = plan_of(cluster)["ip_plan"]["cables"]
            assert cid not in after
            assert {k: v["network"] for k, v in after.items()} == {
                k: v["network"] for k, v in before.items() if k != cid
            }
            assert plan_of(cluster)["topology"]["backend"] == "jaccl-ring"
            assert after_run.changed() > 0
        finally:
            cluster.plug(cid)
        converge(cluster)  # the replug's repair: the cable's /30 back, jaccl again
        assert plan_of(cluster)["ip_plan"]["cables"][cid]["network"] == before[cid]["network"]
        assert plan_of(cluster)["topology"]["backend"] == "jaccl"
        f.converged(run_site(cluster))


@pytest.mark.parametrize("mode", ["sshd", "power"])
def test_a_mac_lost_in_the_middle_of_the_network_stage(sim_cluster, mode):
    """m2's sshd (or its power) dies at its second `networksetup -setmanual`: m2 is named,
    the other Macs finish and are not failed for their cables to it, every cable between
    them works; once m2 is back, a re-run changes m2 only."""
    cluster = sim_cluster("mesh4")
    cluster.reset()
    name = {
        "sshd": "sshd dies in the middle of the network stage",
        "power": "a Mac loses power in the middle of the network stage",
    }[mode]
    with Fault(name) as f:
        with cluster.die_on("m2", ["networksetup", "-setmanual"], nth=2, mode=mode) as died:
            start = time.monotonic()
            run = run_site(cluster, tags=["network", "hostfile"])
            took = time.monotonic() - start
        assert died["fired"] is not None, "the fault did not fire"
        assert run.rc != 0
        # ServerAliveInterval x ServerAliveCountMax (ansible.cfg) bounds a silent Mac
        assert took < 150, took
        assert {h for h, _, _ in run.failures()} == {"m2"}, run.failures()
        (line,) = debug_lines(run, DROPPED)
        f.message(line)
        assert line.startswith("m2 dropped out of the network stage"), line
        assert "m1:en2 <-> m2:en2" in line and "Fix: bring m2 back" in line, line
        plan = plan_of(cluster)
        for h in ("m1", "m3", "m4"):
            for link in plan["ip_plan"]["hosts"][h]:
                assert addresses(cluster, h, link["iface"]) == [link["address"]], (h, link)
                if link["peer_host"] != "m2" and link["cable"].startswith(f"{h}:"):
                    assert cable_answers(cluster, link, h), (h, link)
        # repaired: only m2 changes
        if mode == "power":
            cluster.reboot("m2")
        else:
            cluster.start_sshd("m2")
        cluster.clear_argv_logs()
        again = run_site(cluster, tags=["network", "hostfile"])
        assert again.rc == 0, again.failures()
        assert mutating_hosts(cluster) == {"m2"}
        f.converged(run_site(cluster, tags=["network", "hostfile"]))


@pytest.mark.parametrize(
    "frm, to, new_id, backend, changed",
    [
        pytest.param("m1:en2", "m1:en5", "m1:en5~m2:en2", "jaccl", {"m1", "m2"}, id="port"),
        # m1 and m2 no longer share a cable: a ring; m4 is left alone
        pytest.param("m2:en2", "m3:en5", "m1:en2~m3:en5", "jaccl-ring", {"m1", "m2", "m3"}, id="mac"),
    ],
)
def test_cable_moved_to_another_port_or_mac(sim_cluster, frm, to, new_id, backend, changed):
    """The check names the old port (still addressed, no cable) and the new cable (not
    addressed yet); the network stage then changes that cable's Macs only, clears the old
    end and keeps every other cable's /30."""
    cluster = sim_cluster("mesh4")
    cluster.reset()
    converge(cluster)
    before = plan_of(cluster)["ip_plan"]["cables"]
    old_id = "m1:en2~m2:en2"
    kind = "port" if frm.split(":")[0] == to.split(":")[0] else "Mac"
    with Fault(f"cable moved to another {kind} ({frm} -> {to})") as f:
        cluster.move(frm, to)
        try:
            text = run_site(cluster, tags=["rdma_check"]).preflight_summary()
            stale = next(ln for ln in text.splitlines() if f"{frm} still has the cluster address" in ln)
            f.message(stale)
            assert "unplugged or moved" in stale, text
            a, b = new_id.split("~")
            assert f"cable {a} <-> {b} has no cluster address at both ends yet" in text, text
            cluster.clear_argv_logs()
            converge(cluster)
            after = plan_of(cluster)
            cables = after["ip_plan"]["cables"]
            assert old_id not in cables and new_id in cables
            assert {k: v["network"] for k, v in cables.items() if k != new_id} == {
                k: v["network"] for k, v in before.items() if k != old_id
            }
            assert after["topology"]["backend"] == backend
            assert mutating_hosts(cluster) == changed
            host, iface = frm.split(":")
            assert addresses(cluster, host, iface) == []  # the old end was cleared
            new = next(x for x in after["ip_plan"]["hosts"][a.split(":")[0]] if x["cable"] == new_id)
            assert cable_answers(cluster, new, a.split(":")[0])
            f.converged(run_site(cluster))
        finally:
            cluster.reset()


@pytest.mark.parametrize(
    "name, host, fault, repair, key, expected",
    [
        pytest.param(
            "an RDMA port PORT_DOWN on a cable that is seen",
            "m3",
            {"rdma_port_down": ["en3"]},
            {"rdma_port_down": []},
            "PORT_DOWN",
            ["m3:rdma_en3 is PORT_DOWN", "reseat or replace the cable on m3:en3"],
            id="port-down",
        ),
        pytest.param(
            "RDMA enabled but no devices (Thunderbolt 4 Mac)",
            "m2",
            {"tb_version": 4},
            {"tb_version": 5},
            "no RDMA devices",
            # its cables negotiated TB4 speed too
            ["m2 has no RDMA devices", "Thunderbolt 5", "40 Gb/s (TB4)"],
            id="tb4-no-devices",
        ),
    ],
)
def test_rdma_faults_are_named_by_rdma_check(sim_cluster, name, host, fault, repair, key, expected):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    required = {"mlx_cluster_rdma_required": True}
    with Fault(name) as f:
        cluster.set_host(host, **fault)
        cluster.clear_argv_logs()
        try:
            run = run_site(cluster, tags=["rdma_check"], extravars=required)
            assert run.rc != 0
            text = fail_text(run)
            f.message(next(ln for ln in text.splitlines() if key in ln))
            assert all(x in text for x in expected), text
            assert mutations(cluster) == []
        finally:
            cluster.set_host(host, **repair)
        f.converged(run_site(cluster, tags=["rdma_check"], extravars=required))


# (fault, Mac, what it reports, what the others report, the message, more it must say)
MACOS_SKEW = [
    (
        "macOS versions differ (26.1 on one Mac)",
        "m4",
        {"macos": "26.1"},
        {"macos": "26.2"},
        "m4 runs macOS 26.1 while m1, m2, m3 run 26.2",
        "Software Update",
    ),
    (
        "macOS builds differ (a beta of 26.2 on one Mac)",
        "m2",
        {"build": "25C5048a"},
        {"build": "25C56"},
        "m2 runs macOS 26.2 build 25C5048a while m1, m3, m4 run build 25C56",
        "Beta Updates off",
    ),
]


def test_macos_versions_differ(sim_cluster):
    """Each skew is named by a run of its own. Each is repaired before the next is made, so the
    second run, which no longer names the first, shows that repair took; one run after both
    repairs is each fault's converged run."""
    cluster = sim_cluster("mesh4")
    cluster.reset()
    faults = []
    for name, host, skew, usual, msg, fix in MACOS_SKEW:
        with Fault(name) as f:
            cluster.set_host(host, **skew)
            try:
                run = run_site(cluster, tags=["rdma_check"])
                assert run.rc != 0
                text = fail_text(run)
                f.message(next(ln for ln in text.splitlines() if msg in ln))
                assert fix in text
                assert not [m for _, _, _, _, m, _ in MACOS_SKEW if m != msg and m in text], text
            finally:
                cluster.set_host(host, **usual)
        faults.append(f)
    converged = run_site(cluster, tags=["rdma_check"])
    for f in faults:
        f.converged(converged)


def test_a_mac_that_does_not_answer_discovery_is_named_with_the_fix(sim_cluster):
    """Remote Login off on m2 before any run: the run stops after discovery naming m2 and the
    fix, and plans nothing (before, the plan of the Mac that was left failed: "a cluster needs
    at least 2 hosts"); Remote Login on again, the same run passes."""
    cluster = sim_cluster("pair")
    cluster.reset()
    with Fault("a Mac that does not answer at discovery (Remote Login off)") as f:
        cluster.stop_sshd("m2")
        try:
            run = run_site(cluster, tags=["rdma_check"], python_env=None)
        finally:
            cluster.start_sshd("m2")
        assert run.rc != 0
        named = [(h, m) for h, task, m in run.failures() if task == "Stop when a Mac did not answer"]
        assert len(named) == 1, run.failures()
        f.message(named[0][1])
        assert named[0][1].startswith("m2 did not answer over ssh") and "Remote Login" in named[0][1], named
        # (m1 answered: planning without m2 is a way on)
        assert " ".join(named[0][1].split()).endswith("to plan without m2, leave it out of the inventory."), named
        assert "at least 2 hosts" not in fail_text(run)
        assert not run.results("Plan links, topology, addresses and hostfile (once, on the controller)")
        f.converged(run_site(cluster, tags=["rdma_check"], python_env=None))


def test_mlx_versions_differ(sim_cluster):
    cluster = sim_cluster("pair")
    cluster.reset()
    fake = cluster.home("m2") / "fakepy"
    fake.write_text(
        '#!/bin/sh\necho \'{"python": "3.11.7", "executable": "/srv/admin/fakepy", '
        '"mlx": "0.31.0", "mlx_lm": "0.30.0"}\'\n'
    )
    fake.chmod(0o755)
    with Fault("mlx versions differ between nodes") as f:
        per_host = {"python_env_interpreter": "{{ test_python | default('%s') }}" % sys.executable}
        with host_vars(cluster, m2="test_python: /srv/admin/fakepy\n"):
            run = run_site(cluster, tags=["env"], extravars=per_host, python_env="existing")
            assert run.rc != 0
            text = fail_text(run)
            f.message(text)
            assert "m2 has mlx 0.31.0 and mlx-lm 0.30.0" in text, text
            assert "m1 has" not in text
        f.converged(run_site(cluster, tags=["env"], python_env="existing"))


def test_lan_using_the_pool_pushes_the_plan_around_it(sim_cluster, tmp_path):
    spec = yaml.safe_load((ROOT / "tests" / "simcluster" / "specs" / "mesh3_dock.yml").read_text())
    spec["name"] = "lanpool"
    spec["management"] = {"cidr": "10.208.0.0/22"}  # the LAN sits inside the default pool
    path = tmp_path / "lanpool.yml"
    path.write_text(yaml.safe_dump(spec))
    cluster = sim_cluster(str(path))
    with Fault("the LAN already uses part of the planned pool") as f:
        run = converge(cluster)
        f.message(f"plan avoids {spec['management']['cidr']}: converged with changed={run.changed()}")
        lan = __import__("ipaddress").ip_network("10.208.0.0/22")
        nets = [
            __import__("ipaddress").ip_network(c["network"]) for c in plan_of(cluster)["ip_plan"]["cables"].values()
        ]
        assert nets and not any(n.overlaps(lan) for n in nets), nets
        f.converged(run_site(cluster))


def test_reboot_restores_addresses_and_a_rerun_repairs_the_rest(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    converge(cluster)
    plan = plan_of(cluster)
    with Fault("reboot: runtime addresses flushed on one Mac") as f:
        cluster.reboot("m2")
        for link in plan["ip_plan"]["hosts"]["m2"]:  # persistent services brought them back
            out = cluster.exec("m2", ["ip", "-j", "addr", "show", "dev", link["iface"]]).stdout
            assert link["address"] in out, (link, out)
        run = run_site(cluster)
        assert run.rc == 0, run.failures()
        changed_hosts = {h for h, n in run.stats.get("changed", {}).items() if n}
        f.message(f"re-run reports changes on {sorted(changed_hosts)}")
        assert "m2" in changed_hosts
        f.converged(run_site(cluster))


def test_thunderbolt_bridge_loop_is_named_then_fixed(sim_cluster):
    cluster = sim_cluster("ring4")
    cluster.reset()
    with Fault("Thunderbolt Bridge active with the ports as members") as f:
        run = run_site(cluster, tags=["rdma_check"])
        text = run.preflight_summary()
        line = next(ln for ln in text.splitlines() if "Thunderbolt Bridge on m1" in ln)
        f.message(line)
        assert "broadcast loop" in line
        converge(cluster)
        # the cabled ports leave bridge0 (now and in its definition); the empty ports may stay
        # in it: bridge0 stays up, as macOS keeps it whatever its service says
        planned = plan_of(cluster)["ip_plan"]["hosts"]
        for h in cluster.hosts:
            members = json.loads(cluster.exec(h, ["ip", "-j", "link", "show", "master", "bridge0"]).stdout or "[]")
            cabled = {link["iface"] for link in planned[h]}
            assert not cabled & {m["ifname"] for m in members}, (h, members)
            assert not cabled & set(cluster.netprefs(h)["bridges"]["bridge0"]["members"]), h
        f.converged(run_site(cluster))


def test_management_interface_is_never_touched(sim_cluster):
    cluster = sim_cluster("pair")
    before = cluster.exec("m1", ["ip", "-j", "addr", "show", "dev", "en0"]).stdout
    cluster.clear_argv_logs()
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        NO_COLOR="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    args = {
        "links": [{"iface": "en0", "address": "10.208.99.1", "peer_address": "10.208.99.2"}],
        "protected_ifaces": ["en0"],
    }
    with Fault("a plan that would touch the management interface") as f:
        res = subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible"),
                "m1",
                "-i",
                str(cluster.inventory_path),
                "-m",
                "mlx.cluster.thunderbolt_links",
                "-a",
                json.dumps(args),
                "--become",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        f.message(res.stdout[res.stdout.find("refusing") :])
        assert res.returncode != 0 and "refusing to configure en0: it is the management interface" in res.stdout
        f.converged(None)
    assert cluster.exec("m1", ["ip", "-j", "addr", "show", "dev", "en0"]).stdout == before
    assert mutations(cluster) == []


BECOME_CHECK = "Run a no-op with become"


def ran_on(run, task):
    """The hosts whose result of `task` was ok, changed or failed (not skipped)."""
    return {
        e["event_data"].get("host")
        for e in run.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == task
    }


def test_sudo_that_asks_for_a_password_is_named_with_the_fix(sim_cluster):
    """Discovery's `sudo -n` answers for the Macs where sudo needs no password (no become check
    of their own); a Mac whose sudo asks for one is named with the sudoers line, and passes
    once the run is given the password (Ansible's become answers sudo's prompt)."""
    cluster = sim_cluster("pair")
    cluster.reset()
    with Fault("sudo asks for a password on one Mac") as f:
        cluster.set_host("m2", sudo_password="hunter2")
        try:
            run = run_site(cluster, tags=["rdma_check"])
            assert run.rc != 0
            assert {h for h, _, _ in run.failures()} == {"m2"}, run.failures()
            text = fail_text(run)
            line = next(ln for ln in text.splitlines() if "sudo asks" in ln)
            f.message(line)
            assert line.startswith("m2: sudo asks admin for a password (sudo: a password is required"), line
            assert "admin ALL=(ALL) NOPASSWD: ALL" in line and "--ask-become-pass" in line, line
            assert ran_on(run, BECOME_CHECK) == {"m2"}  # m1's sudo -n worked: no check of its own
            given = run_site(cluster, tags=["rdma_check"], extravars={"ansible_become_password": "hunter2"})
            assert given.rc == 0, given.failures()
            assert ran_on(given, BECOME_CHECK) == {"m2"}
        finally:
            cluster.set_host("m2", sudo_password="")
        again = run_site(cluster, tags=["rdma_check"])
        assert ran_on(again, BECOME_CHECK) == set()
        f.converged(again)


def test_sudo_allowed_only_for_some_commands_is_named_before_any_stage_needs_it(sim_cluster):
    """A sudoers rule that lets the login user run only /usr/bin/true without a password passes
    a `sudo -n /usr/bin/true`, but not Ansible's become (`/bin/sh -c ...` as root): discovery's
    probe runs what become runs, so the preflight checks become there and names the Mac."""
    cluster = sim_cluster("pair")
    cluster.reset()
    with Fault("sudo allowed only for /usr/bin/true on one Mac") as f:
        cluster.set_host("m2", sudo_commands=["/usr/bin/true"])
        try:
            assert cluster.exec("m2", ["sudo", "-n", "/usr/bin/true"]).returncode == 0  # the old probe passed
            run = run_site(cluster, tags=["rdma_check"])
            assert run.rc != 0
            assert {h for h, _, _ in run.failures()} == {"m2"}, run.failures()
            line = next(ln for ln in fail_text(run).splitlines() if "sudo asks" in ln)
            f.message(line)
            assert line.startswith("m2: sudo asks admin for a password (sudo: a password is required"), line
            assert "admin ALL=(ALL) NOPASSWD: ALL" in line, line
            assert ran_on(run, BECOME_CHECK) == {"m2"}
        finally:
            cluster.set_host("m2", sudo_commands=[])
        again = run_site(cluster, tags=["rdma_check"])
        assert ran_on(again, BECOME_CHECK) == set()
        f.converged(again)


def test_become_on_for_the_whole_run_is_named_before_anything_changes(sim_cluster):
    """-b, or ansible_become in the inventory, runs every task through sudo: discovery would
    find root's home, and the toolkit's files, venv and model would land there. Discovery stops
    on every Mac naming the fix, in a dry run as in a real one, and nothing is changed."""
    cluster = sim_cluster("pair")
    cluster.reset()
    with Fault("become on for the whole run (ansible_become: true)") as f:
        cluster.clear_argv_logs()
        run = run_site(cluster, tags=["rdma_check"], extravars={"ansible_become": True})
        assert run.rc != 0
        assert {h for h, _, _ in run.failures()} == set(cluster.hosts), run.failures()
        line = next(ln for ln in fail_text(run).splitlines() if ln.startswith("m1: discovery ran through sudo"))
        f.message(line)
        assert line.startswith("m1: discovery ran through sudo as root, not as admin, the user Ansible logs in"), line
        assert "run without -b/--become and remove ansible_become" in line, line
        assert mutations(cluster) == []
        f.converged(run_site(cluster, tags=["rdma_check"]))


def test_a_toolkit_directory_every_user_can_write_is_named_by_rdma_check(sim_cluster):
    """The venv, the scripts and the server's files run from the toolkit's directory, as the
    user and at boot: on a Mac where other users can write it, the preflight stops naming it."""
    cluster = sim_cluster("pair")
    cluster.reset()
    d = cluster.home("m2") / "mlx-cluster"
    d.mkdir(exist_ok=True)
    with Fault("the toolkit's directory writable by every user on one Mac") as f:
        os.chmod(d, 0o777)
        try:
            run = run_site(cluster, tags=["rdma_check"])
            assert run.rc != 0
            line = next(ln for ln in run.preflight_summary().splitlines() if "toolkit's directory" in ln)
            f.message(line)
            assert line.startswith(
                "[ERROR] m2: the toolkit's directory /srv/admin/mlx-cluster on m2 is not this "
                "user's alone: /srv/admin/mlx-cluster is writable by group or others (mode 0777)"
            ), line
            assert "chmod go-w" in line
        finally:
            os.chmod(d, 0o700)
        f.converged(run_site(cluster, tags=["rdma_check"]))


def test_host_key_checking_stays_on(sim_cluster):
    cluster = sim_cluster("pair")
    kh = cluster.known_hosts_path
    original = kh.read_text()
    lines = original.splitlines()
    m1, m2 = cluster.mgmt_address("m1"), cluster.mgmt_address("m2")
    m2_key = next(ln.split(None, 1)[1] for ln in lines if ln.split(None, 1)[0] == m2)
    forged = [(ln.split(None, 1)[0] + " " + m2_key) if ln.split(None, 1)[0] == m1 else ln for ln in lines]
    with Fault("a Mac's host key changed") as f:
        kh.write_text("\n".join(forged) + "\n")
        try:
            run = run_site(cluster, tags=["rdma_check"])
            text = "\n".join(f"{h}: {m}" for h, _, m in run.failures())
            shown = f"{text}\n--- the run's end:\n{run.stdout[-4000:]}"
            assert run.rc != 0, shown
            assert "m1" in text and "Host key verification failed" in text, shown
            # named after discovery with ssh's cause and its own command for the fix
            (named,) = [m for _, task, m in run.failures() if task == "Stop when a Mac did not answer"]
            f.message(named)
            assert named.startswith(f"m1 did not answer over ssh: ssh from this controller to m1 (admin@{m1}) failed:")
            assert "m1's host key changed since this controller accepted it" in named, named
            assert f'`ssh-keygen -f "{kh}" -R "{m1}"`' in named and "host-key checking stays on" in named, named
        finally:
            kh.write_text(original)
        f.converged(run_site(cluster, tags=["rdma_check"]))


# Validate's check names every mistake it finds in one message, so mistakes of different
# variables share a run (each still asserted by its own words); the argument spec's refusal
# (a backend not among its choices) stops before that check and has a run of its own.
@pytest.mark.parametrize(
    "hosts_yaml, extravars, fragments",
    [
        pytest.param(
            {
                "m1": {"ansible_host": "10.0.0.1"},
                "m2": {"ansible_host": "10.0.0.1", "mlx_cluster_coordinator_address": "fe80::1"},
            },
            # a directory a shell would read (it reaches rsync's remote paths and the cluster
            # key's forced command): refused, not quoted, before any Mac is contacted
            {
                "mlx_cluster_ip_pool": "10.208.0.0/33x",
                "mlx_cluster_remote_dir": "/srv/admin/odd dir'\"; touch /tmp/pwned #",
            },
            [
                "m1 and m2 reach the same Mac (ansible_host 10.0.0.1)",
                "mlx_cluster_ip_pool ('10.208.0.0/33x')",
                "mlx_cluster_coordinator_address of m2",
                "mlx_cluster_remote_dir '/srv/admin/odd dir\\'\"; touch /tmp/pwned #' holds whitespace or characters "
                "a shell reads",
            ],
            id="duplicate-hosts,bad-cidr,bad-coordinator,hostile-remote-dir",
        ),
        pytest.param(
            {"m1": {}},
            {"mlx_cluster_remote_dir": "~/../shared"},
            ["at least 2 distinct Macs", "mlx_cluster_remote_dir '~/../shared' holds '.' or '..' components"],
            id="one-host,dotdot-remote-dir",
        ),
        pytest.param(
            {"m1": {}, "m2": {}}, {"mlx_cluster_backend": "nccl"}, ["mlx_cluster_backend"], id="unknown-backend"
        ),
    ],
)
def test_inventory_mistakes_fail_in_validate_naming_the_variable(tmp_path, hosts_yaml, extravars, fragments):
    res = validate(tmp_path, hosts_yaml, extravars)
    assert res.returncode != 0
    for fragment in fragments:
        assert fragment in res.stdout, (fragment, res.stdout[-3000:])
    assert "mlx_cluster_facts" not in res.stdout  # stopped before contacting any Mac
