"""library/mac_power.py: main() with pmset answered from captures."""

from __future__ import annotations

from tests.unit.modules.mac_commands import C_LOCALE

PMSET = "/usr/bin/pmset"
READ = (PMSET, "-g", "custom")
MINI = "pmset_g_custom_mini_never_sleeps.txt"  # sleep 0, disksleep 10, autorestart 1
LAPTOP = "pmset_g_custom_macbook_air.txt"  # AC sleep 1, disksleep 10, no autorestart
ROOT_REFUSAL = (1, "'/usr/bin/pmset' must be run as root...\n", "")


def at_defaults(read_fixture):
    """The Mac mini capture with macOS's defaults back: sleeps after 1 minute, no autorestart."""
    return (
        read_fixture(MINI)
        .replace(" sleep                0", " sleep                1")
        .replace(" autorestart          1", " autorestart          0")
    )


def run(module_runner, reads, set_answer=(0, "", ""), set_argv=None, check=False, diff=False, **args):
    """`reads`: the successive answers of `pmset -g custom` (before, and after a change)."""
    reads = list(reads)
    outcome = {"n": 0}
    commands = {}
    if set_argv:
        commands[tuple(set_argv)] = set_answer
    module_args = dict(args)
    if check:
        module_args["_ansible_check_mode"] = True
    if diff:
        module_args["_ansible_diff"] = True

    class Reads(dict):
        """`pmset -g custom` answered from `reads`, one after the other."""

        def __bool__(self):
            return True

        def __contains__(self, key):
            return key == READ or dict.__contains__(self, key)

        def __getitem__(self, key):
            if key == READ:
                outcome["n"] += 1
                return (0, reads[min(outcome["n"], len(reads)) - 1], "")
            return dict.__getitem__(self, key)

    return module_runner("mac_power", args=module_args, bins={"pmset": PMSET}, commands=Reads(commands))


SET_ALL = (PMSET, "-c", "sleep", "0", "disksleep", "0", "autorestart", "1")


def test_a_mac_at_defaults_gets_every_change_in_one_pmset_run_and_is_read_back(module_runner, read_fixture):
    fixed = read_fixture(MINI).replace(" disksleep            10", " disksleep            0")
    out = run(module_runner, [at_defaults(read_fixture), fixed], set_argv=SET_ALL, diff=True)
    assert not out.failed, out.result
    assert out.calls == [list(READ), list(SET_ALL), list(READ)]
    assert all(env == C_LOCALE for env in out.envs)
    assert out.result["changed"] is True
    assert out.result["before"] == {"sleep": 1, "disksleep": 10, "autorestart": 0}
    assert out.result["after"] == {"sleep": 0, "disksleep": 0, "autorestart": 1}
    assert out.result["cmd"] == list(SET_ALL)
    diff = out.result["diff"]
    assert " sleep                1\n" in diff["before"] and " sleep                0\n" in diff["after"]
    assert diff["before_header"] == "pmset -g custom (AC Power)"


def test_only_the_settings_that_differ_are_set(module_runner, read_fixture):
    # the mini already never sleeps and restarts: only disksleep differs
    fixed = read_fixture(MINI).replace(" disksleep            10", " disksleep            0")
    argv = (PMSET, "-c", "disksleep", "0")
    out = run(module_runner, [read_fixture(MINI), fixed], set_argv=argv)
    assert not out.failed, out.result
    assert out.calls == [list(READ), list(argv), list(READ)]
    assert out.result["changes"] == {"disksleep": {"before": 10, "after": 0}}


def test_nothing_to_do_runs_only_the_read(module_runner, read_fixture):
    out = run(module_runner, [read_fixture(MINI)], settings={"sleep": 0, "autorestart": 1})
    assert not out.failed, out.result
    assert out.calls == [list(READ)]
    assert out.result["changed"] is False and "diff" not in out.result


def test_check_mode_reports_the_diff_and_changes_nothing(module_runner, read_fixture):
    out = run(module_runner, [at_defaults(read_fixture)], check=True, diff=True)
    assert not out.failed, out.result
    assert out.calls == [list(READ)]
    assert out.result["changed"] is True
    assert out.result["after"] == {"sleep": 0, "disksleep": 0, "autorestart": 1}
    assert out.result["cmd"] is None
    assert "autorestart          1" in out.result["diff"]["after"]


def test_a_laptop_changes_ac_only_and_names_what_it_lacks(module_runner, read_fixture):
    fixed = (
        read_fixture(LAPTOP)
        .replace(" disksleep            10\nAC", "@")
        .replace(
            " sleep                1\n tcpkeepalive         1\n disksleep            10\n",
            " sleep                0\n tcpkeepalive         1\n disksleep            0\n",
        )
        .replace("@", " disksleep            10\nAC")
    )
    argv = (PMSET, "-c", "sleep", "0", "disksleep", "0")
    out = run(module_runner, [read_fixture(LAPTOP), fixed], set_argv=argv)
    assert not out.failed, out.result
    assert out.calls[1] == list(argv)  # -c: the battery settings stay as they are
    assert out.result["unsupported"] == ["autorestart"]
    assert any("no `autorestart` setting on AC power" in w for w in out.warnings)


def test_without_root_the_fix_is_become(module_runner, read_fixture):
    out = run(module_runner, [at_defaults(read_fixture)], set_argv=SET_ALL, set_answer=ROOT_REFUSAL)
    assert out.failed
    assert "must be run as root" in out.result["msg"] and "become: true" in out.result["msg"]
    assert out.result["rc"] == 1


def test_a_setting_that_does_not_take_fails_naming_it(module_runner, read_fixture):
    out = run(module_runner, [at_defaults(read_fixture), at_defaults(read_fixture)], set_argv=SET_ALL)
    assert out.failed
    assert "still reads: sleep is 1 (wanted 0)" in out.result["msg"]
    assert "configuration profile" in out.result["msg"]


def test_an_unknown_setting_is_named_before_anything_changes(module_runner, read_fixture):
    out = run(module_runner, [read_fixture(MINI)], settings={"hibernatemode": 0})
    assert out.failed
    assert "'hibernatemode' is not a pmset setting" in out.result["msg"]
    assert out.calls == [list(READ)]


def test_a_pmset_that_does_not_answer_is_named(module_runner, hang):
    out = module_runner("mac_power", args={"command_timeout": 5}, bins={"pmset": PMSET}, commands={READ: hang})
    assert out.failed
    assert "`pmset -g custom` did not answer within 5 s" in out.result["msg"]


def test_unreadable_output_names_the_command(module_runner):
    out = module_runner("mac_power", bins={"pmset": PMSET}, commands={READ: (0, "garbage\n", "")})
    assert out.failed
    assert out.result["msg"].startswith("cannot read `pmset -g custom`")
