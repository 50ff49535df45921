"""The base Python of each Mac's venv, and why a Mac's Ansible interpreter did not run."""

import pathlib

import pytest
import yaml

from ansible_collections.mlx.cluster.plugins.plugin_utils import pythons
from ansible_collections.mlx.cluster.plugins.plugin_utils.pythons import base_python, is_stub, probe_message

VERSIONS = ["3.14", "3.13", "3.12", "3.11", "3.10"]
CLT = {"path": "/usr/bin/python3", "version": "3.9.6"}


def brew(*minors):
    return [{"path": f"/opt/homebrew/bin/python{m}", "version": m, "source": "homebrew"} for m in minors]


def org(*minors):
    return [
        {
            "path": f"/Library/Frameworks/Python.framework/Versions/{m}/bin/python{m}",
            "version": m,
            "source": "python.org",
        }
        for m in minors
    ]


def facts(found):
    return {"found": found, "module": CLT}


def choose(by_host, base=""):
    return base_python(by_host, {"versions": VERSIONS, "mlx_version": "0.32.4", "base": base})


@pytest.mark.parametrize(
    "by_host,minor,paths",
    [
        pytest.param(
            {"m1": facts(brew("3.13")), "m2": facts(brew("3.13"))},
            "3.13",
            {"m1": "/opt/homebrew/bin/python3.13", "m2": "/opt/homebrew/bin/python3.13"},
            id="same-homebrew",
        ),
        pytest.param(
            {"m1": facts(brew("3.14", "3.12")), "m2": facts(brew("3.12") + org("3.14"))},
            "3.14",
            {
                "m1": "/opt/homebrew/bin/python3.14",
                "m2": "/Library/Frameworks/Python.framework/Versions/3.14/bin/python3.14",
            },
            id="newest-common-any-source",
        ),
        pytest.param(
            {"m1": facts(brew("3.13", "3.12")), "m2": facts(org("3.12"))},
            "3.12",
            {
                "m1": "/opt/homebrew/bin/python3.12",
                "m2": "/Library/Frameworks/Python.framework/Versions/3.12/bin/python3.12",
            },
            id="only-3.12-common",
        ),
        pytest.param(
            {"m1": facts(brew("3.12") + org("3.12"))},
            "3.12",
            {"m1": "/opt/homebrew/bin/python3.12"},
            id="homebrew-before-python.org",
        ),
    ],
)
def test_the_newest_version_every_mac_has(by_host, minor, paths):
    got = choose(by_host)
    assert (got["minor"], got["paths"], got["problems"]) == (minor, paths, [])
    assert f"Python {minor}" in got["message"]
    for host, path in paths.items():
        assert f"{host} {path}" in got["message"]


def test_a_mac_with_only_the_command_line_tools_python_is_named_with_the_fix():
    got = choose({"m1": facts(brew("3.13")), "m2": facts([])})
    assert got["paths"] == {}
    [p] = got["problems"]
    assert (p["severity"], p["check"], p["host"]) == ("error", "python", "m2")
    assert "m2 has no Python that mlx 0.32.4 can use" in p["msg"]
    assert "/usr/bin/python3 (3.9.6, the one Ansible runs)" in p["msg"]
    assert "brew install python@3.13" in p["fix"] and "python.org" in p["fix"]


def test_versions_that_differ_between_macs_name_the_ones_without_the_most_common():
    got = choose({"m1": facts(brew("3.13")), "m2": facts(brew("3.13")), "m3": facts(brew("3.12"))})
    [p] = got["problems"]
    assert p["host"] == "m3"
    assert "m3 has Python 3.12 but not 3.13, which m1, m2 have" in p["msg"]
    assert "brew install python@3.13" in p["fix"]


def test_a_version_the_pinned_mlx_cannot_use_is_not_chosen():
    got = base_python({"m1": facts(brew("3.9"))}, {"versions": VERSIONS, "mlx_version": "0.32.4"})
    [p] = got["problems"]
    assert "no Python that mlx 0.32.4 can use" in p["msg"] and "python3.9 (3.9)" in p["msg"]


def test_no_mac_has_one():
    got = choose({"m1": facts([]), "m2": facts([])})
    assert [p["host"] for p in got["problems"]] == ["m1", "m2"]
    assert all("brew install python@3.14" in p["fix"] for p in got["problems"])


def test_an_explicit_base_is_used_everywhere_unchecked():
    got = choose({"m1": facts([]), "m2": facts(brew("3.13"))}, base="/usr/local/bin/python3.11")
    assert got["paths"] == {"m1": "/usr/local/bin/python3.11", "m2": "/usr/local/bin/python3.11"}
    assert got["problems"] == [] and "python_env_base_python" in got["message"]


def test_missing_facts_count_as_nothing_found():
    got = choose({"m1": None, "m2": {"found": None}})
    assert [p["host"] for p in got["problems"]] == ["m1", "m2"]


GREETING = "Welcome to m2\r\n"  # what a ~/.zshenv prints, before the probe's start mark
FAILED = {
    "failed": True,
    "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error",
    "rc": 1,
    "module_stderr": "xcode-select: error: no developer tools were found, and no install could be requested "
    "(perhaps no UI is present), please install manually from 'developer.apple.com'.\n",
}


@pytest.mark.parametrize(
    "probe,expect",
    [
        pytest.param(
            {"rc": 1, "stdout": FAILED["module_stderr"], "stderr": ""},
            [
                "m2: /usr/bin/python3 is the stub macOS has until the Command Line Tools are installed",
                "xcode-select --install",
                "softwareupdate --install",
                "installondemand.in-progress",
            ],
            id="clt-stub",
        ),
        pytest.param(
            {"rc": 127, "stdout": "sh: /opt/py/bin/python3: not found\n", "stderr": ""},
            ["m2: the interpreter Ansible runs there, /usr/bin/python3, does not exist", "ansible_python_interpreter"],
            id="missing",
        ),
        pytest.param(
            {"rc": 0, "stdout": "mlx-cluster-python 3.9.6\n", "stderr": ""},
            ["m2: MODULE FAILURE: xcode-select: error: no developer tools"],
            id="runs: the module's own failure",
        ),
        pytest.param(
            {"rc": 139, "stdout": "Segmentation fault\n", "stderr": ""},
            ["does not start (exit 139: Segmentation fault)", "discovery said: MODULE FAILURE"],
            id="crashes",
        ),
        pytest.param({"unreachable": True, "msg": "timeout"}, ["m2: MODULE FAILURE"], id="probe unreachable"),
        pytest.param(
            {"rc": 139, "stdout": f"{GREETING}mlx-cluster-probe-start\r\nSegmentation fault\r\n", "stderr": ""},
            ["does not start (exit 139: Segmentation fault)"],
            id="crashes, after a login shell's greeting",
        ),
        pytest.param(
            {
                "rc": 1,
                "stdout": f"{GREETING}mlx-cluster-probe-start\nxcode-select: error: no developer tools were found\n",
            },
            ["is the stub macOS has", "(it says: xcode-select: error: no developer tools were found)"],
            id="the stub, after a login shell's greeting",
        ),
    ],
)
def test_the_probe_names_the_cause(probe, expect):
    msg = probe_message(FAILED, probe, "m2", "/usr/bin/python3")
    for text in expect:
        assert text in msg
    assert "Welcome" not in msg


def test_a_greeting_is_not_the_interpreters_words():
    """What a ~/.zshenv prints before the probe's start mark says nothing of the interpreter: a
    greeting that mentions "not found" or xcode-select does not make a missing Python or a stub."""
    out = "xcode-select not found in this greeting\nmlx-cluster-probe-start\nmlx-cluster-python 3.9.6\n"
    assert is_stub(out) is False
    assert probe_message(FAILED, {"rc": 0, "stdout": out}, "m2", "/usr/bin/python3").startswith("m2: MODULE FAILURE")
    crash = {"rc": 134, "stdout": "xcode-select not found\nmlx-cluster-probe-start\nAbort trap: 6\n"}
    assert "does not start (exit 134: Abort trap: 6)" in probe_message(FAILED, crash, "m2", "/usr/bin/python3")


def test_a_failure_that_is_not_a_module_failure_keeps_its_message():
    msg = probe_message(
        {"failed": True, "msg": "cannot read `sw_vers`: no ProductVersion"},
        {"rc": 0, "stdout": "mlx-cluster-python 3.9.6"},
        "m1",
        "/usr/bin/python3",
    )
    assert msg == "m1: cannot read `sw_vers`: no ProductVersion"


@pytest.mark.parametrize(
    "output,stub",
    [
        (FAILED["module_stderr"], True),
        ("mlx-cluster-python 3.9.6\n", False),
        ("mlx-cluster-python 3.9.6\nxcode-select: note: something else\n", False),
        ("sh: 1: /usr/bin/python3: not found\n", False),
        ("", False),
        (None, False),
    ],
)
def test_the_stub_is_told_from_a_python(output, stub):
    assert is_stub(output) is stub


def test_without_a_pin_the_message_names_mlx_alone():
    [p] = base_python({"m1": facts([])}, {"versions": ["3.13"]})["problems"]
    assert p["msg"].startswith("m1 has no Python that mlx can use (3.13) in /opt/homebrew/bin"), p["msg"]


HASH_REFUSAL = (
    "Looking in indexes: http://10.0.0.1:3141/simple\nCollecting mdurl==0.1.2\n"
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the "
    "package versions, please update the hashes.\n    mdurl==0.1.2 from http://10.0.0.1:3141/mdurl.whl:\n"
    "        Expected sha256 aaaa\n             Got        bbbb\n"
)


def test_a_pip_hash_refusal_names_the_mac_the_file_and_the_lock():
    msg = pythons.install_message(
        "m2", "/srv/admin/mlx-cluster/venv", {"rc": 1, "stderr": HASH_REFUSAL}, "http://10.0.0.1:3141/simple"
    )
    assert msg.startswith("m2: pip could not install into the venv /srv/admin/mlx-cluster/venv (exit 1): ERROR: THESE")
    assert "Looking in indexes" not in msg and "mdurl==0.1.2" in msg and "Got bbbb" in msg
    assert "Fix: a file on http://10.0.0.1:3141/simple differs from the one the lock was made from" in msg


@pytest.mark.parametrize(
    "source, fix",
    [
        ("", "check that m1 reaches pip's own index (or set python_env_pip_index_url"),
        ("https://mirror.lab/simple", "check that m1 reaches https://mirror.lab/simple (or set"),
        ("wheelhouse", "the wheels the controller downloaded do not cover this Mac: check python_env_wheel_platforms"),
    ],
)
def test_pip_that_finds_nothing_gets_the_fix_of_where_it_looked(source, fix):
    said = "ERROR: Could not find a version that satisfies the requirement mlx==0.32.4 (from versions: none)\n"
    msg = pythons.install_message("m1", "/v", {"rc": 1, "stderr": said}, source)
    assert "(exit 1): ERROR: Could not find a version that satisfies the requirement mlx==0.32.4" in msg
    assert f"Fix: {fix}" in msg


def test_pips_error_is_cut_short_and_a_silent_pip_said_so():
    msg = pythons.install_message("m1", "/v", {"rc": 2, "stderr": "ERROR: " + "x" * 5000}, "")
    assert len(msg) < pythons.PIP_ERROR_CHARS + 400 and "x [...]. Fix:" in msg
    assert "(exit -9): no output. Fix:" in pythons.install_message("m1", "/v", {"rc": -9}, "")
    assert "(exit None): no output" in pythons.install_message("m1", "/v", None, "")


@pytest.mark.parametrize(
    "stdout, expected",
    [
        pytest.param('{"mlx": "0.32.4"}\n', {"mlx": "0.32.4"}, id="alone"),
        # a login shell that prints (~/.zshenv) comes first in a script's output over ssh
        pytest.param(
            'Welcome to m1\n{"mlx": "0.32.4", "in_place": true}\n\n', {"mlx": "0.32.4", "in_place": True}, id="greeting"
        ),
        pytest.param("Welcome to m1\n", None, id="no-json"),
        pytest.param('{"mlx": \n', None, id="cut-short"),
        pytest.param('["a list"]\n', None, id="not-an-object"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="none"),
    ],
)
def test_script_json_reads_the_scripts_last_line(stdout, expected):
    assert pythons.script_json(stdout) == expected


def test_the_roles_probe_prints_the_marks_the_parser_reads():
    """The probe task and pythons.py name the same marks: the start mark echoed before the
    interpreter runs, the interpreter's own mark after."""
    path = pathlib.Path(__file__).resolve().parents[3] / "roles" / "mlx_cluster" / "tasks" / "probe_python.yml"
    [task] = yaml.safe_load(path.read_text())
    command = task["ansible.builtin.raw"]
    assert command.startswith(f"echo {pythons.PROBE_START}; ")
    assert pythons.PROBE_MARK in command.split(";", 1)[1]
