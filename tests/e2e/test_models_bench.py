"""Issue 4 on the simulated cluster: python env, model sync and the distributed benchmark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.benchutil import (
    BENCH,
    INIT_TIMEOUT,
    PROMPT,
    TOKENS,
    bench_procs,
    fresh_models,
    launch_bench,
    leftovers,
    model_files,
    settings,
)
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


@pytest.fixture(scope="module")
def single_run(tiny):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    res = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--model",
            str(tiny),
            "--prompt",
            PROMPT,
            "--max-tokens",
            str(TOKENS),
            "--expect-world",
            "1",
            "--num-trials",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_model_sync_and_benchmark_on_two_macs(sim_cluster, tiny, single_run):
    cluster = sim_cluster("pair")
    cluster.reset()
    shutil.rmtree(cluster.inventory_path.parent / "artifacts" / "bench", ignore_errors=True)  # other tests' runs
    for h in cluster.hosts:  # another test's model left on a Mac (reset() keeps the Macs' files)
        shutil.rmtree(cluster.home(h) / "mlx-cluster" / "models", ignore_errors=True)
    run = run_site(cluster, extravars=settings(cluster, tiny))
    assert run.rc == 0, run.failures()

    # The model reached every Mac's private home, identical to the source.
    src = model_files(tiny)
    assert src and not any(rel.startswith(".") for rel in src), sorted(src)
    for h in cluster.hosts:
        assert model_files(cluster.home(h) / "mlx-cluster" / "models" / "tiny") == src, h

    # Two runs (tensor, pipeline) over 2 ranks; greedy fp32 tokens equal the single process.
    bench = cluster.inventory_path.parent / "artifacts" / "bench"
    results = [json.loads(p.read_text()) for p in sorted(bench.glob("*.json"))]
    assert sorted(r["mode"] for r in results) == ["pipeline", "tensor"]
    for r in results:
        assert r["world_size"] == 2 and r["backend"] == "ring"
        assert r["tokens"] == single_run["tokens"], r["mode"]
        assert r["generation_tokens"] == TOKENS
    assert (bench / "results.md").exists()

    # What the copies moved, for the metrics: each Mac lacked the whole model and got it (from
    # the controller over the LAN, or over its cable); the report's metrics.prom shows it.
    artifacts = cluster.inventory_path.parent / "artifacts"
    record = json.loads((artifacts / "model_sync.json").read_text())
    assert record["model"] == "tiny" and record["model_bytes"] == sum(len(b) for b in src.values()), record
    assert record["seconds"] > 0 and set(record["macs"]) == set(cluster.hosts), record
    assert all(m["bytes"] == record["model_bytes"] for m in record["macs"].values()), record
    assert record["copied_bytes"] == len(cluster.hosts) * record["model_bytes"], record
    prom = (artifacts / "metrics.prom").read_text()
    for h, m in record["macs"].items():
        line = f'mlx_cluster_model_sync_copied_bytes{{host="{h}",model="tiny",via="{m["via"]}"}} {m["bytes"]:.1f}'
        assert line in prom, prom

    # A second run copies nothing, and leaves the record of the last copy as it is.
    again = run_site(cluster, tags=["models"], extravars=settings(cluster, tiny))
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    assert json.loads((artifacts / "model_sync.json").read_text()) == record


def test_corrupted_weight_file_on_one_mac_is_named(sim_cluster, tiny):
    """A weight file changed in place on m2, its size and time kept. By default (sizes, and the
    cables' record of what they verified) it is not seen: the docs say so; with
    model_sync_verify_sha256 (the opt-in) every weight is read again and m2's file is named;
    model_sync_checksum (the fix named) copies it again."""
    cluster = sim_cluster("pair")
    run = run_site(cluster, tags=["network", "models"], extravars=settings(cluster, tiny))
    assert run.rc == 0, run.failures()
    shard = sorted((cluster.home("m2") / "mlx-cluster" / "models" / "tiny").glob("*.safetensors"))[0]
    st = shard.stat()
    original = shard.read_bytes()
    data = bytearray(original)
    data[-10] ^= 0xFF  # same size, same mtime: rsync's quick check does not see it
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        unseen = run_site(cluster, tags=["models"], extravars=settings(cluster, tiny))
        assert unseen.rc == 0 and unseen.changed() == 0, (unseen.failures(), unseen.stats)  # as documented
        bad = run_site(cluster, tags=["models"], extravars=settings(cluster, tiny, model_sync_verify_sha256=True))
        assert bad.rc != 0
        msgs = "\n".join(m for _, _, m in bad.failures())
        assert "m2" in msgs and shard.name in msgs, msgs
        # The fix the message names repairs it.
        fixed = run_site(cluster, tags=["models"], extravars=settings(cluster, tiny, model_sync_checksum=True))
        assert fixed.rc == 0, fixed.failures()
        assert shard.read_bytes() == original
    finally:
        shard.write_bytes(original)


def test_backends_side_by_side_then_a_rank_that_cannot_start_fails_in_time(sim_cluster, tiny):
    """#32: the same benchmark on the ring over the cable and the ring over the LAN, two rounds
    (the order reversed in the second), compared in results.md, after a dry run that only shows
    the LAN ring's hostfile; then m2 unreachable."""
    cluster = sim_cluster("pair")
    bench = cluster.inventory_path.parent / "artifacts" / "bench"
    shutil.rmtree(bench, ignore_errors=True)  # other tests' runs
    compare = {"benchmark_modes": ["tensor"], "benchmark_backends": ["ring", "ring-lan"], "benchmark_rounds": 2}
    lan_hostfile = bench.parent / "hostfile-ring-lan.json"
    # as on a cluster never configured: no hostfile yet (the dry run shows it, the launch cannot read it)
    for hostfile in (lan_hostfile, bench.parent / "hostfile.json"):
        hostfile.unlink(missing_ok=True)
    # --check --diff first: the other backend's hostfile is shown, not written, and nothing runs
    dry = run_site(cluster, check=True, diff=True, extravars=settings(cluster, tiny, **compare))
    assert dry.rc == 0, dry.failures()
    [shown] = dry.results("Write the hostfiles of the other backends compared on the controller")
    assert shown["res"].get("changed") is True and "hostfile-ring-lan.json" in json.dumps(shown["res"]), shown
    assert not lan_hostfile.exists() and not bench.exists()
    ok = run_site(cluster, extravars=settings(cluster, tiny, **compare))
    assert ok.rc == 0, ok.failures()
    lan = json.loads(lan_hostfile.read_text())
    assert lan["hosts"] == [{"ssh": h, "ips": [cluster.mgmt_address(h)], "rdma": []} for h in cluster.hosts], lan
    runs = {p.name.split("-", 1)[1]: json.loads(p.read_text()) for p in bench.glob("*.json")}
    names = ["ring-w2-tensor-r1.json", "ring-lan-w2-tensor-r1.json", "ring-lan-w2-tensor-r2.json"]
    assert sorted(runs) == sorted(names + ["ring-w2-tensor-r2.json", "side-by-side.json"]), sorted(runs)
    assert [runs[n]["compared_as"] for n in names] == ["ring", "ring-lan", "ring-lan"]
    assert {runs[n]["over"] for n in names[1:]} == {"lan"} and runs[names[0]]["over"] == "thunderbolt"
    # the same greedy tokens whatever the wire
    assert len({r["tokens_sha256"] for n, r in runs.items() if n != "side-by-side.json"}) == 1, runs
    side = runs["side-by-side.json"]
    assert (side["reference"], side["rounds"]) == ("ring", 2)
    ring, over_lan = side["modes"]["tensor"]
    assert (ring["name"], ring["generation_ratio"], over_lan["name"], over_lan["runs"]) == ("ring", 1.0, "ring-lan", 2)
    assert over_lan["generation_ratio"] > 0 and over_lan["prompt_ratio"] > 0, side
    assert "## Backends side by side" in (bench / "results.md").read_text()
    cluster.stop_sshd("m2")
    try:
        # The playbook stops at once, naming the Mac it cannot reach.
        start = time.monotonic()
        run = run_site(cluster, tags=["benchmark"], extravars=settings(cluster, tiny))
        assert run.rc != 0 and time.monotonic() - start < 120
        assert any(h == "m2" for h, _, _ in run.failures()), run.failures()
        # The launch step itself refuses before starting anything, naming rank 1 / m2.
        start = time.monotonic()
        res = launch_bench(cluster, "/srv/admin/mlx-cluster/models/tiny")
        assert res.returncode != 0 and time.monotonic() - start < 60
        assert "not started: rank 1: ssh from the controller to m2" in res.stdout, res.stdout[-2000:]
        assert "Nothing listens for ssh on m2" in res.stdout and "Remote Login" in res.stdout
        assert bench_procs(cluster, "m1") == []
    finally:
        cluster.start_sshd("m2")
    assert bench_procs(cluster, "m2") == []


def test_rank_whose_script_is_missing_ends_within_the_timeout_and_leaves_nothing(sim_cluster, tiny):
    # (A rank killed in the middle of a run: tests/e2e/test_faults_runtime.py.)
    cluster = sim_cluster("pair")
    # its own venv, model and bench script in place (cables need addressing after a reset())
    ok = run_site(
        cluster,
        tags=["network", "hostfile", "env", "models", "benchmark"],
        extravars=settings(cluster, tiny, benchmark_modes=["tensor"]),
    )
    assert ok.rc == 0, ok.failures()
    # m2 has no bench script: rank 1 cannot start it and exits at once, so rank 0 never gets
    # its peer: the launcher stops the group (the bench's bounded init and the launcher
    # timeout are the backstops); either way the run ends and no bench process stays behind.
    # The launcher ends rank 0 by closing its SSH session: the SIGHUP that follows is
    # asynchronous, and a rank 0 whose session closes while sshd is still starting it may get
    # none: it ends at its own init bound. (The stage's cleanup, by run id, ends it at once:
    # tests/e2e/test_faults_runtime.py.)
    cluster.exec("m2", ["mv", "/srv/admin/mlx-cluster/bench/mlx_cluster_bench.py", "/srv/admin/bench.moved"])
    try:
        start = time.monotonic()
        res = launch_bench(cluster, "/srv/admin/mlx-cluster/models/tiny", timeout=45)
        assert res.returncode != 0 and time.monotonic() - start < 110
        assert "m2" in res.stdout, res.stdout[-2000:]
    finally:
        cluster.exec("m2", ["mv", "/srv/admin/bench.moved", "/srv/admin/mlx-cluster/bench/mlx_cluster_bench.py"])
    assert leftovers(cluster, grace=INIT_TIMEOUT + 10) == {h: [] for h in cluster.hosts}


def test_rank0_pushes_the_model_node_to_node_over_thunderbolt(sim_cluster, tiny):
    cluster = sim_cluster("pair")
    fresh_models(cluster, tiny)
    run = run_site(
        cluster,
        tags=["network", "hostfile", "models"],
        extravars=settings(cluster, tiny, model_sync_source="rank0", model_sync_source_path=""),
    )
    assert run.rc == 0, run.failures()
    got = cluster.home("m2") / "mlx-cluster" / "models" / "tiny"
    assert model_files(got) == model_files(tiny)
    plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
    m1_cable_addr = plan["ip_plan"]["hosts"]["m1"][0]["address"]
    # m2's sshd saw rank 0 arrive from its Thunderbolt address, not the LAN.
    assert f"from {m1_cable_addr} " in cluster.sshd_log("m2")
    # ...with the trust the toolkit made on the Macs (reset() left only the controller's key):
    # m1's cluster key in a marked block of m2's authorized_keys, m2's own host key in m1's file
    m1_ssh, m2_ssh = cluster.home("m1") / ".ssh", cluster.home("m2") / ".ssh"
    controller_key = Path(f"{cluster.key_path}.pub").read_text().strip()
    cluster_key = (m1_ssh / "mlx_cluster_ed25519.pub").read_text().split()[:2]
    authorized = (m2_ssh / "authorized_keys").read_text()
    assert controller_key in authorized and " ".join(cluster_key) in authorized
    assert "# BEGIN mlx-cluster" in authorized and "# END mlx-cluster" in authorized
    m2_host_key = (cluster.host_dir("m2") / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    known = [
        ln.split()
        for ln in (m1_ssh / "mlx_cluster_known_hosts").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert [k[1:3] for k in known] == [m2_host_key]
    assert {"m2", cluster.mgmt_address("m2"), plan["ip_plan"]["hosts"]["m1"][0]["peer_address"]} <= set(
        known[0][0].split(",")
    )
    # the cluster key only copies: from m1's own addresses, rsync's receiving end into the model
    (line,) = [ln for ln in authorized.splitlines() if " ".join(cluster_key) in ln]
    assert line.startswith('restrict,from="') and "mlx_cluster_receive_only /srv/admin/mlx-cluster/models/tiny" in line
    home = cluster.session_home("m1")
    shell = cluster.exec(
        "m1",
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            f"{home}/.ssh/mlx_cluster_ed25519",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={home}/.ssh/mlx_cluster_known_hosts",
            "-o",
            "BatchMode=yes",
            "-l",
            cluster.user,
            plan["ip_plan"]["hosts"]["m1"][0]["peer_address"],
            "id",
        ],
    )
    assert shell.returncode == 126 and "only lets rsync receive into" in shell.stderr, (shell.returncode, shell.stderr)
    # a second run changes nothing; the trust can be removed, the user's own key stays
    again = run_site(
        cluster,
        tags=["models"],
        extravars=settings(cluster, tiny, model_sync_source="rank0", model_sync_source_path=""),
    )
    assert again.rc == 0 and again.changed() == 0, (again.failures(), again.stats)
    gone = run_site(cluster, tags=["ssh_trust_remove"])
    assert gone.rc == 0, gone.failures()
    assert (m2_ssh / "authorized_keys").read_text().strip() == controller_key
    assert sorted(p.name for p in m1_ssh.iterdir()) == ["authorized_keys"]
    assert sorted(p.name for p in m2_ssh.iterdir()) == ["authorized_keys"]  # the forced command too


def test_a_model_too_big_for_one_macs_gpu_stops_before_the_copy_naming_the_mac(sim_cluster, tmp_path):
    """iogpu.wired_limit_mb set low on m2: the model's share (~5 MB per rank, either mode) is
    more than m2's GPU may wire. The run stops before anything is copied, naming m2, the numbers
    and the fix; with the limit back to macOS's default (as the env stage reads it through the
    venv's MLX) the same run copies."""
    wide = make_tiny_model(
        tmp_path / "wide", dtype="float32", hidden_size=512, heads=4, kv_heads=2, intermediate_size=512
    )
    cluster = sim_cluster("pair")
    cluster.reset()
    cluster.set_host("m2", wired_limit_mb=4)
    try:
        run = run_site(
            cluster, tags=["network", "env", "models"], extravars=settings(cluster, wide, model_sync_name="wide")
        )
        assert run.rc != 0
        msgs = "\n".join(m for _, _, m in run.failures())
        assert "[ERROR] m2: tensor mode over 2 Mac(s)" in msgs and "[ERROR] m2: pipeline mode" in msgs, msgs
        assert "iogpu.wired_limit_mb=4" in msgs and "add Macs" in msgs and "m1:" not in msgs, msgs
        for h in cluster.hosts:
            assert not (cluster.home(h) / "mlx-cluster" / "models" / "wide").exists(), h
    finally:
        cluster.set_host("m2", wired_limit_mb=0)
    ok = run_site(cluster, tags=["env", "models"], extravars=settings(cluster, wide, model_sync_name="wide"))
    assert ok.rc == 0, ok.failures()
    # the memory check took macOS's default as each Mac's MLX reports it (84 % of 512 GB on the
    # simulated macOS 26), not the estimate
    mem = {h: int(cluster.exec(h, ["sysctl", "-n", "hw.memsize"], check=True).stdout) for h in cluster.hosts}
    read = {
        e["event_data"]["host"]: e["event_data"]["res"]["ansible_facts"]["mlx_cluster"]["hw"]["gpu_working_set_mb"]
        for e in ok.events
        if e.get("event") == "runner_on_ok"
        and e["event_data"].get("task") == "Record the versions, and the GPU limit the Mac reports for the memory check"
    }
    assert read == {h: int(mem[h] * 0.84) >> 20 for h in cluster.hosts}, read
