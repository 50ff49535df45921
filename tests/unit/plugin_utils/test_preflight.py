"""preflight(): every problem names host, port and fix."""

from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import preflight, report, version_tuple


def host_facts(
    version="26.2",
    rdma_ctl="enabled",
    devices=("en2", "en3"),
    state="PORT_ACTIVE",
    bridge_members=(),
    free_gb=100,
    mem_gb=128,
):
    return {
        "os": {"product_version": version},
        "rdma": {
            "rdma_ctl": rdma_ctl,
            "devices": [{"name": f"rdma_{d}", "iface": d, "port_state": state, "ipv4_gid": True} for d in devices],
        },
        "thunderbolt": {"bridge": {"exists": bool(bridge_members), "members": list(bridge_members)}},
        "hw": {"memsize": mem_gb * 2**30},
        "disk": {"path": "/Users/admin", "free_bytes": free_gb * 2**30},
    }


def cable(a, ai, b, bi, speed=80, cls="TB5", sighting="both"):
    return {
        "id": f"{a}:{ai}~{b}:{bi}",
        "a": {"host": a, "iface": ai},
        "b": {"host": b, "iface": bi},
        "speed_gbps": speed,
        "link_class": cls,
        "sighting": sighting,
        "via": [],
    }


LINKS = {"cables": [cable("m1", "en2", "m2", "en2")], "problems": [], "external": []}


def only(problems, check):
    return [p for p in problems if p["check"] == check]


def test_healthy_pair_has_no_problem():
    assert preflight({"m1": host_facts(), "m2": host_facts()}, LINKS, {"backend": "jaccl"}) == []
    assert report([]) == "preflight: no problems"


def test_rdma_disabled_names_host_and_recovery_fix():
    probs = preflight(
        {"m1": host_facts(), "m2": host_facts(rdma_ctl="disabled", devices=())}, LINKS, settings={"rdma_required": True}
    )
    (p,) = only(probs, "rdma")
    assert p["severity"] == "error" and p["host"] == "m2"
    assert "rdma_ctl enable" in p["fix"] and "Recovery" in p["fix"]
    assert "System Settings" not in p["fix"]  # macOS 26: Recovery only


def test_rdma_disabled_on_a_later_macos_names_the_settings_switch_first_as_unverified():
    later = host_facts(rdma_ctl="disabled", devices=())
    later["os"] = {**(later.get("os") or {}), "product_version": "27.0"}
    (p,) = only(preflight({"m1": host_facts(), "m2": later}, LINKS, settings={"rdma_required": True}), "rdma")
    assert p["fix"].startswith("on macOS 27.0, turn RDMA on in System Settings if it offers the switch")
    assert "unverified" in p["fix"] and p["fix"].endswith("run `rdma_ctl enable`, reboot")


def test_rdma_problems_are_warnings_unless_required():
    probs = preflight({"m1": host_facts(), "m2": host_facts(devices=())}, LINKS)
    (p,) = only(probs, "rdma")
    assert p["severity"] == "warning" and "Thunderbolt 5" in p["fix"]


def test_port_down_names_the_port():
    probs = preflight(
        {"m1": host_facts(state="PORT_DOWN"), "m2": host_facts()}, LINKS, settings={"rdma_required": True}
    )
    (p,) = only(probs, "rdma_port")
    assert (p["host"], p["port"], p["severity"]) == ("m1", "en2", "error")
    assert "m1:en2" in p["fix"]


def test_macos_mismatch_and_too_old_for_rdma():
    probs = preflight({"m1": host_facts(), "m2": host_facts(), "m3": host_facts(version="26.1")}, LINKS)
    (mismatch,) = only(probs, "macos_version")
    assert mismatch["host"] == "m3" and "26.1" in mismatch["msg"] and "m1, m2" in mismatch["msg"]
    (old,) = only(probs, "macos_rdma")
    assert old["host"] == "m3"


def _with_build(facts, build):
    facts["os"]["build_version"] = build
    return facts


def test_same_version_other_build_is_named_with_the_builds_and_the_fix():
    probs = preflight(
        {
            "m1": _with_build(host_facts(), "25C56"),
            "m2": _with_build(host_facts(), "25C56"),
            "m3": _with_build(host_facts(), "25C5048a"),
        },
        LINKS,
    )
    (p,) = only(probs, "macos_build")
    assert (p["host"], p["severity"]) == ("m3", "error")
    assert p["msg"] == "m3 runs macOS 26.2 build 25C5048a while m1, m2 run build 25C56"
    assert "Beta Updates off" in p["fix"] and "m3" in p["fix"]
    same = {h: _with_build(host_facts(), "25C56") for h in ("m1", "m2")}
    assert only(preflight(same, LINKS), "macos_build") == []
    # another version already says it all: no second finding about the build
    mixed = {"m1": _with_build(host_facts(), "25C56"), "m2": _with_build(host_facts(version="26.1"), "25B78")}
    assert only(preflight(mixed, LINKS), "macos_build") == []


def test_tb4_cable_warns_or_fails_with_rdma_required():
    links = {"cables": [cable("m1", "en2", "m2", "en2", speed=40, cls="TB4")]}
    (w,) = only(preflight({"m1": host_facts(), "m2": host_facts()}, links), "link_speed")
    assert w["severity"] == "warning" and "40 Gb/s" in w["msg"] and w["port"] == "en2"
    (e,) = only(
        preflight({"m1": host_facts(), "m2": host_facts()}, links, settings={"rdma_required": True}), "link_speed"
    )
    assert e["severity"] == "error"


def test_bridge_with_cabled_ports_is_named():
    probs = preflight({"m1": host_facts(bridge_members=("en2", "en3")), "m2": host_facts()}, LINKS)
    (p,) = only(probs, "thunderbolt_bridge")
    assert p["host"] == "m1" and "en2" in p["msg"] and "en3" not in p["msg"]


def test_ports_out_of_the_bridge_but_still_in_its_definition_are_named():
    # runtime clean (ifconfig deletem), but macOS rebuilds bridge0 from its definition at boot
    m1 = host_facts()
    m1["thunderbolt"]["bridge"] = {"exists": True, "members": [], "persistent_members": ["en2", "en3"]}
    (p,) = only(preflight({"m1": m1, "m2": host_facts()}, LINKS), "thunderbolt_bridge")
    assert p["host"] == "m1" and "definition" in p["msg"] and "next boot" in p["msg"] and "en3" not in p["msg"]
    m1["thunderbolt"]["bridge"]["persistent_members"] = ["en3"]  # not cabled: nothing to say
    assert only(preflight({"m1": m1, "m2": host_facts()}, LINKS), "thunderbolt_bridge") == []
    m1["thunderbolt"]["bridge"]["persistent_members"] = None  # file not read: no guess
    assert only(preflight({"m1": m1, "m2": host_facts()}, LINKS), "thunderbolt_bridge") == []


def test_disk_and_topology_errors_and_report_order():
    topo = {"backend": None, "message": "not a mesh and no ring", "missing": [["m1", "m3"]]}
    probs = preflight({"m1": host_facts(free_gb=1), "m2": host_facts()}, LINKS, topo)
    assert only(probs, "disk")[0]["host"] == "m1"
    assert "m1 <-> m3" in only(probs, "topology")[0]["fix"]
    text = report(probs + [{"severity": "warning", "check": "x", "host": "m2", "port": None, "msg": "w", "fix": "f"}])
    lines = text.splitlines()
    assert lines[0] == "preflight: 2 error(s), 1 warning(s)"
    assert lines[1].startswith("[ERROR]") and lines[-1].startswith("[WARNING] m2")
    # the stop on errors: their lines alone, under the count of all (not "0 warning(s)")
    errors = report(
        probs + [{"severity": "warning", "check": "x", "host": "m2", "port": None, "msg": "w", "fix": "f"}], "error"
    )
    head, *rest = errors.splitlines()
    assert head == "preflight: 2 error(s), 1 warning(s) (the errors below; every finding is in the summary above)"
    assert len(rest) == 2 and all(ln.startswith("[ERROR]") for ln in rest)
    assert report(probs, "error") == "preflight: 2 error(s), 0 warning(s)\n" + "\n".join(rest)


def test_a_mac_that_installs_macos_updates_by_itself_is_a_warning_with_the_fix():
    on = {
        "automatic_check": True,
        "automatic_download": True,
        "install_macos_updates": True,
        "critical_update_install": True,
    }
    probs = preflight({"m1": {**host_facts(), "updates": on}, "m2": host_facts()}, LINKS, {"backend": "jaccl"})
    (p,) = probs
    assert (p["severity"], p["check"], p["host"]) == ("warning", "macos_updates", "m1")
    assert "restarts" in p["msg"] and "another build" in p["msg"]
    assert "Software Update > Automatic Updates" in p["fix"]
    assert (
        "defaults write /Library/Preferences/com.apple.SoftwareUpdate AutomaticallyInstallMacOSUpdates -bool false"
        in p["fix"]
        and "softwareupdate --schedule off" in p["fix"]
    )
    assert report(probs).startswith("preflight: 0 error(s), 1 warning(s)\n[WARNING] m1: m1 installs macOS updates")


def test_updates_off_unknown_or_never_checked_are_not_reported():
    for updates in (
        {"install_macos_updates": False, "automatic_check": True},
        {"install_macos_updates": None, "automatic_check": True},  # never written
        {"install_macos_updates": True, "automatic_check": False},  # nothing is ever found
        None,
    ):
        facts = {**host_facts(), "updates": updates}
        assert only(preflight({"m1": facts, "m2": host_facts()}, LINKS), "macos_updates") == [], updates


def test_version_tuple():
    assert version_tuple("26.2") == version_tuple("26.2.0") < version_tuple("26.10")
    assert version_tuple(None) == ()


def test_unplugged_cable_is_named_by_its_stale_address():
    m1 = host_facts()
    m1["interfaces"] = {
        "en2": {"ipv4": [{"address": "10.208.7.1", "prefix": 30}]},
        "en0": {"ipv4": [{"address": "10.99.0.2", "prefix": 24}]},
    }
    m2 = host_facts()
    m2["interfaces"] = {"en3": {"ipv4": [{"address": "10.208.7.2", "prefix": 30}]}}
    probs = preflight({"m1": m1, "m2": m2}, {"cables": []}, ip_plan={"pool": "10.208.0.0/16"})
    stale = only(probs, "stale_link")
    assert [(p["host"], p["port"]) for p in stale] == [("m1", "en2"), ("m2", "en3")]
    assert "cable to m2:en3" in stale[0]["msg"] and "unplugged or moved" in stale[0]["msg"]
    # An address outside the pool (the LAN) or on a cabled port is not stale.
    assert preflight({"m1": m1, "m2": m2}, LINKS, ip_plan={"pool": "10.209.0.0/16"}) == []


def test_a_mac_taken_out_of_the_inventory_leaves_one_true_warning_per_port():
    """m3 was in the cluster and is taken out of the inventory, its cables still plugged in: each
    port cabled to it says so once, with the cluster address it still holds and what removes it
    (not "no cable is seen": there is one)."""
    m1, m2 = host_facts(devices=("en2", "en4")), host_facts(devices=("en2", "en4"))
    m1["interfaces"] = {
        "en2": {"ipv4": [{"address": "10.208.7.1", "prefix": 30}]},
        "en4": {"ipv4": [{"address": "10.208.9.1", "prefix": 30}]},
    }
    m2["interfaces"] = {"en2": {"ipv4": [{"address": "10.208.7.2", "prefix": 30}]}, "en4": {"ipv4": []}}
    links = dict(
        LINKS,
        external=[
            {"host": "m1", "iface": "en4", "peer_name": "Mac Studio"},
            {"host": "m2", "iface": "en4", "peer_name": "Mac Studio"},
        ],
    )
    probs = preflight({"m1": m1, "m2": m2}, links, ip_plan={"pool": "10.208.0.0/16"})
    assert only(probs, "stale_link") == []
    wiring = {p["host"]: p for p in only(probs, "wiring")}
    assert sorted(wiring) == ["m1", "m2"]
    assert wiring["m1"]["msg"] == (
        "m1:en4 is cabled to a Mac not in the inventory (Mac Studio); it still has the cluster address "
        "10.208.9.1/30 from when that Mac was in the cluster, which the network stage leaves as it is "
        "while the cable is plugged in"
    )
    assert wiring["m1"]["fix"] == (
        "add that Mac to the inventory or unplug the cable (the next network stage then removes m1:en4's old address)"
    )
    # a port that holds nothing of the cluster's: the warning as it was
    assert wiring["m2"]["msg"] == "m2:en4 is cabled to a Mac not in the inventory (Mac Studio)"
    assert wiring["m2"]["fix"] == "add that Mac to the inventory or unplug the cable"


def moved_plan(kept):
    """m1's end of the m1-m2 cable moved from en2 to en4: the plan has the new cable."""
    return {
        "pool": "10.208.0.0/16",
        "cables": {
            "m1:en4~m2:en2": {
                "network": "10.208.9.0/30",
                "kept": kept,
                "a": {"host": "m1", "iface": "en4", "address": "10.208.9.1"},
                "b": {"host": "m2", "iface": "en2", "address": "10.208.9.2"},
            }
        },
    }


def test_cable_moved_to_another_port_is_named_at_both_ports():
    m1, m2 = host_facts(devices=("en2", "en4")), host_facts()
    m1["interfaces"] = {"en2": {"ipv4": [{"address": "10.208.7.1", "prefix": 30}]}, "en4": {"ipv4": []}}
    m2["interfaces"] = {"en2": {"ipv4": [{"address": "10.208.7.2", "prefix": 30}]}}
    links = {"cables": [cable("m1", "en4", "m2", "en2")], "problems": [], "external": []}
    probs = preflight({"m1": m1, "m2": m2}, links, ip_plan=moved_plan(kept=False))
    (stale,) = only(probs, "stale_link")
    assert (stale["host"], stale["port"]) == ("m1", "en2") and "cable to m2:en2" in stale["msg"]
    (new,) = only(probs, "unaddressed_cable")
    assert (new["host"], new["port"], new["severity"]) == ("m1", "en4", "warning")
    assert "m1:en4 <-> m2:en2" in new["msg"] and "moved" in new["msg"] and "--tags network" in new["fix"]
    # once addressed (kept by the planner) nothing is said
    assert only(preflight({"m1": m1, "m2": m2}, links, ip_plan=moved_plan(kept=True)), "unaddressed_cable") == []


def test_a_cluster_never_configured_has_no_unaddressed_warnings():
    m1, m2 = host_facts(), host_facts()
    m1["interfaces"] = {"en2": {"ipv4": [{"address": "192.168.1.20", "prefix": 24}]}}
    assert preflight({"m1": m1, "m2": m2}, LINKS, ip_plan=moved_plan(kept=False)) == []


def test_silent_cables_message_and_macs_that_dropped_out():
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import no_answer_msg
    from ansible_collections.mlx.cluster.plugins.plugin_utils.preflight import dropped_out

    msg = no_answer_msg([{"problem": "cable a~b: en2 1.1.1.1 -> m2:en2 1.1.1.2"}, {"problem": "cable c~d: x"}])
    assert msg.startswith("no answer over cable a~b: en2 1.1.1.1 -> m2:en2 1.1.1.2; cable c~d: x. Fix: ")
    plan = {
        "hosts": {
            "m1": [
                {"iface": "en2", "peer_host": "m2", "peer_iface": "en2"},
                {"iface": "en3", "peer_host": "m3", "peer_iface": "en2"},
            ],
            "m2": [
                {"iface": "en2", "peer_host": "m1", "peer_iface": "en2"},
                {"iface": "en3", "peer_host": "m3", "peer_iface": "en3"},
            ],
            "m3": [
                {"iface": "en2", "peer_host": "m1", "peer_iface": "en3"},
                {"iface": "en3", "peer_host": "m2", "peer_iface": "en3"},
            ],
        }
    }
    (line,) = dropped_out(plan, ["m2"])
    assert line.startswith("m2 dropped out of the network stage")
    assert "its cables m1:en2 <-> m2:en2, m3:en3 <-> m2:en3 are configured on the other side only" in line
    assert "Fix: bring m2 back" in line and "--tags network" in line
    assert dropped_out(plan, []) == []
    (alone,) = dropped_out({}, ["m9"])  # no plan for it: named, no cables
    assert alone.startswith("m9 dropped out") and "its cables" not in alone


def test_backend_without_rdma_somewhere_is_named_with_its_reason_and_fix():
    topo = {
        "backend": "ring",
        "backend_reason": "ring, not jaccl or jaccl-ring: cables that cannot: m1:en2 <-> m2:en2 (TB4 40 Gb/s)",
        "backend_fix": "use a Thunderbolt 5 cable",
    }
    (p,) = only(preflight({"m1": host_facts(), "m2": host_facts()}, LINKS, topo), "backend")
    assert p["severity"] == "warning" and p["host"] is None
    assert p["msg"].startswith("backend ring: ring, not jaccl") and "m1:en2 <-> m2:en2 (TB4 40 Gb/s)" in p["msg"]
    assert p["fix"] == "use a Thunderbolt 5 cable"
    assert "[WARNING] cluster: backend ring" in report([p])
    # nothing to say when RDMA runs everywhere, or when RDMA is not wanted
    assert (
        only(
            preflight(
                {"m1": host_facts(), "m2": host_facts()},
                LINKS,
                {"backend": "jaccl", "backend_reason": "jaccl: ...", "backend_fix": ""},
            ),
            "backend",
        )
        == []
    )
    assert (
        only(
            preflight({"m1": host_facts(), "m2": host_facts()}, LINKS, topo, settings={"rdma_wanted": False}), "backend"
        )
        == []
    )


def test_rdma_required_without_a_fitting_backend_is_an_error_with_the_cables_fix():
    topo = {
        "backend": None,
        "message": "no backend fits; no backend: RDMA is required ... m1:en2 <-> m2:en2",
        "backend_fix": "use a Thunderbolt 5 cable",
        "missing": [],
    }
    (p,) = only(
        preflight({"m1": host_facts(), "m2": host_facts()}, LINKS, topo, settings={"rdma_required": True}), "topology"
    )
    assert p["severity"] == "error" and "m1:en2 <-> m2:en2" in p["msg"] and p["fix"] == "use a Thunderbolt 5 cable"


def test_a_hung_rdma_probe_names_the_mac_the_command_and_the_fix():
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rdma import rdma_facts

    hung = {
        "command": "ibv_devinfo -v",
        "msg": "`ibv_devinfo -v` did not answer within 5 s on this Mac (stopped)",
        "fix": "RDMA looks wedged on this Mac: replug its Thunderbolt cables, or reboot the Mac if that "
        "does not help, then re-run",
    }
    m2 = dict(host_facts(), rdma=rdma_facts("rdma_en2\n", None, None, cabled_ifaces=["en2"], hung=hung))
    for required, severity in ((False, "warning"), (True, "error")):
        problems = preflight({"m1": host_facts(), "m2": m2}, LINKS, settings={"rdma_required": required})
        (p,) = only(problems, "rdma")
        assert (p["severity"], p["host"]) == (severity, "m2")
        # the Mac's own RDMA findings are not guessed from the half-read probes
        assert only(problems, "rdma_port") == []
        line = next(ln for ln in report(problems).splitlines() if "m2" in ln)
        assert line == (
            f"[{severity.upper()}] m2: RDMA on m2 is unusable: `ibv_devinfo -v` did not answer "
            f"within 5 s on this Mac (stopped) -> fix: RDMA looks wedged on this Mac: replug its "
            f"Thunderbolt cables, or reboot the Mac if that does not help, then re-run"
        )


def test_a_toolkit_directory_another_user_can_change_is_an_error_naming_the_fix():
    bad = {
        "path": "/Users/Shared/mlx-cluster",
        "problem": "/Users/Shared/mlx-cluster belongs to uid 502, not to this user (uid 501) or root",
    }
    probs = preflight({"m1": host_facts(), "m2": {**host_facts(), "cluster_dir": bad}}, LINKS, {"backend": "jaccl"})
    (p,) = only(probs, "cluster_dir")
    assert (p["severity"], p["host"]) == ("error", "m2")
    assert p["msg"] == (
        "the toolkit's directory /Users/Shared/mlx-cluster on m2 is not this user's alone: "
        "/Users/Shared/mlx-cluster belongs to uid 502, not to this user (uid 501) or root"
    )
    assert "chmod go-w" in p["fix"] and "mlx_cluster_remote_dir" in p["fix"]
    for fine in ({"path": "/Users/admin/mlx-cluster", "problem": ""}, None):
        assert (
            only(preflight({"m1": {**host_facts(), "cluster_dir": fine}, "m2": host_facts()}, LINKS), "cluster_dir")
            == []
        )
