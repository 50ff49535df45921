"""mlx_launch helpers: failures name hosts, leftovers are found by run id only."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import (
    LaunchProgress,
    describe_failed,
    failure_lines,
    hostfile_hosts,
    launch_argv,
    read_result,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import processes_with

HOSTS = ["m1", "m2", "m3"]


def test_launch_argv_is_a_list_with_the_script_after_the_separator():
    argv = launch_argv(
        "/v/bin/mlx.launch",
        "/a/hostfile.json",
        "ring",
        "/v/bin/python",
        "/h/bench.py",
        ["--model", "/h/m y"],
        ["HF_HUB_OFFLINE=1"],
    )
    assert argv == [
        "/v/bin/mlx.launch",
        "--hostfile",
        "/a/hostfile.json",
        "--backend",
        "ring",
        "--python",
        "/v/bin/python",
        "--env",
        "HF_HUB_OFFLINE=1",
        "--",
        "/h/bench.py",
        "--model",
        "/h/m y",
    ]


def test_read_result_takes_the_json_line_and_maps_ranks_to_hosts():
    out = 'loading\n{"world_size": 3, "ok": true}\n'
    err = "[WARN] Node with rank 2 exited with code 3\n[WARN] Node with rank 1 was killed\n"
    res = read_result(out, err, HOSTS)
    assert res["result"] == {"world_size": 3, "ok": True}
    assert res["failed"] == [
        {"rank": 2, "host": "m3", "code": 3, "killed": False},
        {"rank": 1, "host": "m2", "code": None, "killed": True},
    ]
    assert read_result("{not json}\n", "", HOSTS) == {"result": None, "failed": []}


# What mlx.launch printed when rank 1 (m2) was SIGKILLed mid-run (tests/e2e/test_faults_runtime.py):
# its ssh exited 255; rank 0 lost its peer and said so on its pty (the launcher's stdout); the
# launcher's clean-up of rank 0 failed (the pid file name it read over `ssh -tt` ends in "\r")
# and its thread died with a traceback naming m1, the healthy Mac.
KILLED_OUT = (
    "[rank 0/2 m1] generating 3000 tokens from a 35-token prompt\r\n"
    "[rank 1/2 m2] generating 3000 tokens from a 35-token prompt\r\n"
    + "[ring] Socket 3 was closed by the peer\r\n"
    * 10
    + "[ring] Too many send/recv errors. Failing pending tasks...\r\n"
    "Traceback (most recent call last):\r\n"
    '  File "/srv/admin/mlx-cluster/bench/mlx_cluster_bench.py", line 237, in run\r\n'
    "    tokens, timing = generate_fixed(model, prompt, args.max_tokens)\r\n"
    "RuntimeError: [ring] connection to a peer was lost\r\n"
)
KILLED_ERR = (
    "\x1b[33m[WARN] Node with rank 1 exited with code 255 \x1b[0m\n"
    "Exception in thread Thread-1 (_thread_fn):\n"
    "Traceback (most recent call last):\n"
    '  File "/v/lib/python3.11/site-packages/mlx/_distributed_utils/launch.py", line 97, in terminate\n'
    "    c = run(\n"
    "subprocess.CalledProcessError: Command 'ssh m1 'pid=$(cat /tmp/tmp.s9V2UIQUxb\r\n"
    "); if ps -p $pid >/dev/null; then     kill $pid;     echo 1; else     echo 0; fi; rm /tmp/tmp.s9V2UIQUxb\r\n"
    "'' returned non-zero exit status 1.\n"
)


def test_a_rank_killed_mid_run_is_named_with_what_the_ranks_said_not_the_launchers_traceback():
    res = read_result(KILLED_OUT, KILLED_ERR, ["m1", "m2"])
    assert res["result"] is None
    assert res["failed"] == [{"rank": 1, "host": "m2", "code": 255, "killed": False}]
    assert describe_failed(res["failed"]) == (
        "rank 1 (m2) exited with 255 (its process was killed on the Mac, or the SSH connection to the Mac was lost)"
    )
    ranks, launcher = failure_lines(KILLED_OUT, KILLED_ERR)
    assert len(ranks) == 8 and ranks[-1] == "RuntimeError: [ring] connection to a peer was lost"
    assert launcher == []  # neither the per-rank summary nor the clean-up thread's traceback


def test_failure_lines_keep_the_launchers_own_errors_and_leave_out_the_result():
    out = '[rank 0/2 m1] loading\n{"world_size": 2}\n\n'
    err = (
        "\x1b[33m[WARN] Node with rank 0 exited with code 3 \x1b[0m\n"
        'Exception in thread Thread-2 (_thread_fn):\nTraceback (most recent call last):\n  File "x", line 1\n'
        "OSError: boom\nsecond line of the thread's error\n"
        "\x1b[31m[ERROR] The ring backend requires IPs \x1b[0m\n"
        'Traceback (most recent call last):\n  File "launch", line 9\nValueError: bad hostfile\n'
    )
    ranks, launcher = failure_lines(out, err, n=3)
    assert ranks == ["[rank 0/2 m1] loading"]
    assert launcher == ["Traceback (most recent call last):", '  File "launch", line 9', "ValueError: bad hostfile"]
    assert failure_lines(out, err)[1][0] == "[ERROR] The ring backend requires IPs"
    assert (
        describe_failed(
            [
                {"rank": 0, "host": "m1", "code": 3, "killed": False},
                {"rank": 2, "host": "m3", "code": None, "killed": True},
            ]
        )
        == "rank 0 (m1) exited with 3, rank 2 (m3) was killed"
    )


def test_hostfile_hosts_validates():
    assert hostfile_hosts({"hosts": [{"ssh": "m1"}, {"ssh": "m2"}]}) == ["m1", "m2"]
    assert hostfile_hosts([{"ssh": "m1"}]) == ["m1"]
    for bad in ({}, {"hosts": []}, {"hosts": [{"ips": []}]}, "x"):
        with pytest.raises(ValueError):
            hostfile_hosts(bad)


def test_leftovers_of_a_run_match_its_run_id_as_a_whole_argument_only():
    rid = "k3j4h5g6f7d8s9a0q1w2e3r4"
    ps = (
        f"  101 /v/bin/python /h/bench.py --model /m --run-id {rid}\n"
        f"  102 bash -c stty -echo; exec python bench.py --run-id {rid}\n"
        f"  103 /v/bin/python /h/bench.py --run-id {rid}x\n"
        f"  104 python other.py --note prefix{rid}\n"
        f"  105 /usr/bin/python3 ansible-module {rid}\n"
        "garbage line\n"
    )
    assert [p["pid"] for p in processes_with(ps, rid, own_pid=105)] == [101, 102]


# What mlx.launch passes on from two ranks of roles/benchmark/files/mlx_cluster_bench.py (its
# log(): "[rank R/N host] ..." on stderr, under `ssh -tt` so "\r\n"-ended on the launcher's
# stdout), with a launcher log line in colour and a rank's line cut by the pipe.
BENCH_OUT = (
    "[rank 0/2 m1] loading /srv/admin/mlx-cluster/models/tiny\r\n"
    "[rank 1/2 m2] warm-up 1/1: 64 tokens from a 32-token prompt\r\n"
    "\x1b[32m[INFO] Starting ring\x1b[0m\n"
    "[rank 0/2 m1] warm-up 1/1: 64 tokens from a 32-token prompt\r\n"
    "[rank 0/2 m1] trial 1/3: prompt_tps=812.000, generation_tps=95.100, total_time=0.713\r\n"
    "[rank 1/2 m2] trial 1/3: prompt_tps=810.000, generation_tps=95.000, total_time=0.714\r\n"
    "[rank 0/2 m1] trial 2/3: prompt_tps=820.000, gen"
)


def test_launch_progress_keeps_each_ranks_latest_step():
    p = LaunchProgress()
    assert p.feed(BENCH_OUT) is True
    s = p.state()
    assert s["seq"] == 4 and s["done"] is False
    assert s["ranks"]["0"] == {
        "size": 2,
        "host": "m1",
        "kind": "trial",
        "step": 1,
        "of": 3,
        "line": "trial 1/3: prompt_tps=812.000, generation_tps=95.100, total_time=0.713",
    }
    assert s["ranks"]["1"]["step"] == 1 and s["ranks"]["1"]["kind"] == "trial"
    # the cut line counts once it is whole
    assert p.feed("eration_tps=96.000, total_time=0.70\r\n") is True
    assert p.state(done=True)["ranks"]["0"]["step"] == 2 and p.state(done=True)["done"] is True
    assert p.feed('[rank 0/2 m1] generating\r\n{"world_size": 2}\n') is False


def test_launch_progress_keeps_the_pipes_apart():
    p = LaunchProgress()
    p.feed("[rank 1/2 m2] tri", "stdout")
    p.feed("\x1b[33m[WARN] slow\x1b[0m\n", "stderr")
    assert p.feed("al 1/3: prompt_tps=1.0\r\n", "stdout") is True
    assert p.state()["ranks"]["1"]["line"] == "trial 1/3: prompt_tps=1.0"


@given(st.text())
def test_launch_progress_takes_any_text(text):
    p = LaunchProgress()
    p.feed(text)
    assert set(p.state()) == {"ranks", "seq", "done"}
