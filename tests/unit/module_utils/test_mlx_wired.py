"""module_utils/mlx_wired.py: the safe wired limit, the LaunchDaemon, what must change."""

from __future__ import annotations

import os
import plistlib
from types import SimpleNamespace

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import (
    GIB,
    LABEL,
    MIB,
    PLIST_PATH,
    daemon_bytes,
    daemon_limit,
    default_limit_bytes,
    file_problem,
    highest_default_bytes,
    plan_wired,
    resolve_limit,
    safe_wired_limit_mb,
)


@pytest.mark.parametrize("mem_gb", [8, 16, 24, 36, 64, 96, 128, 192, 512])
def test_safe_limit_leaves_macos_a_share(mem_gb):
    mem = mem_gb * GIB
    safe = safe_wired_limit_mb(mem) * MIB
    assert safe > highest_default_bytes(mem) - MIB  # never below macOS's own default (whole MB)
    assert highest_default_bytes(mem) >= default_limit_bytes(mem)  # the estimates: high and low
    assert mem - safe <= 16 * GIB and safe < mem  # strictly below memory (MLX's rule)


def test_safe_limit_values():
    assert safe_wired_limit_mb(512 * GIB) == 496 * 1024  # at most 16 GB kept
    assert safe_wired_limit_mb(128 * GIB) == 112 * 1024  # 1/8 = 16 GB kept
    assert safe_wired_limit_mb(64 * GIB) == 56 * 1024  # 1/8 of 64 GB = 8 GB kept
    assert safe_wired_limit_mb(32 * GIB) == 26 * 1024  # 6 GB kept (1/8 would be 4)
    assert safe_wired_limit_mb(16 * GIB) == 12 * 1024  # macOS 26's default (3/4), above 16 - 6 GB
    assert safe_wired_limit_mb(8 * GIB) == 6 * 1024
    assert safe_wired_limit_mb(24 * GIB) == 18 * 1024  # both rules agree


def test_resolve_limit_auto_number_and_refusals():
    mem = 64 * GIB
    assert resolve_limit("auto", mem) == resolve_limit(" AUTO ", mem) == 56 * 1024
    assert resolve_limit("40000", mem) == resolve_limit(40000, mem) == 40000
    with pytest.raises(ValueError, match=r"at most 57344 MB .*leaves macOS 8.0 GB.*up to 57344"):
        resolve_limit("60000", mem)
    with pytest.raises(ValueError, match="no limit"):
        resolve_limit("0", mem)
    with pytest.raises(ValueError, match="`auto`, `off` or a number of MB"):
        resolve_limit("lots", mem)


def test_the_daemon_runs_sysctl_at_boot_and_is_read_back():
    data = plistlib.loads(daemon_bytes(4096))
    assert data["Label"] == LABEL and PLIST_PATH == f"/Library/LaunchDaemons/{LABEL}.plist"
    assert data["ProgramArguments"] == ["/usr/sbin/sysctl", "iogpu.wired_limit_mb=4096"]
    assert data["RunAtLoad"] is True and data["KeepAlive"] == {"SuccessfulExit": False}
    assert daemon_bytes(4096) == daemon_bytes(4096) != daemon_bytes(4097)
    assert daemon_limit(daemon_bytes(4096)) == 4096
    assert daemon_limit(None) is None
    assert daemon_limit(b"<plist><dict><key>Label</key>") is None  # malformed
    other = plistlib.dumps(
        {"Label": "com.example.x", "ProgramArguments": ["/usr/sbin/sysctl", "iogpu.wired_limit_mb=1"]}
    )
    assert daemon_limit(other) is None


def stat(uid=0, gid=0, mode=0o100644):
    return SimpleNamespace(st_uid=uid, st_gid=gid, st_mode=mode)


def test_file_problem_is_launchds_rule():
    assert file_problem(None) is None and file_problem(stat()) is None
    assert "not root:wheel" in file_problem(stat(uid=501))
    assert "group or others write" in file_problem(stat(mode=0o100664))
    # what os.stat returns (not only the stand-ins above): a root:wheel file, group-writable
    real = os.stat_result((0o100664, 0, 0, 1, 0, 0, 100, 0, 0, 0))
    assert "mode 0664 lets group or others write it" == file_problem(real)
    assert file_problem(os.stat_result((0o100644, 0, 0, 1, 0, 0, 100, 0, 0, 0))) is None


def test_plan_nothing_to_do_when_in_place():
    plan = plan_wired(4096, 4096, daemon_bytes(4096), None, True)
    assert plan["changes"] == [] and not any(plan[k] for k in ("write", "remove", "bootout", "bootstrap"))
    assert plan["live"] is None


def test_plan_fresh_mac_writes_loads_and_sets():
    plan = plan_wired(4096, 0, None, None, False)
    assert (plan["write"], plan["bootout"], plan["bootstrap"], plan["live"]) == (True, False, True, 4096)
    assert len(plan["changes"]) == 3


def test_plan_new_value_reloads_the_job():
    plan = plan_wired(8192, 4096, daemon_bytes(4096), None, True)
    assert (plan["write"], plan["bootout"], plan["bootstrap"], plan["live"]) == (True, True, True, 8192)


def test_plan_only_the_live_value_after_a_manual_sysctl():
    plan = plan_wired(4096, 1000, daemon_bytes(4096), None, True)
    assert (plan["write"], plan["bootstrap"], plan["live"]) == (False, False, 4096)


def test_plan_bad_owner_rewrites():
    plan = plan_wired(4096, 4096, daemon_bytes(4096), "owned by uid 501 gid 20, not root:wheel", False)
    assert plan["write"] and plan["bootstrap"] and not plan["bootout"]


def test_plan_off_undoes_each_part_only_when_there():
    assert plan_wired(None, 0, None, None, False)["changes"] == []
    plan = plan_wired(None, 4096, daemon_bytes(4096), None, True)
    assert (plan["bootout"], plan["remove"], plan["live"], plan["write"], plan["bootstrap"]) == (
        True,
        True,
        0,
        False,
        False,
    )
    manual = plan_wired(None, 9000, None, None, False)  # set by hand, no daemon: back to 0
    assert (manual["remove"], manual["live"]) == (False, 0)


def test_plan_loads_a_right_plist_launchd_does_not_hold():
    plan = plan_wired(4096, 4096, daemon_bytes(4096), None, False)  # written, never bootstrapped
    assert (plan["write"], plan["bootout"], plan["bootstrap"], plan["live"]) == (False, False, True, None)
    assert plan["changes"] == [f"load the LaunchDaemon {LABEL} (launchctl bootstrap system)"]


def test_discovered_in_place_needs_the_value_and_the_plist_read_by_discovery():
    import hashlib

    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import discovered_in_place

    mem = 64 * GIB
    auto = safe_wired_limit_mb(mem)
    right = {PLIST_PATH: {"sha256": hashlib.sha256(daemon_bytes(auto)).hexdigest(), "mode": "0644"}}
    hw = {"memsize": mem, "wired_limit_mb": auto}
    assert discovered_in_place("auto", hw, right) and discovered_in_place(str(auto), hw, right)
    assert not discovered_in_place("auto", dict(hw, wired_limit_mb=0), right)  # lost at a reboot
    assert not discovered_in_place("auto", hw, {})  # plist not read
    assert not discovered_in_place("auto", hw, {PLIST_PATH: None})  # no plist
    assert not discovered_in_place("auto", hw, {PLIST_PATH: dict(right[PLIST_PATH], mode="0664")})
    assert not discovered_in_place("40000", hw, right)  # another value
    assert not discovered_in_place("lots", hw, right) and not discovered_in_place("auto", None, right)
    assert discovered_in_place("off", {"memsize": mem, "wired_limit_mb": 0}, {PLIST_PATH: None})
    assert not discovered_in_place("off", hw, {PLIST_PATH: None})
    assert not discovered_in_place("off", {"memsize": mem, "wired_limit_mb": 0}, right)
