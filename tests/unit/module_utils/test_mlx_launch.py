"""mlx_launch helpers: failures name hosts, leftovers are found by run id only."""

import pytest

from mlx_launch import hostfile_hosts, launch_argv, read_result, run_processes

HOSTS = ["m1", "m2", "m3"]


def test_launch_argv_is_a_list_with_the_script_after_the_separator():
    argv = launch_argv("/v/bin/mlx.launch", "/a/hostfile.json", "ring", "/v/bin/python", "/h/bench.py",
                       ["--model", "/h/m y"], ["HF_HUB_OFFLINE=1"])
    assert argv == ["/v/bin/mlx.launch", "--hostfile", "/a/hostfile.json", "--backend", "ring", "--python",
                    "/v/bin/python", "--env", "HF_HUB_OFFLINE=1", "--", "/h/bench.py", "--model", "/h/m y"]


def test_read_result_takes_the_json_line_and_maps_ranks_to_hosts():
    out = "loading\n{\"world_size\": 3, \"ok\": true}\n"
    err = "[WARN] Node with rank 2 exited with code 3\n[WARN] Node with rank 1 was killed\n"
    res = read_result(out, err, HOSTS)
    assert res["result"] == {"world_size": 3, "ok": True}
    assert res["failed"] == [{"rank": 2, "host": "m3", "code": 3, "killed": False},
                             {"rank": 1, "host": "m2", "code": None, "killed": True}]
    assert read_result("{not json}\n", "", HOSTS) == {"result": None, "failed": []}


def test_hostfile_hosts_validates():
    assert hostfile_hosts({"hosts": [{"ssh": "m1"}, {"ssh": "m2"}]}) == ["m1", "m2"]
    assert hostfile_hosts([{"ssh": "m1"}]) == ["m1"]
    for bad in ({}, {"hosts": []}, {"hosts": [{"ips": []}]}, "x"):
        with pytest.raises(ValueError):
            hostfile_hosts(bad)


def test_run_processes_matches_the_run_id_as_a_whole_argument_only():
    rid = "k3j4h5g6f7d8s9a0q1w2e3r4"
    ps = (f"  101 /v/bin/python /h/bench.py --model /m --run-id {rid}\n"
          f"  102 bash -c stty -echo; exec python bench.py --run-id {rid}\n"
          f"  103 /v/bin/python /h/bench.py --run-id {rid}x\n"
          f"  104 python other.py --note prefix{rid}\n"
          f"  105 /usr/bin/python3 ansible-module {rid}\n"
          "garbage line\n")
    assert [p["pid"] for p in run_processes(ps, rid, own_pid=105)] == [101, 102]
