"""library/mac_wired_limit.py: main() with sysctl and launchctl answered, the plist in tmp_path."""

from __future__ import annotations

import os

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import GIB, daemon_bytes, safe_wired_limit_mb

SYSCTL, LAUNCHCTL = "/usr/sbin/sysctl", "/bin/launchctl"
BINS = {"sysctl": SYSCTL, "launchctl": LAUNCHCTL}
MEM = (SYSCTL, "-n", "hw.memsize")
LIVE = (SYSCTL, "-n", "iogpu.wired_limit_mb")
PRINT = (LAUNCHCTL, "print", "system/org.mlx-cluster.wired-limit")
BOOTOUT = (LAUNCHCTL, "bootout", "system/org.mlx-cluster.wired-limit")
NOT_LOADED = (113, "", 'Could not find service "org.mlx-cluster.wired-limit" in domain for system\n')
LOADED = (0, "system/org.mlx-cluster.wired-limit = {\n\tstate = not running\n}\n", "")
AUTO = safe_wired_limit_mb(64 * GIB)


class Mac(dict):
    """Commands answered from a small model of the Mac: the live value and launchd's job."""

    def __init__(self, plist, live=0, loaded=False, refuse=None):
        super().__init__()
        self.plist, self.live, self.loaded, self.refuse = str(plist), live, loaded, refuse or {}

    def __bool__(self):
        return True

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        if key in self.refuse:
            return self.refuse[key]
        if key == MEM:
            return (0, f"{64 * GIB}\n", "")
        if key == LIVE:
            return (0, f"{self.live}\n", "")
        if key == PRINT:
            return LOADED if self.loaded else NOT_LOADED
        if key == BOOTOUT:
            self.loaded = False
            return (0, "", "")
        if key == (LAUNCHCTL, "bootstrap", "system", self.plist):
            self.loaded = True
            return (0, "", "")
        if key[0] == SYSCTL and len(key) == 2 and key[1].startswith("iogpu.wired_limit_mb="):
            old, self.live = self.live, int(key[1].split("=")[1])
            return (0, f"iogpu.wired_limit_mb: {old} -> {self.live}\n", "")
        raise AssertionError(f"unexpected command {key!r}")


@pytest.fixture
def plist(tmp_path):
    return tmp_path / "org.mlx-cluster.wired-limit.plist"


def run(module_runner, plist, mac, check=False, diff=False, **args):
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return module_runner("mac_wired_limit", args=args, bins=BINS, commands=mac, module_attrs={"PLIST": str(plist)})


def changes_of(out):
    return [c for c in out.calls if c[:2] != [SYSCTL, "-n"] and c[1:2] != ["print"]]


def test_auto_on_a_fresh_mac_writes_loads_and_sets_then_reads_back(module_runner, plist):
    mac = Mac(plist)
    out = run(module_runner, plist, mac, diff=True)
    assert not out.failed, out.result
    assert out.result["changed"] is True and out.result["limit_mb"] == AUTO == out.result["safe_max_mb"]
    assert changes_of(out) == [[LAUNCHCTL, "bootstrap", "system", str(plist)], [SYSCTL, f"iogpu.wired_limit_mb={AUTO}"]]
    assert plist.read_bytes() == daemon_bytes(AUTO)
    st = os.stat(plist)
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o644, 0, 0)
    assert out.result["before"] == {"live_mb": 0, "daemon_mb": None, "loaded": False}
    assert out.result["after"] == {"live_mb": AUTO, "daemon_mb": AUTO, "loaded": True}
    assert "iogpu.wired_limit_mb = 0\n" in out.result["diff"]["before"] and "(absent)" in out.result["diff"]["before"]
    assert f"iogpu.wired_limit_mb={AUTO}" in out.result["diff"]["after"]
    assert out.result["cmds"][0] == ["write", str(plist)]


def test_in_place_runs_only_reads(module_runner, plist):
    plist.write_bytes(daemon_bytes(AUTO))
    os.chmod(plist, 0o644)
    out = run(module_runner, plist, Mac(plist, live=AUTO, loaded=True))
    assert not out.failed and out.result["changed"] is False, out.result
    assert [tuple(c) for c in out.calls] == [MEM, LIVE, PRINT]


def test_check_mode_changes_nothing(module_runner, plist):
    mac = Mac(plist)
    out = run(module_runner, plist, mac, check=True)
    assert out.result["changed"] is True and not plist.exists()
    assert changes_of(out) == [] and mac.live == 0 and not mac.loaded
    assert out.result["after"] == {"live_mb": AUTO, "daemon_mb": AUTO, "loaded": True}


def test_a_new_value_reloads_the_job(module_runner, plist):
    plist.write_bytes(daemon_bytes(AUTO))
    os.chmod(plist, 0o644)
    mac = Mac(plist, live=AUTO, loaded=True)
    out = run(module_runner, plist, mac, limit_mb="40000")
    assert not out.failed, out.result
    assert changes_of(out) == [
        list(BOOTOUT),
        [LAUNCHCTL, "bootstrap", "system", str(plist)],
        [SYSCTL, "iogpu.wired_limit_mb=40000"],
    ]
    assert plist.read_bytes() == daemon_bytes(40000) and mac.live == 40000


def test_more_than_the_safe_value_is_refused_before_anything_changes(module_runner, plist):
    mac = Mac(plist)
    out = run(module_runner, plist, mac, limit_mb=str(AUTO + 1))
    assert out.failed and not plist.exists() and mac.live == 0
    assert f"at most {AUTO} MB" in out.result["msg"] and "use `auto`" in out.result["msg"]
    assert [tuple(c) for c in out.calls] == [MEM]


def test_absent_unloads_removes_and_sets_zero(module_runner, plist):
    plist.write_bytes(daemon_bytes(AUTO))
    mac = Mac(plist, live=AUTO, loaded=True)
    out = run(module_runner, plist, mac, state="absent", diff=True)
    assert not out.failed, out.result
    assert changes_of(out) == [list(BOOTOUT), [SYSCTL, "iogpu.wired_limit_mb=0"]]
    assert not plist.exists() and mac.live == 0 and not mac.loaded
    assert out.result["after"] == {"live_mb": 0, "daemon_mb": None, "loaded": False}
    again = run(module_runner, plist, mac, state="absent")
    assert again.result["changed"] is False and changes_of(again) == []


def test_a_refused_bootstrap_names_launchds_rules(module_runner, plist):
    refused = (5, "", "Bootstrap failed: 5: Input/output error\n")
    mac = Mac(plist, refuse={(LAUNCHCTL, "bootstrap", "system", str(plist)): refused})
    out = run(module_runner, plist, mac)
    assert out.failed
    assert (
        "Bootstrap failed: 5: Input/output error" in out.result["msg"] and "root:wheel, mode 0644" in out.result["msg"]
    )
    assert out.calls.count([LAUNCHCTL, "bootstrap", "system", str(plist)]) == 1  # no retry without a bootout


def test_sysctl_without_root_names_become(module_runner, plist):
    plist.write_bytes(daemon_bytes(AUTO))
    os.chmod(plist, 0o644)
    denied = (1, "", "sysctl: iogpu.wired_limit_mb: Operation not permitted\n")
    mac = Mac(plist, loaded=True, refuse={(SYSCTL, f"iogpu.wired_limit_mb={AUTO}"): denied})
    out = run(module_runner, plist, mac)
    assert out.failed and "become: true" in out.result["msg"] and "Operation not permitted" in out.result["msg"]


def test_a_value_that_does_not_take_fails_measured(module_runner, plist):
    class Stubborn(Mac):
        def __getitem__(self, key):
            answer = super().__getitem__(key)
            if key[0] == SYSCTL and len(key) == 2:
                self.live = 0
            return answer

    out = run(module_runner, plist, Stubborn(plist))
    assert out.failed and "wanted" in out.result["msg"], out.result


def test_a_mac_without_the_oid_is_named(module_runner, plist):
    mac = Mac(plist, refuse={LIVE: (1, "", "sysctl: unknown oid 'iogpu.wired_limit_mb'\n")})
    out = run(module_runner, plist, mac)
    assert out.failed and "has no iogpu.wired_limit_mb" in out.result["msg"] and "macOS 14" in out.result["msg"]
