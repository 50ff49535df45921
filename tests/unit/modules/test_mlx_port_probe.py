"""library/mlx_port_probe.py: main() with a real listener on loopback (this machine's
interpreter) and socketfilterfw answered from captures."""

from __future__ import annotations

import os
import plistlib
import pwd
import signal
import socket
import subprocess
import sys
import time

import pytest

SFW = "/usr/libexec/ApplicationFirewall/socketfilterfw"
GETTERS = (SFW, "--getglobalstate", "--getblockall", "--getstealthmode", "--getallowsigned")
RUN_ID = "unit-test-run-id-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ended():
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_listen_starts_the_interpreters_listener_and_reads_the_firewall_then_connect_gets_its_answer(
    module_runner, read_fixture, ended
):
    port = free_port()
    exe = os.path.realpath(sys.executable)
    commands = {
        GETTERS: (0, read_fixture("socketfilterfw_getters_on_stealth.txt"), ""),
        (SFW, "--getappblocked", exe): (0, f"Incoming connection to {exe} is blocked \n", ""),
    }
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": SFW},
        commands=commands,
        args={
            "state": "listen",
            "python": sys.executable,
            "run_id": RUN_ID,
            "deadline": 30,
            "listen": [{"address": "127.0.0.1", "port": port, "host": "m1", "peers": ["m2"]}],
        },
    )
    assert not out.failed, out.result
    listener = out.result["listener"]
    ended.append(listener["pid"])
    assert listener["bound"] == [["127.0.0.1", port]] and listener["errors"] == [] and listener["error"] is None
    assert listener["executable"] == exe
    assert out.result["alf"] == {
        "enabled": True,
        "state": 1,
        "block_all": False,
        "stealth": True,
        "allow_signed": True,
        "allow_signed_downloaded": False,
        "app": "blocked",
        "app_path": exe,
        "summary": "on (stealth, interpreter blocked)",
    }
    assert out.result["changed"] is False

    got = module_runner(
        "mlx_port_probe",
        args={
            "state": "connect",
            "token": RUN_ID,
            "timeout": 3,
            "targets": [
                {"host": "m1", "address": "127.0.0.1", "port": port, "role": "ring"},
                {"host": "m1", "address": "127.0.0.1", "port": free_port(), "role": "ring"},
            ],
        },
    )
    assert not got.failed, got.result
    assert [(r["host"], r["result"]) for r in got.result["results"]] == [("m1", "ok"), ("m1", "refused")]


def test_without_socketfilterfw_the_firewall_is_unknown_and_a_missing_interpreter_is_said(module_runner):
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": None},
        args={
            "state": "listen",
            "python": "/nonexistent/venv/bin/python",
            "run_id": RUN_ID,
            "listen": [{"address": "127.0.0.1", "port": 32323}],
        },
    )
    assert not out.failed, out.result
    assert out.result["alf"] is None
    assert out.result["listener"]["error"] == "the interpreter /nonexistent/venv/bin/python does not exist on this Mac"


def test_a_firewall_that_does_not_answer_is_a_warning_not_a_hang(module_runner, hang):
    out = module_runner(
        "mlx_port_probe",
        bins={"socketfilterfw": SFW},
        commands={GETTERS: hang},
        args={"state": "listen", "python": sys.executable, "run_id": RUN_ID, "listen": []},
    )
    assert not out.failed, out.result
    assert out.result["alf"] is None
    assert any("application firewall's state is unknown" in w for w in out.warnings), out.result


def test_a_short_run_id_is_refused(module_runner):
    out = module_runner("mlx_port_probe", args={"state": "listen", "python": sys.executable, "run_id": "short"})
    assert out.failed and "at least 16 characters" in out.result["msg"]


# ---- the connects as a launchd job (launchd_user), launchctl answered by a stand-in ---------

LAUNCHCTL = "/bin/launchctl"


class FakeLaunchd:
    """launchctl for one probe: `bootstrap system <plist>` reads the plist the module wrote and,
    as launchd would (`how` "run"), runs its ProgramArguments now, in its working directory,
    output to its log; "refuse": launchd refuses the plist; "silent": loaded, but the program
    never writes anything (stuck); "fifo": the same, a FIFO where its results go; "crash":
    loaded, the program exits 1 at once with a
    traceback in its log. `print` and `bootout` answer from that state."""

    def __init__(self, how):
        self.how, self.plist, self.proc, self.loaded, self.calls = how, None, None, False, []

    def __call__(self, argv):
        assert argv[0] == LAUNCHCTL, argv
        self.calls.append(argv[1:])
        verb = argv[1]
        if verb == "bootstrap":
            assert argv[2] == "system"
            path = argv[3]
            st = os.stat(path)
            assert st.st_mode & 0o777 == 0o644 and (st.st_uid, st.st_gid) == (0, 0), oct(st.st_mode)
            with open(path, "rb") as f:
                self.plist = plistlib.load(f)
            if self.how == "refuse":
                return 5, "", "Bootstrap failed: 5: Input/output error\n"
            self.loaded = True
            if self.how == "run":
                with open(self.plist["StandardOutPath"], "ab") as log:
                    self.proc = subprocess.Popen(
                        self.plist["ProgramArguments"],
                        cwd=self.plist["WorkingDirectory"],
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    )
            elif self.how == "fifo":  # what the job's user could leave where the results go
                os.mkfifo(self.plist["ProgramArguments"][3])
            elif self.how == "crash":
                with open(self.plist["StandardErrorPath"], "a") as log:
                    log.write("Traceback (most recent call last):\nImportError: no module named json\n")
            return 0, "", ""
        label = argv[2].split("/", 1)[1]
        if verb == "print":
            if not self.loaded or label != self.plist["Label"]:
                return 113, "", f'Could not find service "{label}" in domain for system\n'
            running = self.how in ("silent", "fifo") or (self.proc is not None and self.proc.poll() is None)
            code = 1 if self.how == "crash" else (self.proc.returncode if self.proc else "(never exited)")
            state = "running" if running else "not running"
            return 0, f"system/{label} = {{\n\tstate = {state}\n\tlast exit code = {code}\n}}\n", ""
        if verb == "bootout":
            if not self.loaded:
                return 3, "", "Boot-out failed: 3: No such process\n"
            self.loaded = False
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            return 0, "", ""
        raise AssertionError(argv)


@pytest.fixture
def loopback_listener():
    """The probe's real listener on a loopback port (its argv, its program on stdin)."""
    from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import LISTENER, listener_argv

    port = free_port()
    proc = subprocess.Popen(
        listener_argv(sys.executable, RUN_ID, 30, [("127.0.0.1", port)]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    proc.stdin.write(LISTENER.encode())
    proc.stdin.close()
    proc.stdout.readline()
    yield port
    proc.kill()
    proc.wait()


def connect_as_launchd(module_runner, tmp_path, fake, targets, timeout=3, margin=15):
    return module_runner(
        "mlx_port_probe",
        bins={"launchctl": LAUNCHCTL},
        commands=fake,
        module_attrs={"LAUNCHD_TMP": str(tmp_path), "LAUNCHD_MARGIN": margin},
        args={
            "state": "connect",
            "token": RUN_ID,
            "timeout": timeout,
            "targets": targets,
            "python": sys.executable,
            "launchd_user": pwd.getpwuid(os.getuid()).pw_name,
        },
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the module writes the plist root:wheel, as launchd wants it")
def test_the_launchd_job_runs_the_probe_as_the_ranks_will_and_is_booted_out_and_removed(
    module_runner, tmp_path, loopback_listener
):
    fake = FakeLaunchd("run")
    targets = [
        {"host": "m1", "address": "127.0.0.1", "port": loopback_listener, "role": "ring"},
        {"host": "m1", "address": "127.0.0.1", "port": free_port(), "role": "ring"},
    ]
    out = connect_as_launchd(module_runner, tmp_path, fake, targets)
    assert not out.failed, out.result
    launchd = out.result["launchd"]
    assert launchd["error"] is None, launchd
    # the very same verdicts as over ssh (one probe, run both ways)
    got = [(r["host"], r["port"], r["result"]) for r in launchd["results"]]
    assert got == [(r["host"], r["port"], r["result"]) for r in out.result["results"]]
    assert got == [("m1", targets[0]["port"], "ok"), ("m1", targets[1]["port"], "refused")]
    assert launchd["executable"] == os.path.realpath(sys.executable)
    # the job as the server's ranks run: the ranks' interpreter, the server's user, run once
    plist = fake.plist
    assert plist["Label"] == launchd["label"] and plist["Label"].startswith("org.mlx-cluster.port-probe.")
    assert plist["ProgramArguments"][0] == sys.executable
    assert plist["ProgramArguments"][1].endswith("/mlx_port_connect.py")
    assert plist["UserName"] == pwd.getpwuid(os.getuid()).pw_name and plist["RunAtLoad"] is True
    assert "KeepAlive" not in plist
    # booted out, nothing left loaded or running, every file removed
    assert [c[0] for c in fake.calls][0] == "bootstrap" and fake.calls[-1] == ["bootout", f"system/{plist['Label']}"]
    assert not fake.loaded and fake.proc.poll() is not None
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the module writes the plist root:wheel, as launchd wants it")
@pytest.mark.parametrize(
    "how, error",
    [
        ("refuse", "`launchctl bootstrap system {base}/{label}.plist` exited 5: Bootstrap failed: 5"),
        ("crash", "the launchd job {label}: it ended (exit code 1) without results; its log ends: Traceback"),
        ("silent", "the launchd job {label}: it wrote no results within 2 s"),
        ("fifo", "the launchd job {label}: it wrote no results within 2 s"),  # read by root: never blocks
    ],
)
def test_a_launchd_job_that_does_not_report_is_named_booted_out_and_removed_within_the_bound(
    module_runner, tmp_path, how, error
):
    fake = FakeLaunchd(how)
    targets = [{"host": "m1", "address": "127.0.0.1", "port": free_port(), "role": "ring"}]
    t0 = time.monotonic()
    out = connect_as_launchd(module_runner, tmp_path, fake, targets, timeout=1, margin=1)
    took = time.monotonic() - t0
    assert not out.failed, out.result  # the module reports; the controller words the verdict
    launchd = out.result["launchd"]
    label = launchd["label"]
    base = os.path.dirname(fake.calls[0][2])
    assert launchd["error"].startswith(error.format(base=base, label=label)), launchd["error"]
    assert launchd["results"] == []
    assert out.result["results"][0]["result"] == "refused"  # over ssh, as before
    assert took < 2 + 1 + 2, took  # the bound (timeout + margin), the ssh connect, slack
    assert fake.calls[-1] == ["bootout", f"system/{label}"] and not fake.loaded
    assert os.listdir(tmp_path) == []


def test_launchd_user_needs_the_interpreter(module_runner):
    out = module_runner(
        "mlx_port_probe",
        args={"state": "connect", "token": RUN_ID, "targets": [], "launchd_user": "admin"},
    )
    assert out.failed and "python" in out.result["msg"], out.result


def test_a_missing_user_or_interpreter_is_said_without_loading_anything(module_runner, tmp_path):
    def launchctl(argv):
        raise AssertionError(f"nothing is loaded: {argv}")

    for user, python, said in (
        ("no-such-user-mlx", sys.executable, "there is no user no-such-user-mlx on this Mac"),
        (pwd.getpwuid(os.getuid()).pw_name, "/nonexistent/bin/python", "the interpreter /nonexistent/bin/python"),
    ):
        out = module_runner(
            "mlx_port_probe",
            bins={"launchctl": LAUNCHCTL},
            commands=launchctl,
            module_attrs={"LAUNCHD_TMP": str(tmp_path)},
            args={"state": "connect", "token": RUN_ID, "targets": [], "launchd_user": user, "python": python},
        )
        assert not out.failed, out.result
        assert out.result["launchd"]["error"].startswith(said), out.result
    assert os.listdir(tmp_path) == []


def test_without_launchd_user_there_is_no_launchd_job(module_runner):
    out = module_runner("mlx_port_probe", args={"state": "connect", "token": RUN_ID, "targets": []})
    assert not out.failed and out.result["launchd"] is None and out.result["results"] == []
