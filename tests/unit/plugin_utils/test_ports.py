"""plugins/plugin_utils/ports.py: the port check's verdict, each problem naming both Macs, the
address and port, the cause and the fix."""

from __future__ import annotations

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import SOCKETFILTERFW, endpoints
from ansible_collections.mlx.cluster.plugins.plugin_utils.ports import port_problems

HOSTFILE = {
    "backend": "ring",
    "envs": [],
    "hosts": [
        {"ssh": "m1", "ips": ["10.208.0.1"], "rdma": []},
        {"ssh": "m2", "ips": ["10.208.0.2"], "rdma": []},
        {"ssh": "m3", "ips": ["10.208.0.5"], "rdma": []},
    ],
}
EPS = endpoints(HOSTFILE)  # m1 :32323 <- m3, m2 :32324 <- m1, m3 :32325 <- m2
APP = "/opt/homebrew/Cellar/python@3.12/3.12.8/Frameworks/Python.framework/Versions/3.12/Resources/Python.app"
OFF = {"enabled": False, "state": 0, "block_all": False, "stealth": False, "app": "not_listed", "app_path": APP}


def listened(alf=None, errors=None, error=None):
    out = {}
    for h in ("m1", "m2", "m3"):
        mine = [[e["address"], e["port"]] for e in EPS if e["host"] == h]
        errs = [x for x in (errors or []) if x["host"] == h]
        out[h] = {
            "listener": {
                "error": error if h == "m1" else None,
                "errors": errs,
                "bound": [b for b in mine if [b[0], b[1]] not in [[x["address"], x["port"]] for x in errs]],
            },
            "alf": (alf or {}).get(h, OFF),
        }
    return out


def connected(failures=None):
    failures = failures or {}
    out = {}
    for h in ("m1", "m2", "m3"):
        out[h] = [
            {
                "host": e["host"],
                "address": e["address"],
                "port": e["port"],
                "role": e["role"],
                "result": failures.get((h, e["host"]), "ok"),
                "error": None,
            }
            for e in EPS
            if h in e["peers"]
        ]
    return out


def test_all_reachable_reports_every_firewall():
    v = port_problems(EPS, listened(), connected())
    assert v["problems"] == []
    assert v["message"] == (
        "port check: 3 port(s) reachable from every Mac that connects to them; "
        "application firewall: m1 off, m2 off, m3 off"
    )


def test_stealth_firewall_blocking_the_interpreter_names_both_macs_the_port_and_the_command():
    alf = {"m1": {"enabled": True, "state": 1, "block_all": False, "stealth": True, "app": "blocked", "app_path": APP}}
    v = port_problems(EPS, listened(alf), connected({("m3", "m1"): "timeout"}))
    (p,) = v["problems"]
    assert (p["host"], p["peer"], p["address"], p["port"], p["code"]) == ("m3", "m1", "10.208.0.1", 32323, "timeout")
    assert p["msg"] == (
        "m3 cannot reach m1 10.208.0.1:32323 (rank 0's ring listener): no answer within 5 s (the "
        "connection attempts were dropped without a reply); the application firewall on m1 is on, in "
        "stealth mode (it drops what it does not allow, without an answer) and blocks " + APP
    )
    assert p["fix"].startswith(
        f"on m1: `sudo {SOCKETFILTERFW} --add {APP}`, then `sudo {SOCKETFILTERFW} --unblockapp {APP}` (two "
        "commands, as every public example runs them), or System Settings > "
        "Network > Firewall > Options"
    )
    assert "application firewall: m1 on (stealth, interpreter blocked), m2 off" in v["message"]
    assert v["message"].splitlines()[1] == "- %s -> fix: %s" % (p["msg"], p["fix"])


def test_an_interpreter_the_firewall_does_not_list_is_named_with_the_signed_software_allowance():
    alf = {
        "m1": {
            "enabled": True,
            "block_all": False,
            "stealth": True,
            "app": "not_listed",
            "app_path": APP,
            "allow_signed_downloaded": True,
        }
    }
    v = port_problems(EPS, listened(alf), connected({("m3", "m1"): "timeout"}))
    (p,) = v["problems"]
    assert p["msg"].endswith(
        "and does not list %s (it allows downloaded signed software by itself, which covers an "
        "interpreter only when it is signed with a Developer ID: not a Homebrew, pyenv or "
        "self-built one)" % APP
    )
    assert "m1 on (stealth, signed downloads allowed, interpreter not listed)" in v["message"]


def test_block_all_is_turned_off_first():
    alf = {"m2": {"enabled": True, "block_all": True, "stealth": False, "app": None, "app_path": APP}}
    (p,) = port_problems(EPS, listened(alf), connected({("m1", "m2"): "reset"}))["problems"]
    assert (
        "m1 cannot reach m2 10.208.0.2:32324 (rank 1's ring listener): its kernel accepted the connection" in p["msg"]
    )
    assert "blocking all incoming connections" in p["msg"]
    assert p["fix"].startswith(f"on m2: `sudo {SOCKETFILTERFW} --setblockall off`")


@pytest.mark.parametrize("result", ["timeout", "no_answer"])
def test_firewall_off_names_vpn_filters_pf_and_local_network_privacy(result):
    (p,) = port_problems(EPS, listened(), connected({("m2", "m3"): result}))["problems"]
    assert p["msg"].startswith("m2 cannot reach m3 10.208.0.5:32325 (rank 2's ring listener): ")
    assert "firewall there is off" in p["msg"] and "VPN" in p["msg"] and "Local Network privacy" in p["msg"]
    assert "errno 60 ETIMEDOUT or 65 EHOSTUNREACH" in p["msg"]
    assert "VPN & Filters" in p["fix"] and "pfctl" in p["fix"] and "Local Network" in p["fix"]


def test_unreachable_points_at_the_network_stage():
    (p,) = port_problems(EPS, listened(), connected({("m2", "m3"): "unreachable"}))["problems"]
    assert "no route to it" in p["msg"] and p["fix"].startswith("run the network stage (`--tags network`)")


def test_a_port_in_use_and_a_missing_address_are_their_own_problems_and_not_counted_twice():
    errors = [
        {"host": "m2", "address": "10.208.0.2", "port": 32324, "error": "EADDRINUSE", "text": "Address already in use"},
        {"host": "m3", "address": "10.208.0.5", "port": 32325, "error": "EADDRNOTAVAIL", "text": "x"},
    ]
    v = port_problems(EPS, listened(errors=errors), connected({("m1", "m2"): "refused", ("m2", "m3"): "unreachable"}))
    codes = [(p["code"], p["host"]) for p in v["problems"]]
    assert codes == [("in_use", "m2"), ("no_address", "m3")]  # the connects to them are not judged again
    in_use, no_address = v["problems"]
    assert in_use["msg"] == (
        "m2: 10.208.0.2:32324 (rank 1's ring listener) is in use by another program, so MLX's "
        "rank cannot listen there alone"
    )
    assert "`sudo lsof -nP -iTCP:32324 -sTCP:LISTEN`" in in_use["fix"]
    assert no_address["msg"] == "m3 does not have the address 10.208.0.5, where rank 2's ring listener listens"


def test_a_listener_that_did_not_start_names_the_mac_and_the_env_stage():
    v = port_problems(EPS, listened(error="the interpreter /x/python does not exist on this Mac"), connected())
    (p,) = v["problems"]
    assert p["msg"] == "m1: the probe's listener did not start: the interpreter /x/python does not exist on this Mac"
    assert p["fix"].startswith("run the env stage (`--tags env`)")


def test_a_mac_missing_from_the_results_is_named():
    lis = listened()
    del lis["m3"]
    (p,) = port_problems(EPS, lis, connected())["problems"]
    assert p["code"] == "no_listener" and p["host"] == "m3"


# ---- the connects as a launchd job (port_check_launchd_user) -------------------------------

VENV = "/Users/admin/mlx-cluster/venv/bin/python"
BASE = "/opt/homebrew/Cellar/python@3.12/3.12.8/Frameworks/Python.framework/Versions/3.12/bin/python3.12"


def launched(failures=None, error=None):
    """What each Mac's launchd job found: its connects as connected() words them, with the errno
    a refused connect carries (EHOSTUNREACH 65 on macOS)."""
    out = {}
    for h, results in connected({k: v for k, v in (failures or {}).items()}).items():
        for r in results:
            if r["result"] == "unreachable":
                r.update(errno=65, error="EHOSTUNREACH")
        out[h] = {"user": "admin", "python": VENV, "executable": BASE, "error": error, "results": results}
    return out


def test_a_connect_refused_only_to_the_launchd_job_is_local_network_privacy_with_the_fix():
    v = port_problems(EPS, listened(), connected(), 5, launched({("m2", "m3"): "unreachable"}))
    (p,) = v["problems"]
    # the Mac whose launchd-started interpreter is refused, the peer, the address and port
    assert (p["host"], p["peer"], p["address"], p["port"], p["code"]) == (
        "m2",
        "m3",
        "10.208.0.5",
        32325,
        "local_network",
    )
    assert p["msg"] == (
        "m2: macOS Local Network privacy refuses the launchd-started interpreter on m2: connecting as a "
        f"launchd job, as the server's ranks run ({VENV} ({BASE}), as admin), to m3 10.208.0.5:32325 (rank 2's "
        "ring listener) failed with EHOSTUNREACH (errno 65), while the same connect over ssh got the "
        "listener's answer (Apple's TN3179 exempts processes started over ssh, and says launchd daemons "
        "are exempt too; this refusal of a launchd-started interpreter without an app bundle is reported "
        "for macOS 26/27 and not verified on a Mac by this project)"
    )
    assert p["fix"] == (
        f"on m2: allow {VENV} ({BASE}) in System Settings > Privacy & Security > Local Network if it is "
        "listed there; otherwise run the server with `mlx_server_supervisor: process` (its ranks are then "
        "started over ssh, which TN3179 exempts); then re-run (`--tags port_check` checks the ports alone)"
    )
    assert v["message"].startswith("port check: 1 problem(s) with the ports MLX uses; ")
    assert f"\n- {p['msg']} -> fix: {p['fix']}" in v["message"]


def test_a_launchd_job_that_times_out_alone_is_named_the_same_way_without_an_errno():
    v = port_problems(EPS, listened(), connected(), 5, launched({("m1", "m2"): "timeout"}))
    (p,) = v["problems"]
    assert p["code"] == "local_network" and (p["host"], p["peer"]) == ("m1", "m2")
    assert "to m2 10.208.0.2:32324 (rank 1's ring listener) failed: no answer within 5 s" in p["msg"]


def test_a_failure_both_ways_keeps_todays_wording_once():
    fails = {("m2", "m3"): "unreachable"}
    v = port_problems(EPS, listened(), connected(fails), 5, launched(fails))
    (p,) = v["problems"]
    assert p["code"] == "unreachable" and p["msg"].startswith("m2 cannot reach m3 10.208.0.5:32325")
    assert "Local Network privacy refuses" not in v["message"]
    assert port_problems(EPS, listened(), connected(fails))["problems"] == v["problems"]


def test_no_launchd_results_or_all_reached_change_nothing():
    assert port_problems(EPS, listened(), connected(), 5, launched())["problems"] == []
    assert port_problems(EPS, listened(), connected(), 5, {h: None for h in ("m1", "m2", "m3")})["problems"] == []


def test_a_launchd_job_that_could_not_run_is_named_with_its_reason():
    why = "`launchctl bootstrap system /tmp/x/org.mlx-cluster.port-probe.1.plist` exited 5: Bootstrap failed: 5"
    v = port_problems(EPS, listened(), connected(), 5, {"m1": None, "m2": launched(error=why)["m2"], "m3": None})
    (p,) = v["problems"]
    assert (p["host"], p["code"]) == ("m2", "launchd_probe")
    assert p["msg"] == f"m2: the port probe could not run as a launchd job, as the server's ranks will: {why}"
    assert "`mlx_server_supervisor: process`" in p["fix"] and p["fix"].startswith("on m2: ")
