"""Faults while a job runs (issue 7): a rank SIGKILLed in the middle of a benchmark run on
the simulated pair. The launch ends long before its timeout, names the rank and its Mac,
leaves no benchmark process on any Mac, and the next launch succeeds.
Adds its row to docs/reliability.md like tests/e2e/test_faults.py (tests/e2e/reliability.py).

The server's counterpart (a rank SIGKILLed while the group serves) is
tests/e2e/test_server.py::test_a_rank_killed_while_serving_takes_the_group_down_and_the_next_start_restores_it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e import reliability
from tests.e2e.benchutil import (
    REMOTE_MODEL,
    REMOTE_SCRIPT,
    launch_bench,
    launch_command,
    leftovers,
    module_result,
    settings,
)
from tests.e2e.runner import ROOT, run_site
from tests.programs import program_path
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

# Long enough that the kill lands well inside generation: over the simulated pair the tiny
# model generates about 155 tokens/s on an idle 2-core runner (about 55/s under load), so
# 3000 tokens are about 19 s of generation at best. Nothing waits for them: the run is killed
# within a second or so of its first tokens.
KILL_TOKENS = 3000
LAUNCH_TIMEOUT = 180  # the module's own bound; the killed run must end long before it
AFTER_KILL_BOUND = 30  # seconds from the kill to the module's end (measured: under 1 s)
RING_MOVING = 32 * 1024  # bytes on the rank's ring sockets that only generation produces


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def rank_pids(cluster, host, run_id):
    """PIDs of the benchmark interpreter of run `run_id` on `host` (test-side, from ps)."""
    out = cluster.exec(host, ["ps", "-ax", "-ww", "-o", "pid=,args="]).stdout
    pids = []
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        argv = args.split()
        if argv[:2] == [sys.executable, REMOTE_SCRIPT] and run_id in argv:
            pids.append(int(pid))
    return pids


def ring_bytes(cluster, host, pid):
    """Bytes sent + received so far on the TCP connections `pid` holds on `host`, SSH's
    excepted: the ring backend's sockets to its peer. None while it holds none."""
    lines = cluster.exec(host, ["ss", "-Htinp"]).stdout.splitlines()
    total = None
    for head, info in zip(lines, lines[1:] + [""]):
        if head[:1].isspace() or f"pid={pid}," not in head:
            continue
        local, peer = head.split()[3:5]
        if local.endswith(":22") or peer.endswith(":22"):
            continue
        total = (total or 0) + sum(int(n) for n in re.findall(r"bytes_(?:sent|received):(\d+)", info))
    return total


def wait_generating(cluster, proc, host, run_id, limit=120):
    """PID of `host`'s rank once the run is generating, polled.

    Mid-run, not mid-start: the ranks log "generating", but that reaches the test only when
    the launch has ended. What the test can see while it runs is the rank's ring traffic
    (`ss` on its Mac): distributed init leaves a few bytes on each ring socket (measured: 8),
    loading the model is local, and generation sends every token's collectives (measured:
    over 100 KiB in the first half second). So: the rank's process exists, its ring sockets
    have carried far more than init ever does, and they are still moving between two polls:
    both ranks are past init and generating, and the group is whole. (A fixed sleep after
    both processes appear would not tell init from generation on a loaded runner.)"""
    deadline = time.monotonic() + limit
    last = (None, None)
    while True:
        assert proc.poll() is None, "the launch ended before the fault:\n" + proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, f"{host}'s rank did not start generating within {limit}s"
        pids = rank_pids(cluster, host, run_id)
        if len(pids) == 1:
            moved = ring_bytes(cluster, host, pids[0])
            if moved is not None and moved >= RING_MOVING and last[0] == pids[0] and moved > last[1]:
                return pids[0]
            last = (pids[0], moved or 0)
        time.sleep(0.2)


def test_rank_killed_mid_benchmark_ends_in_time_names_the_mac_and_leaves_nothing(sim_cluster, tiny):
    cluster = sim_cluster("pair")
    # Everything the launch needs on both Macs: env, model, bench script, hostfile.
    ok = run_site(cluster, extravars=settings(cluster, tiny, benchmark_modes=["tensor"]), python_env="existing")
    assert ok.rc == 0, ok.failures()
    assert cluster.hosts == ["m1", "m2"]  # rank 1 is m2 (hostfile order = inventory order)

    run_id = "e2ekilledmidrun0123456789"
    argv, env = launch_command(cluster, timeout=LAUNCH_TIMEOUT, max_tokens=KILL_TOKENS, run_id=run_id)
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        victim = wait_generating(cluster, proc, "m2", run_id)
        with reliability.Fault("a rank killed mid-benchmark (pair)") as f:
            killed_at = time.monotonic()
            kill = cluster.exec("m2", ["kill", "-9", str(victim)])
            assert kill.returncode == 0, kill.stderr
            out, err = proc.communicate(timeout=LAUNCH_TIMEOUT + 60)
            after_kill = time.monotonic() - killed_at
            total = time.monotonic() - start
            res = module_result(out)
            msg = res.get("msg", "")
            line = next((ln for ln in msg.splitlines() if "rank 1 (m2)" in ln), "")
            f.message(line or msg or out[-300:])
            print(f"kill -> module end {after_kill:.2f}s, launch {total:.1f}s; module message:\n{msg}")

            # Failed, well before its own timeout, naming the rank and the Mac that died.
            assert proc.returncode != 0 and "localhost | FAILED!" in out, out[-3000:]
            assert after_kill < AFTER_KILL_BOUND and total < LAUNCH_TIMEOUT, (after_kill, total)
            assert "timed out" not in msg, msg
            assert line.startswith("mlx_cluster_bench.py failed"), msg
            assert any(r["rank"] == 1 and r["host"] == "m2" for r in res["failed_ranks"]), res["failed_ranks"]
            # Nothing of the run stays behind on either Mac.
            assert leftovers(cluster) == {h: [] for h in cluster.hosts}

            # The next launch needs no repair and runs on both Macs.
            again = launch_bench(cluster, timeout=LAUNCH_TIMEOUT, run_id="e2eafterthekill0123456789")
            result = module_result(again.stdout).get("result") or {}
            f.converged(again.returncode == 0 and result.get("world_size") == 2)
            assert again.returncode == 0, again.stdout[-3000:]
            assert result["world_size"] == 2 and result["hostname"] == ["m1", "m2"], result
            assert leftovers(cluster, grace=0) == {h: [] for h in cluster.hosts}
    finally:
        if proc.poll() is None:  # the test failed before the launch ended: end its ranks (by PID)
            for h in cluster.hosts:
                for pid in rank_pids(cluster, h, run_id):
                    cluster.exec(h, ["kill", "-9", str(pid)])
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def pair_with_hostfile(sim_cluster, tiny):
    """The pair with its cables addressed and its hostfile and plan written (once for the cases
    below), and what a launch
    of the benchmark needs on each Mac put there as the stages would (the script and its
    start-up helper, the model), so that a launch that reaches both Macs runs for real."""
    cluster = sim_cluster("pair")
    cluster.reset()
    ok = run_site(
        cluster, tags=["network", "hostfile"], extravars={"mlx_cluster_backend": "ring"}, python_env="existing"
    )
    assert ok.rc == 0, ok.failures()
    for h in cluster.hosts:
        home = cluster.home(h)
        script = home / Path(REMOTE_SCRIPT).relative_to("/srv/admin")
        script.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(program_path("benchmark", "mlx_cluster_bench.py"), script)
        shutil.copy(program_path("mlx_cluster", "mlx_cluster_startup.py"), script.parent / "mlx_cluster_startup.py")
        model = home / Path(REMOTE_MODEL).relative_to("/srv/admin")
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(tiny, model)
    return cluster


@pytest.mark.parametrize("case", ["name-does-not-resolve", "key-refused", "remote-login-off"])
def test_launch_that_cannot_reach_a_mac_says_why_and_how_to_fix_it(pair_with_hostfile, case):
    """mlx.launch reaches each Mac as the inventory says; when it cannot, the launch does not
    start and the message names the Mac, the cause and that cause's own fix."""
    cluster = pair_with_hostfile
    argv, env = launch_command(cluster, timeout=60)
    args = json.loads(argv[-1])
    target = args["ssh_targets"]["m2"]
    name = {
        "name-does-not-resolve": "a Mac's address that does not resolve",
        "key-refused": "a key the Mac does not accept",
        "remote-login-off": "Remote Login off on a Mac",
    }[case]
    with reliability.Fault(f"mlx.launch cannot reach a Mac: {name}") as f:
        if case == "name-does-not-resolve":
            target["host"] = "studio-2.local"
            # (a .local name: Bonjour's, told as such; another name: "does not resolve", test_mlx_ssh)
            words = ["Bonjour did not find studio-2.local from the controller", "set ansible_host of m2"]
        elif case == "key-refused":
            other = cluster.state_dir / "ssh" / "not_authorized"
            if not other.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
            target["options"] = [
                o if not o.startswith("IdentityFile=") else f"IdentityFile={other}" for o in target["options"]
            ] + ["-o", "IdentitiesOnly=yes"]
            words = ["m2 refused the key", "authorized_keys of admin on m2"]
        else:
            cluster.stop_sshd("m2")
            words = ["Nothing listens for ssh on m2", "Remote Login"]
        try:
            res = subprocess.run(
                argv[:-1] + [json.dumps(args)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
            )
        finally:
            if case == "remote-login-off":
                cluster.start_sshd("m2")
        msg = module_result(res.stdout).get("msg", res.stdout)
        f.message(msg)
        assert res.returncode != 0, res.stdout
        assert msg.startswith("not started: rank 1: ssh from the controller to m2"), msg
        for w in words:
            assert w in msg, (w, msg)
        assert "rank 0" not in msg  # the Mac that answers is not blamed
        # repaired (the inventory's target as it was, sshd back): the same launch runs on both Macs
        again = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        result = module_result(again.stdout).get("result") or {}
        f.converged(
            again.returncode == 0 and result.get("world_size") == 2, again.stdout[-2000:] + again.stderr[-1000:]
        )


def test_a_rank_left_behind_is_ended_by_its_run_id_though_ps_cuts_its_line(sim_cluster, tmp_path):
    """A rank that outlived its launcher (started with nohup, its ssh session gone) is found by
    the run id at the end of its long command line and ended by PID: macOS's ps cuts every line
    at 79 columns when its output is no terminal (the simulated Macs' too), so the cleanup must
    ask for whole lines. Another run's process, whose id is not the run's, is left alone."""
    cluster = sim_cluster("pair")
    run_id, other = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", "ffffeeee-dddd-4ccc-bbbb-aaaa99998888"
    rank = (
        "python3 -c 'import time; time.sleep(600)' /srv/admin/mlx-cluster/benchmark/mlx_cluster_bench.py"
        " --model /srv/admin/mlx-cluster/models/Qwen3-4B-Instruct-2507-4bit --prompt-tokens 512 --run-id {}"
    )
    for rid in (run_id, other):
        started = cluster.ssh("m1", f"nohup {rank.format(rid)} >/dev/null 2>&1 < /dev/null &", timeout=30)
        assert started.returncode == 0, started.stderr

    def pids(rid):
        out = cluster.exec("m1", ["ps", "-ax", "-ww", "-o", "pid=,args="]).stdout
        return [int(ln.split()[0]) for ln in out.splitlines() if ln.rstrip().endswith(f"--run-id {rid}")]

    [left] = pids(run_id)
    assert len(pids(other)) == 1
    # what the cleanup read before it asked for whole lines: the rank listed, its run id cut off
    cut = cluster.ssh("m1", "ps -ax -o pid=,args=").stdout
    assert [ln for ln in cut.splitlines() if ln.split()[0] == str(left)] and run_id not in cut, cut
    play = tmp_path / "cleanup.yml"
    play.write_text(
        "- hosts: mac_cluster\n  gather_facts: false\n  tasks:\n"
        "    - name: End anything the run left behind\n"
        f"      mlx.cluster.mlx_run_cleanup: {{run_id: {run_id}, grace: 1}}\n"
    )
    try:
        run = run_site(cluster, playbook=str(play), python_env=None)
        assert run.rc == 0, run.failures()
        found = {r["host"]: r["res"]["leftovers"] for r in run.results("End anything the run left behind")}
        assert [p["args"].endswith(f"--run-id {run_id}") for p in found["m1"]] == [True], found
        assert found["m2"] == [], found
        assert pids(run_id) == [] and len(pids(other)) == 1
    finally:
        for pid in pids(run_id) + pids(other):
            cluster.exec("m1", ["kill", "-9", str(pid)])
