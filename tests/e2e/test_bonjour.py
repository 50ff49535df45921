"""The inventory plugin mlx.cluster.bonjour on the simulated cluster (issue #32): the Macs
announce ssh over Bonjour on the LAN (tests/simcluster/announce.py), a controller on that LAN
(the controller's namespace) finds them, and site.yml runs through that inventory alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.runner import ROOT

pytestmark = [pytest.mark.sim, pytest.mark.slow]
BIN = Path(sys.executable).parent
BROWSE_SECONDS = 2


def lab_inventory(cluster, folder):
    """An inventory directory as a user makes one with Bonjour: bonjour.yml with the login user
    and key, and the group's settings beside it (the harness inventory's, less user and key:
    the interpreter, pipelining, and the ssh_config that routes to the LAN and holds the
    accepted host keys, by address)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bonjour.yml").write_text(
        yaml.safe_dump(
            {
                "plugin": "mlx.cluster.bonjour",
                "user": cluster.user,
                "key": str(cluster.key_path),
                "timeout": BROWSE_SECONDS,
            }
        )
    )
    group = yaml.safe_load(cluster.inventory_path.read_text())["mac_cluster"]["vars"]
    for name in ("ansible_user", "ansible_ssh_private_key_file"):
        group.pop(name)
    (folder / "group_vars").mkdir(exist_ok=True)
    (folder / "group_vars" / "mac_cluster.yml").write_text(yaml.safe_dump(group))
    return folder / "bonjour.yml"


def ansible_env(work):
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_HOME=str(work / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(work / "tmp"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(work / "cp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="True",
        PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "/usr/bin:/bin")]),
    )


def on_lan(cluster, argv, work, timeout=120):
    """argv on the controller's side of the Macs' LAN; (CompletedProcess, seconds)."""
    start = time.monotonic()
    r = subprocess.run(
        cluster.on_lan(argv), capture_output=True, text=True, env=ansible_env(work), cwd=ROOT, timeout=timeout
    )
    return r, time.monotonic() - start


def wait_announcing(cluster, seconds=10):
    """Until every Mac announces ssh (a Mac registers its services about a second after sshd
    starts: mDNS probing, then the announcement)."""
    deadline = time.monotonic() + seconds
    while not all(cluster.announcing(h) for h in cluster.hosts):
        assert time.monotonic() < deadline, f"the Macs did not all announce ssh within {seconds} s"
        time.sleep(0.05)


def listed(cluster, source, work):
    r, seconds = on_lan(cluster, [BIN / "ansible-inventory", "-i", source, "--list"], work)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout), r.stderr, seconds


def test_the_macs_are_found_and_site_yml_runs_through_that_inventory_alone(sim_cluster, tmp_path):
    cluster = sim_cluster("pair")
    source = lab_inventory(cluster, tmp_path / "lab")
    wait_announcing(cluster)

    inv, stderr, seconds = listed(cluster, source, tmp_path)
    assert inv["mac_cluster"]["hosts"] == cluster.hosts  # sorted: m1, m2
    hostvars = inv["_meta"]["hostvars"]
    for h in cluster.hosts:
        assert hostvars[h]["ansible_host"] == cluster.mgmt_address(h)
        assert hostvars[h]["ansible_user"] == cluster.user
        assert hostvars[h]["ansible_ssh_private_key_file"] == str(cluster.key_path)
        assert "ansible_port" not in hostvars[h]
    assert "WARNING" not in stderr, stderr
    # the browse's time bound, plus ansible-inventory's own start-up
    assert BROWSE_SECONDS <= seconds < BROWSE_SECONDS + 15, seconds

    graph, _ = on_lan(cluster, [BIN / "ansible-inventory", "-i", source, "--graph", "mac_cluster"], tmp_path)
    assert graph.returncode == 0 and graph.stdout.split() == ["@mac_cluster:", "|--m1", "|--m2"], graph.stdout

    # the README's way to a written inventory: the same hosts, read back without a browse
    written, _ = on_lan(cluster, [BIN / "ansible-inventory", "-i", source, "--list", "--yaml"], tmp_path)
    assert written.returncode == 0, written.stderr
    hosts_yml = tmp_path / "written" / "hosts.yml"
    hosts_yml.parent.mkdir()
    hosts_yml.write_text(written.stdout)
    assert "unsafe" not in written.stdout, written.stdout
    again, _ = on_lan(cluster, [BIN / "ansible-inventory", "-i", hosts_yml, "--list"], tmp_path)  # (no browse)
    assert again.returncode == 0, again.stderr
    back = json.loads(again.stdout)
    assert back["mac_cluster"]["hosts"] == cluster.hosts
    assert {h: back["_meta"]["hostvars"][h]["ansible_host"] for h in cluster.hosts} == {
        h: cluster.mgmt_address(h) for h in cluster.hosts
    }

    # site.yml through the plugin's inventory alone: discovery and the checks contact every Mac,
    # over ssh with the host keys checked (ssh_config: StrictHostKeyChecking yes, by address)
    run, _ = on_lan(
        cluster,
        [BIN / "ansible-playbook", "-i", source, "site.yml", "--tags", "rdma_check"],
        tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    recap = run.stdout[run.stdout.index("PLAY RECAP") :]
    for h in cluster.hosts:
        line = next(line for line in recap.splitlines() if line.startswith(h + " "))
        assert "unreachable=0" in line and "failed=0" in line, line
    assert (tmp_path / "lab" / "artifacts" / "preflight.json").exists()


def test_a_mac_with_remote_login_off_is_not_announced(sim_cluster, tmp_path):
    cluster = sim_cluster("pair")
    source = lab_inventory(cluster, tmp_path / "lab")
    wait_announcing(cluster)
    cluster.stop_sshd("m2")  # Remote Login off: returns once the announcement is withdrawn
    try:
        assert not cluster.announcing("m2") and cluster.announcing("m1")
        inv, _, _ = listed(cluster, source, tmp_path)
        assert inv["mac_cluster"]["hosts"] == ["m1"]

        # no Mac left: an error (ansible.cfg: unparsed_is_failed) saying what was browsed, for how
        # long, and the fix
        cluster.stop_sshd("m1")
        r, _ = on_lan(
            cluster,
            [BIN / "ansible-inventory", "-i", source, "--list"],
            tmp_path,
        )
        err = " ".join(r.stderr.split())
        assert r.returncode != 0 and "No inventory was parsed" in err, r.stdout + r.stderr
        assert "no Mac announced _ssh._tcp.local and _sftp-ssh._tcp.local" in err, r.stderr
        assert f"within {BROWSE_SECONDS} s" in err and "Remote Login" in err, r.stderr
        assert "inventory/mac_cluster/hosts.yml" in err, r.stderr
    finally:
        cluster.start_sshd("m1")
        cluster.start_sshd("m2")
    wait_announcing(cluster)
    inv, _, _ = listed(cluster, source, tmp_path)
    assert inv["mac_cluster"]["hosts"] == ["m1", "m2"]


def test_a_mac_that_announces_but_does_not_answer_ssh_stays_and_the_run_names_it(sim_cluster, tmp_path):
    cluster = sim_cluster("pair")
    source = lab_inventory(cluster, tmp_path / "lab")
    wait_announcing(cluster)
    cluster.block_ports("m2", [22])  # m2 announces ssh, but its sshd's answers never arrive
    try:
        inv, _, _ = listed(cluster, source, tmp_path)
        assert inv["mac_cluster"]["hosts"] == ["m1", "m2"]
        run, _ = on_lan(
            cluster,
            [BIN / "ansible-playbook", "-i", source, "site.yml", "--tags", "rdma_check"],
            tmp_path,
            timeout=600,
        )
    finally:
        cluster.unblock_ports("m2")
    assert run.returncode != 0
    recap = run.stdout[run.stdout.index("PLAY RECAP") :]
    assert "unreachable=1" in next(line for line in recap.splitlines() if line.startswith("m2 ")), recap
    assert "fatal: [m2]: UNREACHABLE!" in run.stdout and cluster.mgmt_address("m2") in run.stdout
