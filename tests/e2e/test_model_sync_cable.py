"""Issue 27: the tree's Thunderbolt hops without ssh (model_sync_transport: auto, the default).
On a ring of four with the model on rank 0 only, every Mac gets it from the Mac the tree names,
over that Mac's cable: each receiver listened on its cable address only, a relay passed its copy
on while it arrived, no Mac got a cluster key (and a key an earlier run authorized is revoked),
nothing listens afterwards; a second run changes
nothing; --check after a change on rank 0 names that file for every Mac and copies nothing. On
a pair whose cable is pulled mid-copy the copy fails naming both Macs and the cable, and with
the cable back a re-run resumes from what arrived."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import HASHES, PART_SUFFIX
from ansible_collections.mlx.cluster.plugins.plugin_utils import sync_plan
from bench.model_sync import tc
from tests.e2e.benchutil import REMOTE_MODEL, controller_model, fresh_models, settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SEND = "Send along the cables, every copy at once, each file verified as it arrives: the model"
START = "Start the receivers on the Macs that get it over a cable: the model"
COMPARE = "Compare every Mac's copy with the source"
MARK = "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"
OLD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOldClusterKeyFromAnEarlierRunxxxxxxxxxxxxxx mlx-cluster m2"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def ok_results(run, task):
    return {e["host"]: e["res"] for e in run.results(task) if not e["res"].get("skipped")}


def listening(cluster, host):
    """The TCP ports listening on the simulated Mac (test-side check)."""
    out = cluster.exec(host, ["ss", "-Hltn"]).stdout
    return sorted({int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()})


def file_names(path):
    """Every file below path (the copy's own record included), relative, sorted."""
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


def test_tree_over_the_cables_without_ssh(sim_cluster, tiny):
    cluster = sim_cluster("ring4")
    seeded = fresh_models(cluster, tiny)
    before = {h: listening(cluster, h) for h in cluster.hosts}
    # m3 still trusts a cluster key from an earlier tree over rsync: no copy needs it any more
    authorized = cluster.home("m3") / ".ssh" / "authorized_keys"
    authorized.write_text(
        authorized.read_text() + f"{MARK.format(mark='BEGIN')}\n{OLD_KEY}\n{MARK.format(mark='END')}\n"
    )
    # the default path: sizes compared after the copy (each file's sha256 checked as it arrived)
    extravars = settings(
        cluster,
        tiny,
        model_sync_source="tree",
        model_sync_tree_from="rank0",
        model_sync_source_path="",
        model_sync_verify_sha256=False,
    )
    files = file_names(tiny)

    first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    assert first.rc == 0, first.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    rounds = sync_plan.plan_rounds(plan, source="m1")
    started = ok_results(first, START)
    sent = ok_results(first, SEND)
    assert sorted(started) == sorted(sent) == ["m2", "m3", "m4"]
    total = sum((tiny / f).stat().st_size for f in files)
    for host in ("m2", "m3", "m4"):
        planned = rounds["copies"][host]
        args = sent[host]["invocation"]["module_args"]
        # the receiver listened on this Mac's end of the cable from its sender, nothing else
        assert started[host]["port"] and started[host]["invocation"]["module_args"]["addresses"] == [planned["address"]]
        assert args["address"] == planned["address"] and args["source_name"] == planned["src"]
        assert args["token"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"  # the token is in no result
        assert sent[host]["bytes"] == total and sent[host]["changed"], (host, sent[host])
        # a relay passes on its own copy as it arrives
        assert args["follow"] is (planned["src"] != "m1"), host
        dest = cluster.home(host) / "mlx-cluster" / "models" / "tiny"
        assert file_names(dest) == sorted(files + [HASHES]), host
        assert not list(dest.rglob("*" + PART_SUFFIX)), host
        for f in files:
            assert (dest / f).read_bytes() == (tiny / f).read_bytes(), (host, f)
    assert rounds["copies"]["m3"]["round"] == 2
    assert OLD_KEY not in authorized.read_text()  # revoked
    for h in cluster.hosts:
        # no cluster key: no hop went over ssh between the Macs
        assert not (cluster.home(h) / ".ssh" / "mlx_cluster_ed25519").exists(), h
        # and nothing listens after the stage
        assert listening(cluster, h) == before[h], h

    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    assert ok_results(again, SEND) == {}  # every receiver had its model: none started

    # m3 lost a file and holds a stale shard: its receiver brings the file back, and its listing
    # when collected (not a second module run) names the shard
    m3 = cluster.home("m3") / "mlx-cluster" / "models" / "tiny"
    lost = next(f for f in files if f != "config.json")
    (m3 / lost).unlink()
    (m3 / "stale.safetensors").write_bytes(b"an older model's shard")
    stale = run_site(cluster, tags=["models"], extravars=extravars)
    assert stale.rc != 0
    assert "m3: stale.safetensors is a weight file the source does not have" in str(stale.failures()), stale.failures()
    assert sorted(ok_results(stale, SEND)) == ["m3"]
    assert "m3" not in ok_results(stale, COMPARE)  # compared by its receiver
    assert (m3 / lost).read_bytes() == (tiny / lost).read_bytes()
    (m3 / "stale.safetensors").unlink()

    config = seeded / "config.json"
    config.write_text(config.read_text() + "\n")  # one byte more, on rank 0 only
    check = run_site(cluster, tags=["models"], extravars=extravars, check=True)
    assert check.rc == 0, check.failures()
    assert ok_results(check, SEND) == {} and ok_results(check, START) == {}
    listed = ok_results(check, COMPARE)
    for h in ("m2", "m3", "m4"):
        assert [p["file"] for p in listed[h]["problems"]] == ["config.json"], (h, listed[h]["problems"])
        dest = cluster.home(h) / "mlx-cluster" / "models" / "tiny" / "config.json"
        assert dest.read_bytes() == (tiny / "config.json").read_bytes(), h  # --check copied nothing


RSYNC_TASK = "Copy the model along the cables, every copy at once"


def test_tree_from_the_controller_one_copy_over_the_lan_then_the_cables_without_ssh(sim_cluster, tiny):
    """model_sync_tree_from: controller, the default transport: the controller sends one copy
    over the management network (rsync), to the ring's most central Mac, and the other Macs get
    theirs over the cables without ssh, every sender a relay of its own copy."""
    cluster = sim_cluster("ring4")
    model = controller_model(cluster, tiny)
    extravars = settings(
        cluster, model, model_sync_source="tree", model_sync_tree_from="controller", model_sync_verify_sha256=False
    )
    run = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    assert run.rc == 0, run.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    rounds = sync_plan.plan_rounds(plan, source=None)
    assert rounds["lan"] == ["m1"]
    assert sorted(ok_results(run, RSYNC_TASK)) == ["m1"]  # one copy over the LAN
    sent = ok_results(run, SEND)
    assert sorted(sent) == ["m2", "m3", "m4"]
    for host, res in sent.items():
        args = res["invocation"]["module_args"]
        assert args["follow"] is True and args["source_name"] == rounds["copies"][host]["src"], (host, args)
        dest = cluster.home(host) / "mlx-cluster" / "models" / "tiny"
        for f in file_names(tiny):
            assert (dest / f).read_bytes() == (tiny / f).read_bytes(), (host, f)
    # the source directory on the controller is the user's: its record is kept with the artifacts
    assert file_names(model) == file_names(tiny)
    record = (
        cluster.inventory_path.parent
        / "artifacts"
        / "model-hashes"
        / f"{hashlib.sha1(str(model).encode()).hexdigest()}.json"
    )
    assert sorted(json.loads(record.read_text())["files"]) == file_names(tiny)
    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0 and again.changed() == 0, (again.failures(), again.stats)


PAD = "pad.dat"  # not a weight file: no header read
PAD_BYTES = 6 * 1000 * 1000
SHAPED_MBIT = 8  # about a megabyte a second on the cable: six seconds for the pad


def test_a_pulled_cable_is_named_and_the_copy_resumes(sim_cluster, tiny):
    cluster = sim_cluster("pair")
    seeded = fresh_models(cluster, tiny)
    (seeded / PAD).write_bytes(os.urandom(PAD_BYTES))
    extravars = settings(
        cluster,
        tiny,
        model_sync_source="tree",
        model_sync_tree_from="rank0",
        model_sync_source_path="",
        model_sync_verify_sha256=False,
        model_sync_stall_timeout=5,
        model_sync_streams=1,
    )
    before = listening(cluster, "m2")
    cable = cluster.spec.cables[0]
    shaped = cable.a.iface if cable.a.host == "m1" else cable.b.iface
    tc(cluster.ns("m1"), shaped, SHAPED_MBIT)
    part = cluster.home("m2") / "mlx-cluster" / "models" / "tiny" / ("." + PAD + PART_SUFFIX)

    # the cables addressed and the model copied in one run, as a user's run does
    out = {}
    tags = ["network", "hostfile", "models"]
    runner = threading.Thread(target=lambda: out.update(run=run_site(cluster, tags=tags, extravars=extravars)))
    runner.start()
    deadline = time.monotonic() + 120
    while (
        time.monotonic() < deadline
        and runner.is_alive()
        and not (part.exists() and part.stat().st_size > PAD_BYTES // 4)
    ):
        time.sleep(0.2)
    assert part.exists(), ("the pad never started to arrive", out.get("run") and out["run"].failures())
    cluster.unplug(cable.id)
    runner.join(300)
    try:
        failed = out["run"]
        assert failed.rc != 0
        msgs = " ".join(m for h, t, m in failed.failures() if m)
        assert "copy m1 -> m2 over m1:en" in msgs and "<-> m2:en" in msgs, msgs
        assert "check the cable" in msgs and "run the stage again (it resumes" in msgs, msgs
        kept = part.stat().st_size
        assert 0 < kept < PAD_BYTES
        assert not (part.parent / PAD).exists()  # nothing half-written under the final name
        assert listening(cluster, "m2") == before  # the receiver was ended
    finally:
        cluster.plug(cable.id)
        subprocess.run(["tc", "-n", cluster.ns("m1"), "qdisc", "del", "dev", shaped, "root"], check=False)
    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    res = ok_results(again, SEND)["m2"]
    assert res["files"][PAD]["resumed"] >= kept > 0, res["files"]
    assert res["bytes"] < PAD_BYTES + sum((tiny / f).stat().st_size for f in file_names(tiny))
    assert (part.parent / PAD).read_bytes() == (seeded / PAD).read_bytes()


def test_a_full_disk_is_named_before_anything_is_sent(sim_cluster, tiny):
    """m2's model directory on a disk with no room (a 64 KB tmpfs in m2's own mounts): the
    receiver is not started, the run fails naming m2, the bytes and the fix, and nothing is left
    under a final name there."""
    cluster = sim_cluster("pair")
    fresh_models(cluster, tiny)  # the seed on rank 0 only
    extravars = settings(
        cluster,
        tiny,
        model_sync_source="tree",
        model_sync_tree_from="rank0",
        model_sync_source_path="",
        model_sync_verify_sha256=False,
    )
    models = REMOTE_MODEL.rsplit("/", 1)[0]  # the Macs' models directory, as the Macs see it
    cluster.exec("m2", ["/bin/mkdir", "-p", models], check=True)
    cluster.exec("m2", ["/bin/mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", models], check=True)
    try:
        # the cables addressed and the copy tried in one run, as a user's run does
        run = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
        assert run.rc != 0
        assert {h for h, _, _ in run.failures()} == {"m2"}, run.failures()
        msgs = " ".join(m for h, t, m in run.failures() if m)
        assert "m2: the model needs " in msgs and "free space on that disk" in msgs, msgs
        assert ok_results(run, SEND) == {}  # nothing was sent
        listed = cluster.exec("m2", ["find", models, "-type", "f"]).stdout.split()
        assert not [f for f in listed if f.endswith(".safetensors")], listed
    finally:
        cluster.exec("m2", ["/bin/umount", models])


def module_on(cluster, host, module, args, tmp_path):
    """mlx.cluster.<module> run once on `host` (a playbook of that one task, as run_site runs
    every playbook); -> its result."""
    book = tmp_path / f"{module}-{args['state']}.yml"
    book.write_text(
        json.dumps(
            [
                {
                    "name": module,
                    "hosts": host,
                    "gather_facts": False,
                    "tasks": [{"name": "the module", f"mlx.cluster.{module}": args}],
                }
            ]
        )
    )
    run = run_site(cluster, playbook=str(book), python_env=None)
    (res,) = [r["res"] for r in run.results("the module")]
    return res


STRANGER = """
import json, socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall((json.dumps({"magic": sys.argv[3], "token": "not-the-token-0123456789"}) + "\\n").encode())
print(s.makefile().readline().strip())
"""


def test_a_stranger_without_the_token_is_refused_and_named_and_the_lan_reaches_nothing(sim_cluster, tiny, tmp_path):
    """A receiver started on m2 for its cable from m1: a connection from m1 over the cable
    without the token is refused and named when the receiver is collected; the same port on
    m2's management address has nothing listening (the receiver is bound to its cable only)."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import MAGIC

    cluster = sim_cluster("pair")
    fresh_models(cluster, tiny)
    net = run_site(cluster, tags=["network", "hostfile"], extravars=settings(cluster, tiny))
    assert net.rc == 0, net.failures()
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    (cable,) = plan["ip_plan"]["hosts"]["m2"]
    files = {"config.json": {"size": 10, "sha256": "0" * 64, "mtime": 1764130000}}
    run_id = "mlx-copy-strangertest0123456"
    started = module_on(
        cluster,
        "m2",
        "model_receive",
        {
            "state": "started",
            "path": REMOTE_MODEL,
            "files": files,
            "addresses": [cable["address"]],
            "token": "the-real-token-0123456789abcdef",
            "run_id": run_id,
            "idle_timeout": 8,
            "label": "m2",
        },
        tmp_path,
    )
    assert started.get("port"), started
    try:
        said = cluster.exec("m1", [sys.executable, "-c", STRANGER, cable["address"], str(started["port"]), MAGIC])
        assert "not this copy's token" in said.stdout, (said.stdout, said.stderr)
        lan = cluster.exec(
            "m1", [sys.executable, "-c", STRANGER, cluster.mgmt_address("m2"), str(started["port"]), MAGIC]
        )
        assert lan.returncode != 0 and "Connection refused" in lan.stderr, (lan.stdout, lan.stderr)
    finally:
        # no sender came: the receiver ends by itself (idle), saying who it refused
        done = module_on(
            cluster,
            "m2",
            "model_receive",
            {"state": "finished", "path": REMOTE_MODEL, "run_id": run_id, "wait": 30, "label": "m2"},
            tmp_path,
        )
    assert done["strangers"] == [cable["peer_address"]], done
    assert done["missing"] == ["config.json"] and [p["kind"] for p in done["problems"]] == ["idle"], done
    assert started["port"] not in listening(cluster, "m2")


def test_a_login_shell_that_prints_is_named_with_its_file(sim_cluster, tiny):
    """A Mac whose ~/.zshenv prints (zsh reads it for every command run over ssh): the copy over
    the LAN, rsync over ssh, cannot speak its protocol through it. The failure names the Mac, the
    file and the fix, and once the file is quiet the same run copies."""
    cluster = sim_cluster("pair")
    model = controller_model(cluster, tiny)
    extravars = settings(cluster, model, model_sync_source="tree", model_sync_tree_from="controller")
    plan = run_site(cluster, tags=["network", "hostfile"], extravars=extravars)
    assert plan.rc == 0, plan.failures()
    lan = sync_plan.plan_rounds(
        json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text()), source=None
    )["lan"]
    assert len(lan) == 1, lan
    zshenv = cluster.home(lan[0]) / ".zshenv"
    zshenv.write_text('echo "Welcome to $(hostname)"\n')
    try:
        failed = run_site(cluster, tags=["models"], extravars=extravars)
    finally:
        zshenv.unlink()
    assert failed.rc != 0
    named = [m for h, task, m in failed.failures() if h == lan[0] and task == RSYNC_TASK]
    assert len(named) == 1, failed.failures()
    assert f"the login shell on {lan[0]} prints text for a command run over ssh" in named[0], named
    assert "is your shell clean?" in named[0] and "keep ~/.zshenv silent" in named[0], named
    # the Mac after it in the tree got nothing, and is told why: its copy comes through lan[0]
    (after,) = [m for h, task, m in failed.failures() if h != lan[0]]
    assert f"gets its copy through {lan[0]}, which failed above" in after, after
    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    # A hop between two Macs, rsync over ssh (model_sync_transport: rsync): the client is the
    # sending Mac's openrsync, which has no "shell clean" check of its own (shims/openrsync.py)
    (other,) = [h for h in cluster.hosts if h != lan[0]]
    shutil.rmtree(cluster.home(other) / "mlx-cluster" / "models")
    zshenv = cluster.home(other) / ".zshenv"
    zshenv.write_text("echo 'Last login: Mon Nov 30 09:41:07 on ttys000'\n")
    rsync_hop = {**extravars, "model_sync_transport": "rsync"}
    try:
        failed = run_site(cluster, tags=["models"], extravars=rsync_hop)
    finally:
        zshenv.unlink()
    assert failed.rc != 0
    named = [m for h, task, m in failed.failures() if h == other]
    assert len(named) == 1, failed.failures()
    assert f"what came back from {other} was not rsync's protocol" in named[0], named
    assert "unexpected tag" in named[0] and "keep ~/.zshenv silent" in named[0], named
    assert run_site(cluster, tags=["models"], extravars=rsync_hop).rc == 0
    # A script the toolkit runs (ansible.builtin.script: what the venv holds, its versions)
    # prints after the greeting, not through a module: the env stage reads its last line. The
    # first run makes the venvs where they are missing (another test may have made them), the
    # second finds both in place and installs nothing.
    for h in cluster.hosts:
        (cluster.home(h) / ".zshenv").write_text('echo "Welcome to $(hostname)"\n')
    try:
        made = run_site(cluster, tags=["env"], extravars=extravars)
        again = run_site(cluster, tags=["env"], extravars=extravars)
    finally:
        for h in cluster.hosts:
            (cluster.home(h) / ".zshenv").unlink()
    assert made.rc == 0, made.failures()
    read = made.results("Read what the venv holds already") + made.results("Read the interpreter's versions")
    assert {r["host"] for r in read} == set(cluster.hosts), read
    assert all(r["res"]["stdout"].startswith("Welcome to ") for r in read), read  # the greeting was there
    assert again.rc == 0, again.failures()
    held = again.results("Read what the venv holds already")
    assert all(r["res"]["stdout"].startswith("Welcome to ") for r in held) and len(held) == 2, held
    assert again.results("Read the interpreter's versions") == []  # every venv in place: no install
