"""library/thunderbolt_ping.py: main() with get_bin_path/run_command mocked."""

from __future__ import annotations

from tests.unit.modules.mac_commands import C_LOCALE

PING = "/sbin/ping"
LINKS = [
    {
        "cable": "m1:en2~m2:en2",
        "iface": "en2",
        "address": "10.208.0.1",
        "peer_address": "10.208.0.2",
        "peer_host": "m2",
        "peer_iface": "en2",
    },
    {
        "cable": "m1:en3~m3:en2",
        "iface": "en3",
        "address": "10.208.0.5",
        "peer_address": "10.208.0.6",
        "peer_host": "m3",
        "peer_iface": "en2",
    },
    {
        "cable": "m1:en4~m4:en2",
        "iface": "en4",
        "address": "10.208.0.9",
        "peer_address": "10.208.0.10",
        "peer_host": "m4",
        "peer_iface": "en2",
    },
]


def argv(link, count=2, timeout=3):
    return (PING, "-q", "-o", "-c", str(count), "-t", str(timeout), "-S", link["address"], link["peer_address"])


def run(module_runner, links=LINKS, codes=None, check=False, **args):
    codes = codes or {}
    commands = {
        argv(x, args.get("count", 2), args.get("timeout", 3)): (codes.get(x["iface"], 0), "", "") for x in links
    }
    module_args = {"links": links, **args}
    if check:
        module_args["_ansible_check_mode"] = True
    return module_runner("thunderbolt_ping", args=module_args, bins={"ping": PING}, commands=commands)


def test_every_cable_pinged_from_its_own_address_stopping_at_the_first_answer(module_runner):
    out = run(module_runner)
    assert not out.failed, out.result
    assert sorted(out.calls) == sorted(list(argv(x)) for x in LINKS)
    assert all(env == C_LOCALE for env in out.envs)
    assert [r["cable"] for r in out.result["results"]] == [x["cable"] for x in LINKS]  # plan order
    assert all(r["ok"] for r in out.result["results"])
    assert out.result["changed"] is False


def test_count_and_timeout_reach_ping(module_runner):
    out = run(module_runner, links=LINKS[:1], count=5, timeout=9)
    assert out.calls == [list(argv(LINKS[0], 5, 9))]


def test_silent_cables_are_all_named_with_the_fix(module_runner):
    out = run(module_runner, codes={"en3": 2, "en4": 2})
    assert out.failed
    msg = out.result["msg"]
    assert "m1:en3~m3:en2" in msg and "m1:en4~m4:en2" in msg and "m1:en2~m2:en2" not in msg
    assert "plugged in at both ends" in msg
    assert [r["ok"] for r in out.result["results"]] == [True, False, False]


def test_silent_cables_can_be_returned_instead_of_failing(module_runner):
    out = run(module_runner, codes={"en4": 2}, fail_on_no_answer=False)
    assert not out.failed, out.result
    assert out.result["no_answer"] == [
        {"peer_host": "m4", "problem": "cable m1:en4~m4:en2: en4 10.208.0.9 -> m4:en2 10.208.0.10"}
    ]


def test_check_mode_sends_nothing(module_runner):
    out = run(module_runner, check=True)
    assert not out.failed
    assert out.calls == []
    assert out.result["skipped"] is True


def test_first_end_only_leaves_the_cables_the_peer_pings(module_runner):
    # m10 sorts before m2 as text: the cable id's first end decides, not a host-name comparison
    peer_pings = {
        "cable": "m10:en2~m2:en3",
        "iface": "en3",
        "address": "10.208.0.14",
        "peer_address": "10.208.0.13",
        "peer_host": "m10",
        "peer_iface": "en2",
    }
    this_end_pings = {
        "cable": "m2:en2~m3:en2",
        "iface": "en2",
        "address": "10.208.0.17",
        "peer_address": "10.208.0.18",
        "peer_host": "m3",
        "peer_iface": "en2",
    }
    out = run(module_runner, links=[peer_pings, this_end_pings], first_end_only=True)
    assert not out.failed, out.result
    assert out.calls == [list(argv(this_end_pings))]
    assert [r["cable"] for r in out.result["results"]] == ["m2:en2~m3:en2"]
