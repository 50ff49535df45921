"""The simulated Mac cluster itself: teardown, SSH, every shim, and MLX's own tools.

These run real sshd, real ssh and the real MLX console scripts against network
namespaces; they need root (skipped otherwise, see tests/simcluster/pytest_plugin.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.simcluster.cluster import SimCluster, SimError, _cmdline, list_namespaces, mentions, prefix_for
from tests.simcluster.spec import SpecError, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
from ansible_collections.mlx.cluster.plugins.module_utils import (  # noqa: E402  (the product's parsers, over the shims' output)
    mlx_netcfg,
    mlx_tb,  # noqa: E402
)


@pytest.fixture(scope="module", autouse=True)
def factory_macs(request):
    """The tests below read the simulated Macs as they come from the factory. Tests of other
    files that ran earlier on this worker may have left the session's clusters configured (the
    end-to-end tests reset a cluster when they start, not when they end): the clusters built so
    far are reset once, before the first test here. Those built later start from the factory."""
    from tests.simcluster.pytest_plugin import _reason

    if _reason() is None:
        request.getfixturevalue("sim_cluster").reset_all()


VENV_BIN = Path(sys.executable).parent
TIMEOUT = 180


def root_links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines())


def ours(prefix):
    return sorted(ns for ns in list_namespaces() if ns.startswith(prefix + "-"))


def procs_mentioning(state):
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and mentions(int(p), state)]


def wait_until(cond, timeout=10.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def sh(cluster, host, argv, sudo=False, ok=True):
    r = cluster.exec(host, argv, sudo=sudo, timeout=60)
    if ok:
        assert r.returncode == 0, f"{host}: {argv} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def hwports(text):
    ports, port = {}, None
    for line in text.splitlines():
        if line.startswith("Hardware Port: "):
            port = line[len("Hardware Port: ") :]
        elif line.startswith("Device: ") and port is not None:
            ports[port] = line[len("Device: ") :]
            port = None
    return ports


def ping(cluster, host, addr, iface=None):
    argv = ["ping", "-c", "1", "-t", "2", "-q"] + (["-b", iface] if iface else []) + [addr]
    return cluster.exec(host, argv, timeout=30)


def ipv4_of(cluster, host, iface):
    link = cluster.links(host)[iface]
    return [a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet"]


# ---------------------------------------------------------------------------------------
# specs (no root needed)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mesh4", "ring4", "mesh4_double", "mesh3_dock", "mesh8", "ring16", "pair"])
def test_shipped_specs_load(name):
    spec = load_spec(name)
    assert spec.name == name
    used = [(e.host, e.iface) for c in spec.cables for e in (c.a, c.b)]
    assert len(used) == len(set(used))


def test_spec_shapes():
    assert len(load_spec("mesh4").cables) == 6
    assert len(load_spec("mesh4_double").cables) == 7
    assert len(load_spec("mesh8").cables) == 28
    assert len(load_spec("ring16").hosts) == 16
    dock = [c for c in load_spec("mesh3_dock").cables if c.dock]
    assert len(dock) == 1 and dock[0].dock.seen_by == "m1" and {dock[0].a.host, dock[0].b.host} == {"m1", "m3"}
    c = load_spec("mesh4").cable("m1:1")
    assert c.id == "m1:en2~m2:en2" and c.a.iface == "en2"


BASE = {"name": "t", "hosts": [{"name": "m1"}, {"name": "m2", "tb_ports": 2}]}


@pytest.mark.parametrize(
    "cables, message",
    [
        pytest.param([{"a": "m1:1", "b": "m9:1"}], "unknown host 'm9'", id="unknown-host"),
        pytest.param([{"a": "m1:1", "b": "m2:1"}, {"a": "m1:1", "b": "m2:2"}], "already used", id="port-twice"),
        pytest.param([{"a": "m1:1", "b": "m2:3"}], "m2 has receptacles 1..2, not 3", id="port-too-high"),
        pytest.param([{"a": "m1:1", "b": "m2:1", "speed": 100}], "speed must be 80 or 40", id="speed"),
        pytest.param([{"a": "m1:1", "b": "m1:2"}], "joins two Macs", id="self-cable"),
        pytest.param([{"a": "m1", "b": "m2:1"}], "HOST:RECEPTACLE", id="no-port"),
        pytest.param([{"a": "m1:1", "b": "m2:1", "dock": {"name": "TS4", "seen_by": "m7"}}], "seen_by", id="dock"),
    ],
)
def test_spec_errors_say_what_is_wrong(cables, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec({**BASE, "cables": cables})


def test_spec_rejects_bad_hosts():
    with pytest.raises(SpecError, match="listed twice"):
        parse_spec({"name": "t", "hosts": [{"name": "m1"}, {"name": "m1"}]})
    with pytest.raises(SpecError, match="reserved"):
        parse_spec({"name": "t", "hosts": [{"name": "ctl"}]})
    with pytest.raises(SpecError, match="tb_version must be 4 or 5"):
        parse_spec({"name": "t", "hosts": [{"name": "m1", "tb_version": 3}]})
    with pytest.raises(SpecError, match="no spec 'nope'"):
        load_spec("nope")


def test_unavailable_reason_is_one_line(monkeypatch):
    from tests.simcluster import cluster as cl

    monkeypatch.setattr(cl.os, "geteuid", lambda: 1000)
    reason = cl.unavailable_reason()
    assert reason and "root" in reason and "\n" not in reason
    monkeypatch.setattr(cl.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cl, "_which", lambda name, extra=(): None if name == "sshd" else f"/usr/bin/{name}")
    assert "sshd" in cl.unavailable_reason()
    monkeypatch.setattr(cl, "_which", lambda name, extra=(): f"/usr/bin/{name}")
    monkeypatch.setattr(cl, "LOGIN_SHELL", "/nonexistent/zsh")
    assert "zsh at /nonexistent/zsh" in cl.unavailable_reason() and "apt-get install zsh" in cl.unavailable_reason()


# ---------------------------------------------------------------------------------------
# lifecycle: nothing left behind
# ---------------------------------------------------------------------------------------


@pytest.mark.sim
def test_up_down_leaves_nothing_behind(tmp_path):
    state = tmp_path / "mesh4"
    links_before = root_links()
    cluster = SimCluster("mesh4", state)
    assert ours(cluster.prefix) == []
    t0 = time.monotonic()
    cluster.up()
    up_s = time.monotonic() - t0
    try:
        assert ours(cluster.prefix) == sorted(cluster.namespaces)
        assert root_links() == links_before, "the harness must not create links in the root namespace"
        recorded = json.loads((state / "harness.json").read_text())["pids"]
        assert sorted(recorded) == cluster.hosts and all(Path(f"/proc/{p}").exists() for p in recorded.values())
        running = procs_mentioning(state)
        assert len(running) >= 3 * len(cluster.hosts)  # unshare, PID 1, sshd per Mac
        # the Macs' addresses exist only inside their namespaces
        assert "10.99.0." not in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        assert cluster.ssh("m1", "true").returncode == 0  # leaves a relay behind until down
    finally:
        t1 = time.monotonic()
        left = cluster.down()
        down_s = time.monotonic() - t1
    print(f"mesh4 up {up_s:.2f}s down {down_s:.2f}s")
    assert left == []
    assert ours(cluster.prefix) == []
    assert root_links() == links_before
    assert not [p for p in running if Path(f"/proc/{p}").exists() and mentions(p, state)]
    assert procs_mentioning(state) == []


@pytest.mark.sim
def test_cleanup_after_a_crashed_harness(tmp_path):
    """A harness that dies without `down` leaves Macs running; `cleanup` removes them once
    their state dir is gone."""
    state = tmp_path / "crashed"
    code = (
        "import os, sys; sys.path.insert(0, %r)\n"
        "from tests.simcluster.cluster import SimCluster\n"
        "SimCluster('pair', %r).up()\n"
        "os._exit(0)  # the object is dropped without down()\n"
    ) % (str(REPO), str(state))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)
    prefix = prefix_for(state)
    assert len(ours(prefix)) == 4
    leftovers = procs_mentioning(state)
    assert leftovers
    # The state dir goes in one step: its Macs are still running and still write into it
    # (announce.py's marks, sshd's logs), so an `rm -rf` could find a directory refilled
    # under it ("Directory not empty", seen once in CI). It is removed once they are gone.
    gone = tmp_path / "gone"
    state.rename(gone)
    r = subprocess.run(
        [sys.executable, "-m", "tests.simcluster", "cleanup"], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert r.returncode == 0, r.stderr
    assert ours(prefix) == []
    assert wait_until(
        lambda: not [p for p in leftovers if Path(f"/proc/{p}").exists() and str(state) in " ".join(_cmdline(p))]
    )
    shutil.rmtree(gone)


@pytest.mark.sim
def test_down_cleans_a_harness_killed_during_up(tmp_path):
    state = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.simcluster", "up", "mesh4", "--state", str(state)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    prefix = prefix_for(state)
    # kill it once the Macs are being started (namespaces and some host processes exist)
    assert wait_until(lambda: len(ours(prefix)) == 6 and procs_mentioning(state), timeout=60, step=0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    r = subprocess.run(
        [sys.executable, "-m", "tests.simcluster", "down", "mesh4", "--state", str(state)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert ours(prefix) == []
    assert wait_until(lambda: procs_mentioning(state) == [])


# ---------------------------------------------------------------------------------------
# SSH
# ---------------------------------------------------------------------------------------


@pytest.mark.sim
def test_ssh_with_host_key_checking(sim_cluster):
    c = sim_cluster("mesh4")
    cfg = c.ssh_config_path.read_text()
    assert "StrictHostKeyChecking yes" in cfg and str(c.known_hosts_path) in cfg
    names = set()
    for h in c.hosts:
        r = c.ssh(h, "hostname")
        assert r.returncode == 0, r.stderr
        names.add(r.stdout.strip())
        by_addr = c.ssh(c.mgmt_address(h), "hostname")
        assert by_addr.stdout.strip() == h, by_addr.stderr
    assert names == set(c.hosts)
    # a host key that is not known is refused (checking really is on)
    r = subprocess.run(
        ["ssh", "-o", "UserKnownHostsFile=/dev/null", "m1", "true"],
        env=c.harness_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 255 and "Host key verification failed" in r.stderr


@pytest.mark.sim
def test_ssh_session_environment(sim_cluster):
    c = sim_cluster("mesh4")
    r = c.ssh("m2", "pwd; echo $HOME; echo $PATH; cd ~; pwd; whoami")
    assert r.returncode == 0, r.stderr
    start, home, path, tilde, user = r.stdout.split("\n")[:5]
    assert start == home == tilde == "/srv/admin" and user == "admin"
    # the shims, then the system's directories: no Python of the controller's on a Mac's PATH
    assert path.split(":")[:2] == [str(c.host_dir("m2") / "bin"), "/usr/local/sbin"]
    assert str(VENV_BIN) not in path.split(":")
    # the way mlx.launch runs its ranks: a forced tty and bash syntax
    r = subprocess.run(
        [
            "ssh",
            "-tt",
            "-o",
            "LogLevel=QUIET",
            "m2",
            "stty -echo; if [[ -d /srv/admin ]]; then cd /srv/admin; fi; tty; pwd",
        ],
        env=c.harness_env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"^/dev/pts/\d+\r?$", r.stdout, re.M) and "/srv/admin" in r.stdout
    # sudo -H gives root's home of this Mac
    r = c.ssh("m2", "sudo -H sh -c 'echo $HOME $USER $SUDO_USER'")
    assert r.stdout.split() == ["/srv/root", "root", "admin"]


@pytest.mark.sim
def test_a_macs_python_has_only_what_a_mac_ships(sim_cluster):
    """/usr/bin/python3 of a Mac, over ssh as Ansible runs it: pip and setuptools' pkg_resources
    are there, as in the Command Line Tools' Python (Homebrew's python3.N has pip alone); the
    packages of the machine the simulation runs on (PyYAML, packaging, certifi: all in this
    harness's own Python) are not, and neither are its .pth files."""
    c = sim_cluster("mesh4")
    probe = (
        "import importlib.util, json, sys; "
        "names = ['pip', 'pkg_resources', 'setuptools', 'yaml', 'packaging', 'certifi', 'ansible']; "
        "print(json.dumps({'found': {n: importlib.util.find_spec(n) is not None for n in names}, "
        "'modules': sorted(sys.modules)}))"
    )
    r = c.ssh("m1", ["/usr/bin/python3", "-c", shlex.quote(probe)])
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert {n: f for n, f in seen["found"].items() if n in ("pip", "pkg_resources", "setuptools")} == dict.fromkeys(
        ("pip", "pkg_resources", "setuptools"), True
    )
    assert not any(seen["found"][n] for n in ("yaml", "packaging", "certifi", "ansible")), seen["found"]
    assert "certifi" not in seen["modules"]
    # Homebrew's python3.N: site-packages of its own, pip alone (since 3.12, no setuptools)
    brew = f"/opt/homebrew/bin/python{c.python_minor()}"
    r = c.ssh("m1", [brew, "-c", shlex.quote(probe)])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["found"] == {
        "pip": True,
        "pkg_resources": False,
        "setuptools": False,
        "yaml": False,
        "packaging": False,
        "certifi": False,
        "ansible": False,
    }


@pytest.mark.sim
def test_ps_cuts_long_command_lines_as_macos_does(sim_cluster):
    """macOS's ps cuts each line at 79 columns when its output is no terminal (BSD ps), unless
    -ww: a module that looks for a run id at the end of a long command line must ask for -ww.
    The Mac's PID 1 (the harness's hostinit, its state dir in its arguments) has a long one."""
    c = sim_cluster("mesh4")
    whole = c.exec("m1", ["ps", "-ax", "-ww", "-o", "pid=,args="]).stdout.splitlines()
    [init] = [line for line in whole if line.split()[0] == "1"]
    assert f"hostinit.py {c.state_dir} m1" in init and len(init) > 79
    cut = c.exec("m1", ["ps", "-ax", "-o", "pid=,args="]).stdout.splitlines()
    assert cut and max(len(line) for line in cut) <= 79
    assert [line for line in cut if line.split()[0] == "1"] == [init[:79]]


@pytest.mark.sim
def test_each_mac_has_its_own_home_and_tmp(sim_cluster):
    c = sim_cluster("mesh4")
    assert c.ssh("m1", "echo from-m1 > /srv/admin/mine.txt; echo t1 > /tmp/mine.txt").returncode == 0
    assert (c.home("m1") / "mine.txt").read_text() == "from-m1\n"
    r = c.ssh("m2", "cat /srv/admin/mine.txt; cat /tmp/mine.txt")
    assert r.returncode != 0 and "No such file" in r.stderr
    assert not Path("/tmp/mine.txt").exists() and not Path("/srv/admin").exists()
    for f in (c.home("m1") / "mine.txt", c.host_dir("m1") / "tmp" / "mine.txt"):
        f.unlink()


@pytest.mark.sim
def test_the_macs_etc_is_the_clusters_copy_not_this_machines(sim_cluster):
    """A file of this machine's /etc made or replaced while the cluster is up (useradd renames a
    new /etc/passwd over the old one) does not reach the Macs, which keep their own users (a
    bind straight over the machine's /etc/passwd was lost that way: ssh then refused every key)."""
    c = sim_cluster("pair")
    probe = Path("/etc") / f"mlxsim-probe-{os.getpid()}-{time.monotonic_ns()}"
    probe.write_text("the machine's\n")
    try:
        r = c.ssh("m1", f"cat {probe}; head -1 /etc/passwd")
        assert "the machine's" not in r.stdout and "No such file" in r.stderr, r.stdout + r.stderr
        assert r.stdout.startswith("admin:x:0:0:"), r.stdout
    finally:
        probe.unlink()
    assert c.ssh("m1", "true").returncode == 0


@pytest.mark.sim
def test_no_ssh_trust_the_toolkit_did_not_make(sim_cluster):
    """As on real Macs: ~/.ssh holds only the controller's key in authorized_keys; a Mac has no
    key to log into another Mac with and knows no other Mac's host key."""
    c = sim_cluster("mesh4")
    for h in c.hosts:
        assert sorted(p.name for p in (c.home(h) / ".ssh").iterdir()) == ["authorized_keys"]
    r = c.ssh("m1", "ssh -o BatchMode=yes -o ConnectTimeout=5 10.99.0.5 hostname")
    assert r.returncode == 255 and "Host key verification failed" in r.stderr, r.stderr
    r = c.ssh(
        "m1",
        "ssh -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null 10.99.0.5 hostname",
    )
    assert r.returncode == 255 and "Permission denied" in r.stderr, r.stderr
    r = c.ssh("m1", "ssh -o BatchMode=yes -o ConnectTimeout=5 m3 hostname")
    assert r.returncode == 255 and "Could not resolve hostname m3" in r.stderr, r.stderr
    # each Mac shows its own host key where macOS keeps it, and sshd serves that key
    for h in ("m1", "m2"):
        shown = c.ssh(h, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
        assert shown == (c.host_dir(h) / "ssh_host_ed25519_key.pub").read_text().split()[:2]


@pytest.mark.sim
def test_controller_has_only_what_the_network_gives(sim_cluster):
    """The inventory's names do not resolve on the controller; its ssh_config reaches the LAN's
    addresses and knows their host keys, and nothing else (no user, no key, no alias)."""
    c = sim_cluster("mesh4")
    cfg = c.ssh_config_path.read_text()
    for word in ("User ", "IdentityFile", "HostName", "Host m1"):
        assert word not in cfg, word
    r = subprocess.run(
        ["ssh", "-F", str(c.ssh_config_path), "-o", "BatchMode=yes", "m1", "true"],
        env=c.env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 255 and "Could not resolve hostname m1" in r.stderr, r.stderr
    inv = yaml.safe_load(c.inventory_path.read_text())["mac_cluster"]
    assert inv["hosts"]["m1"] == {"ansible_host": c.mgmt_address("m1")}
    assert inv["vars"]["ansible_user"] == "admin" != os.environ.get("USER", "root")
    # by address, as the inventory says, it works
    r = subprocess.run(
        [
            "ssh",
            "-F",
            str(c.ssh_config_path),
            "-o",
            "BatchMode=yes",
            "-i",
            str(c.key_path),
            "-l",
            "admin",
            c.mgmt_address("m1"),
            "hostname",
        ],
        env=c.env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0 and r.stdout.strip() == "m1", r.stderr


@pytest.mark.sim
def test_stop_and_start_sshd(sim_cluster):
    c = sim_cluster("pair")
    c.stop_sshd("m2")
    try:
        r = c.ssh("m2", "true", timeout=60)
        assert r.returncode == 255
        assert c.status()["hosts"]["m2"]["sshd_alive"] is False
    finally:
        c.start_sshd("m2")
    assert c.ssh("m2", "hostname").stdout.strip() == "m2"
    assert "Accepted publickey for admin" in c.sshd_log("m2")


@pytest.mark.sim
def test_a_mac_announces_ssh_on_its_lan_port_only(sim_cluster):
    """Remote Login's Bonjour announcement (announce.py) listens on en0 alone: the mDNS group
    is joined there and on no Thunderbolt port or bridge0; stop_sshd withdraws it."""
    c = sim_cluster("pair")
    assert wait_until(lambda: all(c.announcing(h) for h in c.hosts)), c.status()["hosts"]
    for h in c.hosts:
        joined, iface = set(), None
        for line in c.exec(h, ["ip", "maddr", "show"], check=True).stdout.splitlines():
            m = re.match(r"^\d+:\s+(\S+)", line)
            iface = m.group(1) if m else iface
            if "224.0.0.251" in line:
                joined.add(iface)
        assert joined == {"en0"}, (h, joined)
    c.stop_sshd("m2")
    try:
        assert not c.announcing("m2") and not c.status()["hosts"]["m2"]["announcing"]
    finally:
        c.start_sshd("m2")
    assert wait_until(lambda: c.announcing("m2"))


# ---------------------------------------------------------------------------------------
# shims: formats and logging
# ---------------------------------------------------------------------------------------


@pytest.mark.sim
def test_system_profiler_thunderbolt_json(sim_cluster):
    c = sim_cluster("mesh4")
    data = {h: json.loads(sh(c, h, ["system_profiler", "SPThunderboltDataType", "-json"]).stdout) for h in c.hosts}
    raw = sh(c, "m1", ["system_profiler", "SPThunderboltDataType", "-json"]).stdout
    assert raw.startswith('{\n  "SPThunderboltDataType" : [')
    own = {}  # domain uuid -> (host, receptacle)
    for h, d in data.items():
        buses = d["SPThunderboltDataType"]
        assert len(buses) == 6
        for b in buses:
            assert b["_name"].startswith("thunderboltusb4_bus_")
            assert b["device_name_key"] == "Mac Studio" and b["vendor_name_key"] == "Apple Inc."
            assert re.match(r"^[0-9A-F-]{36}$", b["domain_uuid_key"]) and b["switch_uid_key"].startswith("0x")
            own[b["domain_uuid_key"]] = (h, int(b["receptacle_1_tag"]["receptacle_id_key"]))
    for h, d in data.items():
        for b in d["SPThunderboltDataType"]:
            tag = b["receptacle_1_tag"]
            k = int(tag["receptacle_id_key"])
            cable = c.spec.cables_of(h).get(f"en{k + 1}")
            if cable is None:
                assert tag["receptacle_status_key"] == "receptacle_no_devices_connected"
                assert tag["current_speed_key"] == "Up to 120 Gb/s" and "_items" not in b
                continue
            assert tag["receptacle_status_key"] == "receptacle_connected"
            assert tag["current_speed_key"] == "80 Gb/s"
            (peer,) = b["_items"]
            assert peer["_name"] == "Mac Studio" and peer["device_name_key"] == "Mac16,9"
            assert peer["vendor_name_key"] == "Apple Inc."
            far = cable.other(h, f"en{k + 1}")
            assert own[peer["domain_uuid_key"]] == (far.host, far.receptacle)


@pytest.mark.sim
def test_system_profiler_takes_a_macs_time_for_the_thunderbolt_report(sim_cluster):
    # a Mac's reporter walks the Thunderbolt IORegistry before it answers (macos.SP_SECONDS);
    # the simulated one must not answer at once (never kinder than a Mac)
    c = sim_cluster("mesh4")

    t = time.monotonic()
    sh(c, "m1", ["system_profiler", "SPThunderboltDataType", "-json"])
    assert time.monotonic() - t >= 0.7


@pytest.mark.sim
def test_system_profiler_dock_seen_from_one_side(sim_cluster):
    c = sim_cluster("mesh3_dock")
    m1 = json.loads(sh(c, "m1", ["system_profiler", "SPThunderboltDataType", "-json"]).stdout)
    m3 = json.loads(sh(c, "m3", ["system_profiler", "SPThunderboltDataType", "-json"]).stdout)
    (bus,) = [b for b in m1["SPThunderboltDataType"] if b["receptacle_1_tag"]["receptacle_id_key"] == "2"]
    (dock,) = bus["_items"]
    assert dock["_name"] == "CalDigit TS4" and dock["vendor_name_key"] == "CalDigit, Inc."
    assert "domain_uuid_key" not in dock
    (mac,) = dock["_items"]
    m3_port1 = [b for b in m3["SPThunderboltDataType"] if b["receptacle_1_tag"]["receptacle_id_key"] == "1"][0]
    assert mac["domain_uuid_key"] == m3_port1["domain_uuid_key"]
    assert bus["receptacle_1_tag"]["current_speed_key"] == "40 Gb/s"
    assert m3_port1["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_connected"
    assert "_items" not in m3_port1


@pytest.mark.sim
def test_networksetup_listings(sim_cluster):
    c = sim_cluster("mesh4")
    text = sh(c, "m1", ["networksetup", "-listallhardwareports"]).stdout
    assert text.startswith("\nHardware Port: Ethernet\nDevice: en0\nEthernet Address: ")
    assert text.endswith("\nVLAN Configurations\n===================\n")
    ports = hwports(text)
    assert ports == {
        "Ethernet": "en0",
        "Thunderbolt Bridge": "bridge0",
        **{f"Thunderbolt {k}": f"en{k + 1}" for k in range(1, 7)},
    }
    order = sh(c, "m1", ["networksetup", "-listnetworkserviceorder"]).stdout
    assert order.startswith(
        "An asterisk (*) denotes that a network service is disabled.\n"
        "(1) Ethernet\n(Hardware Port: Ethernet, Device: en0)\n\n"
        "(2) Thunderbolt Bridge\n(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n"
    )
    services = sh(c, "m1", ["networksetup", "-listallnetworkservices"]).stdout.splitlines()
    assert services[1:] == ["Ethernet", "Thunderbolt Bridge"]
    info = sh(c, "m1", ["networksetup", "-getinfo", "Ethernet"]).stdout
    assert "Manual Configuration\nIP address: 10.99.0.2\nSubnet mask: 255.255.255.0\n" in info
    r = sh(c, "m1", ["networksetup", "-getinfo", "Nope"], ok=False)
    assert r.returncode != 0
    assert r.stdout == "Nope is not a recognized network service.\n** Error: The parameters were not valid.\n"
    r = sh(c, "m1", ["networksetup", "-setmanual", "Thunderbolt Bridge", "10.0.0.1", "255.0.0.0"], ok=False)
    assert r.returncode != 0 and "requires admin privileges" in r.stdout


@pytest.mark.sim
def test_ifconfig_formats(sim_cluster):
    c = sim_cluster("mesh4")
    text = sh(c, "m1", ["ifconfig"]).stdout
    names = re.findall(r"^(\S+): flags=", text, re.M)
    assert names == ["lo0", "en0", "en2", "en3", "en4", "en5", "en6", "en7", "bridge0"]
    assert "\tinet 10.99.0.2 netmask 0xffffff00 broadcast 10.99.0.255\n" in text
    bridge = sh(c, "m1", ["ifconfig", "bridge0"]).stdout
    assert bridge.startswith("bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n")
    assert re.findall(r"^\tmember: (en\d+) flags=3<LEARNING,DISCOVER>$", bridge, re.M) == [
        "en2",
        "en3",
        "en4",
        "en5",
        "en6",
        "en7",
    ]
    en2 = sh(c, "m1", ["ifconfig", "en2"]).stdout
    assert "\tstatus: active" in en2
    assert "\tstatus: inactive" in sh(c, "m1", ["ifconfig", "en7"]).stdout
    r = sh(c, "m1", ["ifconfig", "en42"], ok=False)
    assert r.returncode == 1 and r.stderr == "ifconfig: interface en42 does not exist\n"
    assert sh(c, "m1", ["ifconfig", "-l"]).stdout.split() == names
    assert sh(c, "m1", ["ipconfig", "getifaddr", "en0"]).stdout == "10.99.0.2\n"
    assert sh(c, "m1", ["ipconfig", "getifaddr", "en2"], ok=False).returncode == 1


@pytest.mark.sim
def test_rdma_tools(sim_cluster):
    c = sim_cluster("mesh4")
    assert sh(c, "m1", ["rdma_ctl", "status"]).stdout == "enabled\n"
    r = sh(c, "m1", ["rdma_ctl", "enable"], sudo=True, ok=False)
    assert r.returncode != 0 and "Recovery" in r.stderr
    devices = sh(c, "m1", ["ibv_devices"]).stdout.splitlines()
    assert devices[0].split() == ["device", "node", "GUID"]
    assert [line.split()[0] for line in devices[2:]] == [f"rdma_en{k}" for k in range(2, 8)]
    info = sh(c, "m1", ["ibv_devinfo", "-v"]).stdout
    blocks = {b.split("\n")[0].split("\t")[1]: b for b in info.split("\n\n") if b.startswith("hca_id:")}
    assert "PORT_ACTIVE (4)" in blocks["rdma_en2"] and "PORT_DOWN (1)" in blocks["rdma_en7"]
    assert re.search(r"GID\[  0\]:\t\tfe80:0000:0000:0000:[0-9a-f:]+, RoCE v2", blocks["rdma_en2"])
    assert "ffff" not in blocks["rdma_en2"]  # no IPv4 on the port yet: no IPv4-mapped GID
    one = sh(c, "m1", ["ibv_devinfo", "-d", "rdma_en3"]).stdout
    assert one.startswith("hca_id:\trdma_en3\n") and "GID" not in one
    ring = sim_cluster("ring4")
    assert sh(ring, "m1", ["rdma_ctl", "status"]).stdout == "disabled\n"
    assert sh(ring, "m1", ["ibv_devices"]).stdout.count("rdma_") == 0
    r = sh(ring, "m1", ["ibv_devinfo"], ok=False)
    assert r.returncode != 0 and "No IB devices found" in r.stderr


@pytest.mark.sim
def test_sw_vers_sysctl_route_ping(sim_cluster):
    c = sim_cluster("mesh4")
    assert sh(c, "m3", ["sw_vers"]).stdout == "ProductName:\t\tmacOS\nProductVersion:\t\t26.2\nBuildVersion:\t\t25C56\n"
    assert sh(c, "m3", ["sw_vers", "-productVersion"]).stdout == "26.2\n"
    assert sh(c, "m3", ["sysctl", "-n", "hw.memsize", "hw.model", "hw.ncpu"]).stdout == f"{512 * 2**30}\nMac16,9\n32\n"
    assert sh(c, "m3", ["sysctl", "hw.memsize"]).stdout == f"hw.memsize: {512 * 2**30}\n"
    route = sh(c, "m3", ["route", "-n", "get", "default"]).stdout
    assert "  interface: en0\n" in route and "    gateway: 10.99.0.1\n" in route
    r = sh(c, "m3", ["ping", "-c", "2", "-i", "0.2", "-t", "5", "10.99.0.2"])
    assert r.stdout.startswith("PING 10.99.0.2 (10.99.0.2): 56 data bytes\n64 bytes from 10.99.0.2: icmp_seq=0 ")
    assert "2 packets transmitted, 2 packets received, 0.0% packet loss" in r.stdout
    assert "round-trip min/avg/max/stddev = " in r.stdout
    r = sh(c, "m3", ["ping", "-c", "1", "-t", "1", "10.99.0.250"], ok=False)
    assert r.returncode == 2 and "100.0% packet loss" in r.stdout
    # -o: the first reply ends it (one request sent, not five a second apart)
    r = sh(c, "m3", ["ping", "-o", "-c", "5", "-t", "5", "10.99.0.2"])
    assert r.stdout.startswith("PING 10.99.0.2 (10.99.0.2): 56 data bytes\n64 bytes from 10.99.0.2: icmp_seq=0 ")
    assert "1 packets transmitted, 1 packets received, 0.0% packet loss" in r.stdout
    q = sh(c, "m3", ["ping", "-q", "-o", "-c", "5", "10.99.0.2"]).stdout
    assert " bytes from " not in q and "1 packets received" in q


@pytest.mark.sim
def test_pmset_and_software_update_of_a_desktop_and_a_laptop(tmp_path):
    """pmset as Apple's pmset.m answers: -g custom per source (a laptop's battery first, no
    autorestart there), -c changes AC only and needs root, bad arguments print the usage,
    the settings survive a reboot; defaults reads and writes the SoftwareUpdate keys."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import parse_pmset_custom
    from tests.simcluster.cluster import unavailable_reason

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    spec = tmp_path / "power.yml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "power",
                "management": {"cidr": "10.99.7.0/24"},
                "hosts": [
                    {"name": "m1", "pmset": {"displaysleep": 0}, "software_update": {}},
                    {
                        "name": "m2",
                        "model": "MacBook Pro",
                        "model_id": "Mac16,5",
                        "battery": True,
                        "software_update": {"AutomaticallyInstallMacOSUpdates": True},
                    },
                ],
                "cables": [{"a": "m1:1", "b": "m2:1"}],
            }
        )
    )
    c = SimCluster(str(spec), tmp_path / "state").up()
    try:
        desk = sh(c, "m1", ["pmset", "-g", "custom"]).stdout
        assert desk.startswith("AC Power:\n Sleep On Power Button 1\n autorestartatconnect 0\n")
        assert " displaysleep         0\n" in desk  # the spec's, over macOS's default of 10
        assert parse_pmset_custom(desk) == {"AC Power": parse_pmset_custom(desk)["AC Power"]}
        assert {k: parse_pmset_custom(desk)["AC Power"][k] for k in ("sleep", "disksleep", "autorestart")} == {
            "sleep": 1,
            "disksleep": 10,
            "autorestart": 0,
        }
        laptop = parse_pmset_custom(sh(c, "m2", ["pmset", "-g", "custom"]).stdout)
        assert list(laptop) == ["Battery Power", "AC Power"]
        assert "autorestart" not in laptop["AC Power"] and laptop["Battery Power"]["displaysleep"] == 2
        # -g (live): the AC settings in use
        live = sh(c, "m1", ["pmset", "-g"]).stdout
        assert live.startswith("System-wide power settings:\n SleepDisabled\t\t0\nCurrently in use:\n")

        # changing needs root: refused as pmset refuses, on stdout, nothing stored
        r = sh(c, "m1", ["pmset", "-c", "sleep", "0"], ok=False)
        assert r.returncode == 1 and r.stdout.endswith("pmset' must be run as root...\n")
        for argv, says in (
            (["pmset", "-c", "sleep"], ""),
            (["pmset", "-c", "sleep", "never"], ""),
            (["pmset", "-c", "sleep", "-1"], ""),
            (["pmset", "-c", "bogus", "1"], ""),
            (["pmset", "-x"], ""),
            (["pmset"], ""),
            (["pmset", "-g", "bogus"], "Error: unhandled argument bogus\n"),
        ):
            r = sh(c, "m1", argv, sudo=True, ok=False)
            assert (r.returncode, r.stdout) == (
                1,
                says + "Usage: pmset <options>\nSee pmset(1) for details: 'man pmset'\n",
            ), argv
        # sleep on, disk sleep never: pmset warns (stderr) and stores it
        r = sh(c, "m1", ["pmset", "-c", "disksleep", "0"], sudo=True)
        assert 'Warning: Idle sleep timings for "AC Power" may not behave as expected.' in r.stderr
        assert "- Disk sleep should be non-zero whenever system sleep is non-zero." in r.stderr
        sh(c, "m1", ["pmset", "-c", "SLEEP", "0", "autorestart", "5"], sudo=True)  # lowercased; on/off: 1
        sh(c, "m2", ["pmset", "-c", "sleep", "0", "autorestart", "1", "disksleep", "0x0"], sudo=True)
        c.reboot("m1")
        after = parse_pmset_custom(sh(c, "m1", ["pmset", "-g", "custom"]).stdout)["AC Power"]
        assert (after["sleep"], after["disksleep"], after["autorestart"]) == (0, 0, 1)  # survived the reboot
        laptop = parse_pmset_custom(sh(c, "m2", ["pmset", "-g", "custom"]).stdout)
        assert (laptop["AC Power"]["sleep"], laptop["AC Power"]["disksleep"]) == (0, 0)
        assert laptop["Battery Power"]["sleep"] == 1  # -c: the battery's stay
        assert "autorestart" not in laptop["AC Power"]  # written, never shown

        su = "/Library/Preferences/com.apple.SoftwareUpdate"
        r = sh(c, "m1", ["defaults", "read", su, "AutomaticallyInstallMacOSUpdates"], ok=False)
        assert r.returncode == 1 and r.stderr.endswith(
            f"\nThe domain/default pair of ({su}, AutomaticallyInstallMacOSUpdates) does not exist\n"
        )
        assert sh(c, "m2", ["defaults", "read", su, "AutomaticallyInstallMacOSUpdates"]).stdout == "1\n"
        r = sh(c, "m2", ["defaults", "write", su, "AutomaticallyInstallMacOSUpdates", "-bool", "false"], ok=False)
        assert r.returncode == 1 and f"Could not write domain {su}" in r.stderr
        sh(c, "m2", ["defaults", "write", su, "AutomaticallyInstallMacOSUpdates", "-bool", "false"], sudo=True)
        assert sh(c, "m2", ["defaults", "read", su, "AutomaticallyInstallMacOSUpdates"]).stdout == "0\n"
        c.reset()
        assert sh(c, "m2", ["defaults", "read", su, "AutomaticallyInstallMacOSUpdates"]).stdout == "1\n"
        again = parse_pmset_custom(sh(c, "m1", ["pmset", "-g", "custom"]).stdout)["AC Power"]
        assert (again["sleep"], again["autorestart"]) == (1, 0)  # reset: the spec's again
    finally:
        assert c.down() == []


@pytest.mark.sim
def test_mlx_reports_the_metal_limit_a_mac_would(sim_cluster):
    """MLX's device_info() on a simulated Mac, in an ssh session as the env stage reads it:
    the memory and Metal's recommendedMaxWorkingSetSize (macOS 26's default share, then the
    sysctl's value once it is set), added to what the Linux wheel reports. A stand-in
    mlx.core (the Linux wheel's answer) keeps the test off the venv."""
    c = sim_cluster("pair")
    c.reset()
    fake = "/tmp/fake-mlx"
    c.exec("m1", ["mkdir", "-p", f"{fake}/mlx"], check=True)
    c.exec("m1", ["tee", f"{fake}/mlx/__init__.py"], input="", check=True)
    linux = "def device_info():\n    return {'architecture': 'x86_64'}\n"
    c.exec("m1", ["tee", f"{fake}/mlx/core.py"], input=linux, check=True)
    read = (
        f'python3 -c \'import json, sys; sys.path.insert(0, "{fake}"); import mlx.core as mx; '
        "print(json.dumps(mx.device_info()))'"
    )
    mem = int(sh(c, "m1", ["sysctl", "-n", "hw.memsize"]).stdout)
    r = c.ssh("m1", read)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "architecture": "x86_64",
        "memory_size": mem,
        "max_recommended_working_set_size": int(mem * 0.84),  # 512 GB, macOS 26
    }
    sh(c, "m1", ["sysctl", "iogpu.wired_limit_mb=8192"], sudo=True)
    assert json.loads(c.ssh("m1", read).stdout)["max_recommended_working_set_size"] == 8192 << 20
    c.reset()


@pytest.mark.sim
def test_sysctl_wired_limit_and_launchd_daemons_at_boot(sim_cluster):
    """iogpu.wired_limit_mb: written by root only, gone at a restart unless a LaunchDaemon sets
    it again; launchctl bootstrap/print/bootout as macOS answers; a plist launchd would refuse
    (not a plist, group-writable) is not loaded, neither by bootstrap nor at boot."""
    import plistlib

    c = sim_cluster("pair")
    c.reset()
    oid = "iogpu.wired_limit_mb"
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "0\n"
    r = sh(c, "m1", ["sysctl", f"{oid}=4096"], ok=False)
    assert (r.returncode, r.stderr) == (1, f"sysctl: {oid}: Operation not permitted\n")
    for bad in (f"{oid}=lots", f"{oid}=-1", f"{oid}={10**7}"):
        assert sh(c, "m1", ["sysctl", bad], sudo=True, ok=False).returncode == 1
    assert sh(c, "m1", ["sysctl", "-n", "hw.memsize=1"], sudo=True, ok=False).returncode == 1  # read only
    assert sh(c, "m1", ["sysctl", f"{oid}=4096"], sudo=True).stdout == f"{oid}: 0 -> 4096\n"
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "4096\n"
    c.reboot("m1")
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "0\n"  # a sysctl lasts until the restart

    good = "/Library/LaunchDaemons/org.example.wired.plist"
    bad = "/Library/LaunchDaemons/org.example.bad.plist"
    body = plistlib.dumps(
        {"Label": "org.example.wired", "RunAtLoad": True, "ProgramArguments": ["/usr/sbin/sysctl", f"{oid}=8192"]}
    )
    c.exec("m1", ["tee", good], input=body.decode(), check=True)
    c.exec("m1", ["tee", bad], input=body.decode().replace("org.example.wired", "org.example.bad"), check=True)
    c.exec("m1", ["chmod", "664", bad], check=True)  # group-writable: launchd refuses it
    r = sh(c, "m1", ["launchctl", "print", "system/org.example.wired"], ok=False)
    assert (r.returncode, r.stderr) == (113, 'Could not find service "org.example.wired" in domain for system\n')
    r = sh(c, "m1", ["launchctl", "bootstrap", "system", good], ok=False)
    assert r.returncode == 5 and "as root for richer errors" in r.stderr
    sh(c, "m1", ["launchctl", "bootstrap", "system", good], sudo=True)
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "8192\n"  # RunAtLoad ran it
    printed = sh(c, "m1", ["launchctl", "print", "system/org.example.wired"]).stdout
    assert f"\tpath = {good}\n" in printed and "\tlast exit code = 0\n" in printed
    assert sh(c, "m1", ["launchctl", "bootstrap", "system", good], sudo=True, ok=False).returncode == 5  # loaded
    r = sh(c, "m1", ["launchctl", "bootstrap", "system", bad], sudo=True, ok=False)
    assert (r.returncode, r.stderr) == (5, "Bootstrap failed: 5: Input/output error\n")
    c.exec("m1", ["tee", bad], input="<plist><dict><key>Label</key>", check=True)  # not a plist
    c.exec("m1", ["chmod", "644", bad], check=True)
    assert sh(c, "m1", ["launchctl", "bootstrap", "system", bad], sudo=True, ok=False).returncode == 5

    sh(c, "m1", ["sysctl", f"{oid}=0"], sudo=True)
    c.reboot("m1")  # launchd runs the daemon again
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "8192\n"
    assert sh(c, "m1", ["launchctl", "print", "system/org.example.bad"], ok=False).returncode == 113
    sh(c, "m1", ["launchctl", "bootout", "system/org.example.wired"], sudo=True)
    r = sh(c, "m1", ["launchctl", "bootout", "system/org.example.wired"], sudo=True, ok=False)
    assert (r.returncode, r.stderr) == (3, "Boot-out failed: 3: No such process\n")
    c.set_host("m2", wired_limit_mb=2048)  # the harness's own override
    assert sh(c, "m2", ["sysctl", "-n", oid]).stdout == "2048\n"
    c.reset()
    assert sh(c, "m1", ["sysctl", "-n", oid]).stdout == "0\n" == sh(c, "m2", ["sysctl", "-n", oid]).stdout
    assert sh(c, "m1", ["ls", "/Library/LaunchDaemons"]).stdout == ""  # factory state


@pytest.mark.sim
def test_argv_is_logged_per_host(sim_cluster, sim_clean_logs):
    c = sim_cluster("mesh4")
    assert c.ssh("m2", "sw_vers -productVersion; sudo ifconfig bridge0 >/dev/null").returncode == 0
    log = c.argv_log("m2")
    assert ["sw_vers", "-productVersion"] in log
    assert ["sudo", "ifconfig", "bridge0"] in log and ["ifconfig", "bridge0"] in log
    rec = c.argv_records("m2")[0]
    assert set(rec) == {"ts", "argv", "cwd", "pid"} and rec["cwd"] == "/srv/admin"
    assert c.argv_log("m1") == []
    sim_clean_logs()
    assert c.argv_log("m2") == []


# ---------------------------------------------------------------------------------------
# setters change the namespace for real; reboot re-applies the persistent preferences
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_pair(tmp_path_factory):
    from tests.simcluster.cluster import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = SimCluster("pair", tmp_path_factory.mktemp("own") / "pair").up()
    yield cluster
    assert cluster.down() == []


@pytest.mark.sim
def test_setters_bridge_and_reboot(own_pair):
    c = own_pair
    addr = {"m1": "10.208.0.1", "m2": "10.208.0.2"}
    remove_en2 = (
        "lock\nget /VirtualNetworkInterfaces/Bridge/bridge0\nd.add Interfaces * {}\n"
        "set /VirtualNetworkInterfaces/Bridge/bridge0\ncommit\napply\nunlock\nquit\n"
    )
    # en2 is in bridge0's definition: macOS refuses a service of its own on it
    r = sh(c, "m1", ["networksetup", "-createnetworkservice", "Thunderbolt 1", "Thunderbolt 1"], sudo=True, ok=False)
    assert r.returncode == 4 and "parameters were not valid" in r.stdout
    # a port out of the bridge at runtime only (deletem) or with the bridge's service off
    # comes back into bridge0 at the next boot: configd rebuilds it, up, from its definition
    sh(c, "m1", ["ifconfig", "bridge0", "deletem", "en2"], sudo=True)
    sh(c, "m1", ["networksetup", "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"], sudo=True)
    assert "member: en2 " not in sh(c, "m1", ["ifconfig", "bridge0"]).stdout
    c.reboot("m1")
    bridge = sh(c, "m1", ["ifconfig", "bridge0"]).stdout
    assert bridge.startswith("bridge0: flags=8863<UP,") and "member: en2 " in bridge
    assert "PROMISC" in sh(c, "m1", ["ifconfig", "en2"]).stdout.splitlines()[0]
    assert json.loads(c.exec("m1", ["ip", "-j", "link", "show", "dev", "en2"]).stdout)[0].get("master") == "bridge0"
    # scutil --prefs takes it out of the definition: at once (configd applies it) and for good
    members = {h: [m for m in c.netprefs(h)["bridges"]["bridge0"]["members"] if m != "en2"] for h in c.hosts}
    for h in c.hosts:
        r = c.exec(h, ["sudo", "scutil", "--prefs"], input=remove_en2.format(" ".join(members[h])))
        assert r.returncode == 0 and r.stdout == "", (h, r.stdout)
        assert c.netprefs(h)["bridges"]["bridge0"]["members"] == members[h]
        sh(c, h, ["networksetup", "-createnetworkservice", "Thunderbolt 1", "Thunderbolt 1"], sudo=True)
        sh(c, h, ["networksetup", "-setmanual", "Thunderbolt 1", addr[h], "255.255.255.252"], sudo=True)
        assert ipv4_of(c, h, "en2") == [addr[h]]
        assert c.netprefs(h)["services"][-1]["ipv4"]["address"] == addr[h]
        assert "member: en2 " not in sh(c, h, ["ifconfig", "bridge0"]).stdout
    assert ping(c, "m1", addr["m2"], "en2").returncode == 0
    assert ping(c, "m2", addr["m1"], "en2").returncode == 0
    c.reboot("m1")
    c.reboot("m2")
    for h in c.hosts:
        assert "member: en2 " not in sh(c, h, ["ifconfig", "bridge0"]).stdout
        assert ipv4_of(c, h, "en2") == [addr[h]]  # the service was re-applied at boot
    assert ping(c, "m1", addr["m2"]).returncode == 0
    assert ping(c, "m2", addr["m1"]).returncode == 0
    order = sh(c, "m1", ["networksetup", "-listnetworkserviceorder"]).stdout
    assert "(*) Thunderbolt Bridge\n" in order and "(2) Thunderbolt 1\n" in order
    # without sudo scutil says why and exits 0, as the real one does; nothing changed
    r = c.exec("m2", ["scutil", "--prefs"], input=remove_en2.format(""))
    assert r.returncode == 0 and "Permission denied" in r.stdout
    assert c.netprefs("m2")["bridges"]["bridge0"]["members"] == members["m2"]
    # the preferences file says what networksetup -getinfo says, for every service
    sh(c, "m2", ["networksetup", "-setdhcp", "Thunderbolt 1"], sudo=True)
    for h in c.hosts:
        services = mlx_tb.parse_service_order(sh(c, h, ["networksetup", "-listnetworkserviceorder"]).stdout)
        prefs = c.exec(h, ["cat", mlx_netcfg.SC_PREFERENCES], check=True).stdout.encode()
        from_file = mlx_netcfg.services_from_preferences(prefs, services)
        assert sorted(from_file) == sorted(x["name"] for x in services)
        for svc in services:
            info = mlx_netcfg.parse_getinfo(sh(c, h, ["networksetup", "-getinfo", svc["name"]]).stdout)
            if info["method"] != "manual":
                info["address"] = info["subnet"] = None  # the file holds no address for DHCP
            assert from_file[svc["name"]] == info, (h, svc["name"])
    assert from_file["Thunderbolt 1"]["method"] == "dhcp"
    sh(c, "m2", ["networksetup", "-setmanual", "Thunderbolt 1", addr["m2"], "255.255.255.252"], sudo=True)
    # ifconfig and route setters
    sh(c, "m1", ["ifconfig", "en2", "inet", "10.208.0.5", "netmask", "255.255.255.252"], sudo=True)
    assert ipv4_of(c, "m1", "en2") == ["10.208.0.5"]  # replaces the first address
    sh(c, "m1", ["ifconfig", "en2", "inet", "10.208.0.5", "delete"], sudo=True)
    assert ipv4_of(c, "m1", "en2") == []
    sh(c, "m1", ["ifconfig", "en2", "10.208.0.1/30", "up"], sudo=True)
    r = sh(c, "m1", ["route", "-n", "add", "-host", "10.208.0.2", "-interface", "en2"], sudo=True)
    assert r.stdout == "add host 10.208.0.2: gateway en2\n"
    got = sh(c, "m1", ["route", "-n", "get", "10.208.0.2"]).stdout
    assert "destination: 10.208.0.2\n" in got and "HOST" in got and "  interface: en2\n" in got
    # netstat lists the same host route, in the table the product parses
    table = mlx_netcfg.parse_netstat_routes(sh(c, "m1", ["netstat", "-rn", "-f", "inet"]).stdout)
    assert table["10.208.0.2"]["interface"] == "en2" and "HOST" in table["10.208.0.2"]["flags"]
    assert sh(c, "m1", ["netstat", "-rn", "-f", "inet6"], ok=False).returncode == 64
    r = sh(c, "m1", ["route", "-n", "add", "-host", "10.208.0.2", "-interface", "en2"], sudo=True, ok=False)
    assert r.returncode == 1 and "File exists" in r.stdout
    sh(c, "m1", ["route", "-n", "delete", "-host", "10.208.0.2"], sudo=True)
    assert sh(c, "m1", ["route", "-n", "delete", "-host", "10.208.0.2"], sudo=True, ok=False).returncode == 1
    r = sh(c, "m1", ["route", "-n", "add", "-host", "10.208.0.2", "-interface", "en2"], ok=False)
    assert r.returncode == 1 and "must be root" in r.stderr


@pytest.mark.sim
def test_unplug_plug_and_live_overrides(own_pair):
    c = own_pair
    cable = "m1:en2~m2:en2"

    def port1(host):
        d = json.loads(sh(c, host, ["system_profiler", "SPThunderboltDataType", "-json"]).stdout)
        return [b for b in d["SPThunderboltDataType"] if b["receptacle_1_tag"]["receptacle_id_key"] == "1"][0]

    c.unplug(cable)
    try:
        for h in c.hosts:
            assert port1(h)["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_no_devices_connected"
            assert "PORT_DOWN (1)" in sh(c, h, ["ibv_devinfo", "-d", "rdma_en2"]).stdout
            en2 = sh(c, h, ["ifconfig", "en2"]).stdout
            # the interface stays up (8963, PROMISC too, while it is in the Thunderbolt Bridge)
            assert "status: inactive" in en2 and re.match(r"en2: flags=8[89]63<UP,", en2), en2
        assert c.status()["cables"][cable]["plugged"] is False
    finally:
        c.plug(cable)
    assert port1("m1")["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_connected"
    assert wait_until(lambda: "PORT_ACTIVE" in sh(c, "m1", ["ibv_devinfo", "-d", "rdma_en2"]).stdout)

    c.set_host("m2", tb_version=4)
    try:
        assert port1("m1")["receptacle_1_tag"]["current_speed_key"] == "40 Gb/s"
        assert port1("m2")["receptacle_1_tag"]["current_speed_key"] == "40 Gb/s"
        assert sh(c, "m2", ["ibv_devices"]).stdout.count("rdma_") == 0
        c.set_host("m2", tb_version=5, macos="15.5", build="24F74")
        assert sh(c, "m2", ["sw_vers", "-productVersion"]).stdout == "15.5\n"
        r = c.ssh("m2", "rdma_ctl status")
        assert r.returncode == 127, "macOS before 26.2 has no rdma_ctl"
        c.set_host("m2", macos="26.2", build="25C56", rdma=False)
        assert c.ssh("m2", "rdma_ctl status").stdout == "disabled\n"
    finally:
        c.set_host("m2", tb_version=5, macos="26.2", build="25C56", rdma=True)
    assert sh(c, "m2", ["rdma_ctl", "status"]).stdout == "enabled\n"


@pytest.mark.sim
def test_sudo_allowed_only_for_some_commands(own_pair):
    # `admin ALL=(ALL) NOPASSWD: /usr/bin/true`: that command runs, any other asks for the
    # password first (-n: it fails at once) and, given it, is refused naming the command
    c = own_pair
    c.set_host("m2", sudo_commands=["/usr/bin/true"])
    try:
        assert c.exec("m2", ["sudo", "-n", "/usr/bin/true"]).returncode == 0
        r = c.exec("m2", ["sudo", "-n", "/bin/sh", "-c", "true"])
        assert (r.returncode, r.stderr) == (1, "sudo: a password is required\n")
        assert "NOPASSWD: /usr/bin/true" in c.exec("m2", ["sudo", "-l"]).stdout
        c.set_host("m2", sudo_password="pw")
        r = c.exec("m2", ["sudo", "-S", "-p", "Password:", "/bin/sh", "-c", "true"], input="pw\n")
        assert r.returncode == 1
        assert r.stderr.endswith("Sorry, user admin is not allowed to execute '/bin/sh -c true' as root on m2.\n"), (
            r.stderr
        )
    finally:
        c.set_host("m2", sudo_commands=[], sudo_password="")
    assert c.exec("m2", ["sudo", "-n", "/bin/sh", "-c", "true"]).returncode == 0


@pytest.mark.sim
def test_cable_moved_to_another_port_and_rdma_port_down(own_pair):
    c = own_pair

    def ports(host):
        d = json.loads(sh(c, host, ["system_profiler", "SPThunderboltDataType", "-json"]).stdout)
        return {b["receptacle_1_tag"]["receptacle_id_key"]: b for b in d["SPThunderboltDataType"]}

    def peer_port(bus):
        items = bus.get("_items") or []
        return items[0]["domain_uuid_key"] if items else None

    c.reset()  # the tests before left addresses on en2
    m2_port1 = ports("m2")["1"]["domain_uuid_key"]
    c.move("m1:en2", "m1:en4")
    try:
        with pytest.raises(SimError, match="not empty"):
            c.move("m2:en2", "m1:en4")
        with pytest.raises(SimError, match="no cable is plugged into m1:en2"):
            c.move("m1:en2", "m1:en5")
        m1 = ports("m1")
        assert m1["1"]["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_no_devices_connected"
        assert m1["3"]["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_connected"
        assert peer_port(m1["3"]) == m2_port1
        # m2 now sees m1's receptacle 3 (its domain) behind its port 1
        assert peer_port(ports("m2")["1"]) == m1["3"]["domain_uuid_key"]
        assert "status: inactive" in sh(c, "m1", ["ifconfig", "en2"]).stdout
        assert wait_until(lambda: "status: active" in sh(c, "m1", ["ifconfig", "en4"]).stdout)
        sh(c, "m1", ["ifconfig", "en4", "10.208.0.1/30", "up"], sudo=True)
        sh(c, "m2", ["ifconfig", "en2", "10.208.0.2/30", "up"], sudo=True)
        sh(c, "m1", ["ifconfig", "bridge0", "deletem", "en4"], sudo=True)
        sh(c, "m2", ["ifconfig", "bridge0", "deletem", "en2"], sudo=True)
        # real traffic on the new port (the moved end's carrier comes up within a moment)
        assert wait_until(lambda: ping(c, "m2", "10.208.0.1", "en2").returncode == 0, timeout=15)
        # a cable that is seen but whose RDMA port stays down
        c.set_host("m2", rdma_port_down=["en2"])
        assert "PORT_DOWN (1)" in sh(c, "m2", ["ibv_devinfo", "-d", "rdma_en2"]).stdout
        assert ports("m2")["1"]["receptacle_1_tag"]["receptacle_status_key"] == "receptacle_connected"
    finally:
        c.reset()
    assert peer_port(ports("m1")["1"]) == m2_port1
    assert "status: inactive" in sh(c, "m1", ["ifconfig", "en4"]).stdout
    assert wait_until(lambda: "PORT_ACTIVE" in sh(c, "m2", ["ibv_devinfo", "-d", "rdma_en2"]).stdout)


@pytest.mark.sim
def test_reset_leaves_no_shaping_or_packet_filter(own_pair):
    """A shaping a test left on a port (tc tbf) and block_ports()' filter are both gone after
    reset(); block_ports() over a shaping names it instead of failing inside tc."""
    c = own_pair

    def qdiscs(host):
        return subprocess.run(
            ["tc", "-n", c.ns(host), "qdisc", "show"], capture_output=True, text=True, check=True
        ).stdout

    shape = ["tc", "-n", c.ns("m1"), "qdisc", "replace", "dev", "en2", "root", "tbf"]
    subprocess.run([*shape, "rate", "100mbit", "burst", "32768", "latency", "100ms"], check=True)
    with pytest.raises(SimError, match=r"m1 has a root qdisc already .*'en2': 'qdisc tbf "):
        c.block_ports("m1", [5000])
    c.reset()
    roots = [ln for ln in qdiscs("m1").splitlines() if " root " in ln]
    assert roots and all(ln.startswith("qdisc noqueue 0: ") for ln in roots), roots
    c.block_ports("m1", [5000])
    assert "qdisc htb 1: dev en2 root" in qdiscs("m1")
    c.reset()
    assert "htb" not in qdiscs("m1") and "blocked_ports" not in c._live()["hosts"].get("m1", {})


@pytest.mark.sim
def test_sshd_that_dies_on_a_command(own_pair):
    c = own_pair
    with c.die_on("m2", ["sw_vers", "-productVersion"], nth=2) as died:
        assert c.ssh("m2", "sw_vers -productVersion").stdout == "26.2\n"
        assert c.ssh("m2", "sw_vers").returncode == 0  # no match: not counted
        start = time.monotonic()
        r = c.ssh("m2", "sw_vers -productVersion; echo survived", timeout=30)
        assert r.returncode == 255 and "survived" not in r.stdout  # the session died with sshd
        assert time.monotonic() - start < 10  # closed, not silent
        assert wait_until(lambda: died["fired"] is not None)
        assert c.is_up("m2") and c.ssh("m2", "true", timeout=30).returncode == 255
        assert c.exec("m2", ["true"]).returncode == 0  # the Mac itself runs on
        c.start_sshd("m2")
        assert c.ssh("m2", "sw_vers -productVersion").returncode == 0  # fired once
    assert c._live()["hosts"]["m2"]["die_on"] is None  # the rule is gone
    assert c.ssh("m2", "sw_vers -productVersion").returncode == 0


@pytest.mark.sim
def test_a_mac_that_loses_power_on_a_command(own_pair):
    c = own_pair
    c.reset()
    assert "status: active" in sh(c, "m1", ["ifconfig", "en2"]).stdout
    try:
        with c.die_on("m2", ["sw_vers"], mode="power") as died:
            start = time.monotonic()
            r = c.exec("m2", ["sw_vers"], timeout=60)
            assert r.returncode != 0 and not r.stdout and time.monotonic() - start < 20
            assert died["fired"] is not None and not c.is_up("m2") and c.is_up("m1")
            assert "status: inactive" in sh(c, "m1", ["ifconfig", "en2"]).stdout  # no carrier
            r = c.ssh("m2", "true", timeout=30)  # nothing answers on the LAN
            assert r.returncode == 255, r.stderr
        c.reboot("m2")
        assert c.is_up("m2") and c.ssh("m2", "sw_vers").returncode == 0
        assert wait_until(lambda: "status: active" in sh(c, "m1", ["ifconfig", "en2"]).stdout)
    finally:
        if not c.is_up("m2"):
            c.reboot("m2")


@pytest.mark.sim
def test_ansible_playbook_over_real_ssh(own_pair, tmp_path):
    c = own_pair
    play = tmp_path / "play.yml"
    play.write_text("""
- hosts: mac_cluster
  gather_facts: false
  tasks:
    - ansible.builtin.command: sw_vers -productVersion
      register: v
      changed_when: false
    - ansible.builtin.command: networksetup -setv6off Ethernet
      become: true
    - ansible.builtin.command: networksetup -setv6off Ethernet
      register: unprivileged
      failed_when: "'requires admin privileges' not in unprivileged.stdout"
    - ansible.builtin.copy: {content: "hello {{ inventory_hostname }}\\n", dest: "~/hello.txt", mode: "0644"}
    - ansible.builtin.assert: {that: ["v.stdout == '26.2'"]}
""")
    env = c.env()
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # Ansible's defaults, not the repo's
    env.update(
        {
            "ANSIBLE_HOME": str(tmp_path / "ah"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "lt"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
            "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    r = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(c.inventory_path), str(play)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for h in c.hosts:
        assert (c.home(h) / "hello.txt").read_text() == f"hello {h}\n"
        # become went through the simulated sudo (ansible's own flags)
        assert any(a[:6] == ["sudo", "-H", "-S", "-n", "-u", "root"] for a in c.argv_log(h))


# ---------------------------------------------------------------------------------------
# MLX's own tools, unmodified
# ---------------------------------------------------------------------------------------


def distributed_config(cluster, hostfile):
    argv = [
        str(VENV_BIN / "mlx.distributed_config"),
        "--over",
        "thunderbolt",
        "--hosts",
        ",".join(cluster.hosts),
        "--auto-setup",
        "--output-hostfile",
        str(hostfile),
    ]
    r = subprocess.run(
        argv,
        env=cluster.harness_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cluster.state_dir,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(hostfile.read_text())


def assert_cables_ping_both_ways(cluster):
    for cable in cluster.spec.cables:
        a, b = cable.a, cable.b
        (aa,), (ba,) = ipv4_of(cluster, a.host, a.iface), ipv4_of(cluster, b.host, b.iface)
        assert ping(cluster, a.host, ba, a.iface).returncode == 0, f"{cable.id}: {a.host} -> {ba}"
        assert ping(cluster, b.host, aa, b.iface).returncode == 0, f"{cable.id}: {b.host} -> {aa}"


@pytest.mark.sim
def test_mlx_distributed_config_mesh4(sim_cluster, tmp_path):
    c = sim_cluster("mesh4")
    try:
        hostfile = distributed_config(c, tmp_path / "mesh4.json")
        assert hostfile["backend"] == "jaccl"  # full mesh with RDMA
        assert [h["ssh"] for h in hostfile["hosts"]] == c.hosts
        assert hostfile["hosts"][0]["rdma"] == [None, "rdma_en2", "rdma_en3", "rdma_en4"]
        assert_cables_ping_both_ways(c)
        assert "ffff:c0a8" in sh(c, "m1", ["ibv_devinfo", "-v", "-d", "rdma_en2"]).stdout  # IPv4 GID now
    finally:
        c.reset()


@pytest.mark.sim
def test_launchd_runs_a_daemon_keeps_it_alive_and_ends_it_at_bootout(sim_cluster):
    """A LaunchDaemon whose program is not a simulated command runs as launchd runs a daemon:
    at bootstrap (RunAtLoad), in the plist's directory and environment, its output in its log;
    `print` shows its pid; KeepAlive SuccessfulExit false starts it again after a crash, no
    sooner than ThrottleInterval, not after a clean exit; bootout ends its whole process group
    and returns once it is gone; at boot it runs again."""
    import plistlib

    c = sim_cluster("pair")
    c.reset()
    home = c.home("m1")
    (home / "job.sh").write_text(
        '#!/bin/sh\necho "start $$ $GREETING $(pwd)"\nsleep 1000 &\n'
        "trap 'echo term; exit 0' TERM\nwhile [ ! -e /srv/admin/job.exit ]; do sleep 0.1; done\n"
        "code=$(cat /srv/admin/job.exit); rm /srv/admin/job.exit; exit $code\n"
    )
    (home / "job.sh").chmod(0o755)
    plist = "/Library/LaunchDaemons/org.example.job.plist"
    body = plistlib.dumps(
        {
            "Label": "org.example.job",
            "RunAtLoad": True,
            "ProgramArguments": ["/srv/admin/job.sh"],
            "EnvironmentVariables": {"GREETING": "hello"},
            "WorkingDirectory": "/srv/admin",
            "StandardOutPath": "/srv/admin/job.log",
            "StandardErrorPath": "/srv/admin/job.log",
            "KeepAlive": {"SuccessfulExit": False},
            "ThrottleInterval": 2,
            "ExitTimeOut": 5,
        }
    )
    c.exec("m1", ["tee", plist], input=body.decode(), check=True)

    def job():
        printed = sh(c, "m1", ["launchctl", "print", "system/org.example.job"], ok=False)
        fields = dict(
            ln.strip().split(" = ", 1)
            for ln in printed.stdout.splitlines()
            if " = " in ln and ln.startswith("\t") and not ln.startswith("\t\t")
        )
        return printed.returncode, fields

    def wait(pred, seconds=15):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            got = pred()
            if got:
                return got
            time.sleep(0.1)
        return None

    def starts():
        try:
            return [ln.split() for ln in (home / "job.log").read_text().splitlines() if ln.startswith("start ")]
        except FileNotFoundError:
            return []

    sh(c, "m1", ["launchctl", "bootstrap", "system", plist], sudo=True)
    assert wait(lambda: job()[1].get("state") == "running" and starts()), (job(), starts())
    ((_, pid, greeting, cwd),) = starts()
    assert (greeting, cwd) == ("hello", "/srv/admin") and job()[1]["pid"] == pid and job()[1]["runs"] == "1"
    # a crash (exit 3): started again, ThrottleInterval (2 s) after its last start at the soonest
    t0 = time.monotonic()
    (home / "job.exit").write_text("3")
    assert wait(lambda: len(starts()) == 2), starts()
    assert time.monotonic() - t0 >= 1.0 and job()[1]["last exit code"] == "3" and job()[1]["runs"] == "2"
    # a clean exit: not started again, still loaded
    (home / "job.exit").write_text("0")
    assert wait(lambda: job()[1].get("state") == "not running"), job()
    time.sleep(3)
    assert len(starts()) == 2 and job()[1]["last exit code"] == "0"
    # at boot it runs again; bootout ends it (its child too) before it returns
    c.reboot("m1")
    assert wait(lambda: len(starts()) == 3 and job()[1].get("state") == "running"), (starts(), job())
    group = int(starts()[-1][1])
    sh(c, "m1", ["launchctl", "bootout", "system/org.example.job"], sudo=True)
    assert job()[0] == 113
    assert "term" in (home / "job.log").read_text()
    left = c.exec("m1", ["ps", "-ww", "-eo", "pgid=,args="]).stdout.splitlines()
    assert not [ln for ln in left if ln.split()[0] == str(group)], left  # the whole group is gone
    c.reset()


@pytest.mark.sim
def test_mlx_distributed_config_and_launch_ring4(sim_cluster, tmp_path):
    c = sim_cluster("ring4")
    try:
        hostfile_path = tmp_path / "ring4.json"
        hostfile = distributed_config(c, hostfile_path)
        assert hostfile["backend"] == "ring"  # no RDMA on ring4: TCP ring over Thunderbolt
        assert all(h["ips"] and h["ips"][0].startswith("192.168.") for h in hostfile["hosts"])
        assert_cables_ping_both_ways(c)

        script = (
            "import socket\nimport mlx.core as mx\n"
            "g = mx.distributed.init(strict=True, backend='ring')\n"
            "y = mx.distributed.all_sum(mx.ones(3) * (g.rank() + 1))\n"
            "mx.eval(y)\n"
            "print(f'RESULT {g.rank()} {g.size()} {socket.gethostname()} {y.tolist()}', flush=True)\n"
        )
        for h in c.hosts:  # copied to every Mac, as a user would
            (c.home(h) / "allsum.py").write_text(script)
        argv = [
            str(VENV_BIN / "mlx.launch"),
            "--backend",
            "ring",
            "--hostfile",
            str(hostfile_path),
            "--python",
            sys.executable,
            "--cwd",
            "/srv/admin",
            "--",
            "allsum.py",
        ]
        r = subprocess.run(
            argv,
            env=c.harness_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
            cwd=c.state_dir,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        results = sorted(re.findall(r"RESULT (\d) (\d) (\S+) \[(.*)\]", r.stdout))
        assert [(rank, size, host) for rank, size, host, _ in results] == [
            (str(i), "4", h) for i, h in enumerate(c.hosts)
        ]
        assert all(vals == "10.0, 10.0, 10.0" for *_, vals in results)
        # the ranks talked over the Thunderbolt links: ssh -tt sessions on every Mac
        for h in c.hosts:
            assert "Accepted publickey for admin" in c.sshd_log(h)
    finally:
        c.reset()


# ---------------------------------------------------------------------------------------
# speed of the bigger specs
# ---------------------------------------------------------------------------------------


@pytest.mark.sim
@pytest.mark.parametrize("name", ["mesh8", "ring16"])
def test_big_specs_come_up_fast(name, tmp_path):
    cluster = SimCluster(name, tmp_path / name)
    t0 = time.monotonic()
    cluster.up()
    up_s = time.monotonic() - t0
    try:
        results = {}

        def probe(h):
            results[h] = cluster.ssh(h, "hostname").stdout.strip()

        threads = [threading.Thread(target=probe, args=(h,)) for h in cluster.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert results == {h: h for h in cluster.hosts}
        lines = cluster.exec("m2", ["ifconfig", "-l"]).stdout.split()
        assert lines[:2] == ["lo0", "en0"] and lines[-1] == "bridge0"
    finally:
        t1 = time.monotonic()
        assert cluster.down() == []
        down_s = time.monotonic() - t1
    print(f"{name}: up {up_s:.2f}s down {down_s:.2f}s")
