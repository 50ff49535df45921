"""site.yml end to end: real ansible-playbook over real SSH against the simulated Macs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.runner import ROOT, is_mutating, run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

SEND = "Send along the cables, every copy at once, each file verified as it arrives: the model"


def artifacts(cluster):
    return cluster.inventory_path.parent / "artifacts"


def load_plan(cluster):
    return json.loads((artifacts(cluster) / "plan.json").read_text())


def ping(cluster, host, src, dst):
    """Linux ping inside the simulated Mac, bound to the cable's own address."""
    return cluster.exec(host, ["/usr/bin/ping", "-c", "1", "-W", "2", "-I", src, dst], timeout=10).returncode == 0


def mutations(cluster):
    return {h: [a for a in cluster.argv_log(h) if is_mutating(a)] for h in cluster.hosts}


@pytest.mark.parametrize("spec", ["mesh4", "ring4", "mesh4_double", "mesh3_dock"])
def test_check_then_converge_then_nothing_changes(sim_cluster, spec, tmp_path):
    cluster = sim_cluster(spec)
    cluster.reset()
    # a fresh cluster has no artifacts: reset() keeps the controller's, and another test's run on
    # this cluster would have rendered the picture this first run is checked for
    shutil.rmtree(artifacts(cluster), ignore_errors=True)
    cluster.clear_argv_logs()

    # --check --diff on a fresh cluster: reports what it would change, changes nothing.
    dry = run_site(cluster, check=True, diff=True)
    assert dry.rc == 0, dry.failures()
    assert dry.changed() > 0
    assert mutations(cluster) == {h: [] for h in cluster.hosts}
    would = [
        r
        for r in dry.results("Apply this Mac's Thunderbolt links (bridge, services, addresses, host routes)")
        if r.get("res", {}).get("changed")
    ]
    assert {r["host"] for r in would} == set(cluster.hosts)

    # First run converges; every cable answers both ways over its own /30.
    first = run_site(cluster)
    assert first.rc == 0, first.failures()
    plan = load_plan(cluster)
    cables = plan["ip_plan"]["cables"]
    assert len(cables) == len(cluster.spec.cables)
    for cable in cables.values():
        a, b = cable["a"], cable["b"]
        assert ping(cluster, a["host"], a["address"], b["address"]), cable
        assert ping(cluster, b["host"], b["address"], a["address"]), cable
    # the Thunderbolt Bridge's service is off on every Mac, found by its device (bridge0), not by
    # its name, which is the Mac's language's (mesh3_dock's m3: "Thunderbolt-Brücke")
    for host in cluster.hosts:
        order = cluster.exec(host, ["networksetup", "-listnetworkserviceorder"], check=True).stdout
        (bridge,) = re.findall(r"^\(\*\) (.+)\n\(Hardware Port: .+, Device: bridge0\)$", order, re.M) or [order]
        language = cluster.spec.host(host).language
        assert bridge == {"en": "Thunderbolt Bridge", "de": "Thunderbolt-Brücke", "zh": "雷雳网桥"}[language], (
            host,
            order,
        )
    hostfile = json.loads((artifacts(cluster) / "hostfile.json").read_text())
    assert hostfile["backend"] == plan["topology"]["backend"]
    for host in cluster.hosts:  # the same hostfile at the same path on every Mac
        remote = Path(plan["remote_dir"]) / "hostfile.json"
        got = cluster.exec(host, ["cat", str(remote)]).stdout
        assert json.loads(got) == hostfile, host
    # the topology picture, rendered once the DOT file was written (Graphviz on the controller)
    [picture] = [r["res"] for r in first.results("Render the topology picture")]
    if shutil.which("dot"):
        assert picture["changed"] and picture["rendered"], picture
        assert (artifacts(cluster) / "topology.svg").read_text().lstrip().startswith("<?xml")
    else:
        assert not picture["changed"] and "no Graphviz" in picture["msg"], picture

    # Second run: nothing to do. Discovery found every Mac's links in place and answering
    # its pings, so the network stage ran no module on any Mac.
    cluster.clear_argv_logs()
    second = run_site(cluster)
    assert second.rc == 0, second.failures()
    assert second.changed() == 0, second.stats
    assert second.results("Apply this Mac's Thunderbolt links (bridge, services, addresses, host routes)") == []
    assert second.results("Write the hostfile at the same path on every Mac") == []  # already right
    assert second.results("Write the hostfile, the plan and the topology (DOT) on the controller") == []
    assert second.results("Render the topology picture") == []  # a handler of the files above
    # each cable pinged once, from the end with the /30's first address (the planner gives
    # new cables' first addresses to their first end)
    pinged = [(h, a[-2], a[-1]) for h in cluster.hosts for a in cluster.argv_log(h) if a[0] == "ping"]
    assert sorted(pinged) == sorted((c["a"]["host"], c["a"]["address"], c["b"]["address"]) for c in cables.values())
    if spec == "mesh4_double":
        model_over_both_cables(cluster, plan, tmp_path)


def rx_bytes(cluster, host):
    """{interface: bytes received} in the simulated Mac's network namespace (test-side check)."""
    out = cluster.exec(host, ["cat", "/proc/net/dev"], check=True).stdout
    return {
        line.split(":", 1)[0].strip(): int(line.split(":", 1)[1].split()[0]) for line in out.splitlines() if ":" in line
    }


def model_over_both_cables(cluster, plan, tmp_path):
    """Two cables between m1 and m2: m2's copy of the model from rank 0 (the copy without ssh)
    goes over both, as m2's interfaces on them count it, and a re-run changes nothing."""
    tiny = make_tiny_model(tmp_path / "tiny", layers=4, shards=4)
    source = cluster.home("m1") / "mlx-cluster" / "models" / "tiny"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(tiny, source)
    both = [c for c in plan["ip_plan"]["cables"].values() if {c["a"]["host"], c["b"]["host"]} == {"m1", "m2"}]
    ends = {
        (c["a"] if c["a"]["host"] == "m2" else c["b"])["address"]: (c["a"] if c["a"]["host"] == "m2" else c["b"])
        for c in both
    }
    assert len(ends) == 2
    extravars = {
        "mlx_cluster_backend": "ring",
        "model_sync_name": "tiny",
        "model_sync_tree_from": "rank0",
        "model_sync_source_path": "",
        "model_sync_streams": 1,
    }
    before = rx_bytes(cluster, "m2")
    run = run_site(cluster, tags=["models"], extravars=extravars)
    assert run.rc == 0, run.failures()
    after = rx_bytes(cluster, "m2")
    [sent] = [r["res"] for r in run.results(SEND) if r["host"] == "m2"]
    assert sent["fell_back"] == [] and sorted(c["address"] for c in sent["cables"]) == sorted(ends)
    for c in sent["cables"]:
        iface = ends[c["address"]]["iface"]
        assert c["bytes"] > 0 and c["cable"].endswith("m2:" + iface), sent["cables"]
        assert after[iface] - before[iface] >= c["bytes"], (iface, before, after, sent["cables"])
    # the run's record (the metrics' source) keeps what each cable carried to m2
    record = json.loads((artifacts(cluster) / "model_sync.json").read_text())
    assert sorted((w["cable"], w["bytes"]) for w in record["macs"]["m2"]["cables"]) == sorted(
        (c["cable"], c["bytes"]) for c in sent["cables"]
    )
    assert (
        sum(c["bytes"] for c in sent["cables"])
        == sent["bytes"]
        == sum(f.stat().st_size for f in tiny.rglob("*") if f.is_file())
    )
    for f in tiny.rglob("*"):
        if f.is_file():
            rel = f.relative_to(tiny)
            assert (cluster.home("m2") / "mlx-cluster" / "models" / "tiny" / rel).read_bytes() == f.read_bytes()
    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0 and again.changed() == 0, (again.failures(), again.stats)
    shutil.rmtree(source, ignore_errors=True)


def test_rdma_check_names_the_host_with_rdma_off_and_changes_nothing(sim_cluster):
    cluster = sim_cluster("mesh4")
    cluster.reset()
    cluster.set_host("m3", rdma=False)
    # every run keeps the artifacts private, one the preflight stops too: a directory made before
    # the toolkit (0755) and a file copied in (0644) lose group and other access
    folder = artifacts(cluster)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    copied = folder / "copied-in.txt"
    copied.write_text("mine\n")
    copied.chmod(0o644)
    try:
        cluster.clear_argv_logs()
        run = run_site(cluster, tags=["rdma_check"], extravars={"mlx_cluster_rdma_required": True})
        assert run.rc != 0
        msgs = "\n".join(m for _, _, m in run.failures())
        assert "m3" in msgs and "rdma_ctl enable" in msgs, msgs
        assert mutations(cluster) == {h: [] for h in cluster.hosts}
        assert run.changed() == 0
        ran = {e["event_data"].get("task") for e in run.events if e.get("event") == "runner_on_ok"}
        assert not any("Thunderbolt links" in (t or "") for t in ran)
        # the run stopped at preflight, with its findings saved and the report written first
        findings = json.loads((artifacts(cluster) / "preflight.json").read_text())
        assert any(p["host"] == "m3" and p["severity"] == "error" and p["check"] == "rdma" for p in findings)
        page = (artifacts(cluster) / "report.html").read_text()
        assert "RDMA is disabled on m3" in page and "rdma_ctl enable" in page
        assert (oct(folder.stat().st_mode & 0o777), oct(copied.stat().st_mode & 0o777)) == ("0o700", "0o600")
        [written] = [r["res"] for r in run.results("Write the cluster report (artifacts/report.html)")]
        assert [(m["mode"], m["set"]) for m in written["modes"] if Path(m["path"]).resolve() == folder.resolve()] == [
            ("0755", "0700")
        ], written["modes"]
    finally:
        cluster.set_host("m3", rdma=True)
        copied.unlink(missing_ok=True)


def iface_bytes(cluster, host):
    out = cluster.exec(host, ["ip", "-j", "-s", "link"]).stdout
    return {
        i["ifname"]: i["stats64"]["tx"]["bytes"] + i["stats64"]["rx"]["bytes"]
        for i in json.loads(out)
        if i["ifname"].startswith("en") and i["ifname"] != "en0"
    }


def test_ring_hostfile_runs_all_sum_over_the_cables(sim_cluster):
    cluster = sim_cluster("ring4")
    cluster.reset()
    run = run_site(cluster, extravars={"mlx_cluster_backend": "ring"})
    assert run.rc == 0, run.failures()
    hostfile = artifacts(cluster) / "hostfile.json"
    assert json.loads(hostfile.read_text())["backend"] == "ring"
    before = {h: iface_bytes(cluster, h) for h in cluster.hosts}
    res = subprocess.run(
        [
            str(Path(sys.executable).parent / "mlx.launch"),
            "--backend",
            "ring",
            "--hostfile",
            str(hostfile),
            "--python",
            sys.executable,
            "--",
            str(ROOT / "tests" / "e2e" / "allsum.py"),
        ],
        env=cluster.harness_env(),
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]
    out = json.loads(line)
    assert out == {"world_size": 4, "ok": True, "value": 10.0, "host": out["host"]}
    after = {h: iface_bytes(cluster, h) for h in cluster.hosts}
    for h in cluster.hosts:  # traffic crossed the Thunderbolt cables of every Mac
        assert sum(after[h].values()) - sum(before[h].values()) > 4096, (h, before[h], after[h])
