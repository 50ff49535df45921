#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_port_probe
short_description: Probe the TCP ports MLX's ranks use on a Mac, and read its application firewall
description:
  - "I(state=listen): starts a short-lived listener on each I(listen) address and port, run by
    I(python), the interpreter the ranks run (the macOS application firewall judges each
    application, so only that interpreter's listener meets what the ranks will meet). The
    listener runs detached, in a session of its own, answers each probe and ends by itself after
    I(deadline) seconds; its argv carries I(run_id), so M(mlx.cluster.mlx_run_cleanup) ends it
    earlier by PID. Also reads the application firewall: C(socketfilterfw --getglobalstate
    --getblockall --getstealthmode --getallowsigned) and C(--getappblocked) for the application
    the interpreter runs as (a framework build's C(Python.app))."
  - "I(state=connect): connects to each of I(targets) (bounded by I(timeout) seconds, all at
    once), sends a token and waits for the listener's answer: a connection the kernel accepts
    and the firewall then resets is not a success."
  - "With I(launchd_user), the same connects run a second time as a launchd job, the way the
    server's ranks run (role mlx_server, C(mlx_server_supervisor=launchd)): a LaunchDaemon run
    once by I(python) as I(launchd_user), loaded with C(launchctl bootstrap system <plist>)
    (the plist from the server's own writer, module_utils/mlx_server.py launchd_plist), so a
    refusal that only a launchd-started process meets (macOS Local Network privacy, reported on
    macOS 26 and 27 for interpreters without an app bundle) is seen before the server starts.
    The job runs the probe's own code (module_utils/mlx_port_connect.py, written beside the plist
    in a private directory under C(/tmp)) and writes its results there; the module waits for
    them at most I(timeout) plus a margin, then always boots the job out and removes the
    directory, whatever happened. Needs root (become), as the server's launchd tasks do."
  - The module never fails on what it finds. It returns it (a port in use, an address not on
    this Mac, a connect that timed out), for the controller to word one message naming both
    Macs, the port, the cause and the fix (filter C(mlx.cluster.mlx_port_problems)).
  - Changes nothing that lasts (the launchd job is booted out and its files removed before the
    module returns); runs in check mode as well.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  state:
    description: Which side of the probe this run is.
    type: str
    choices: [listen, connect]
    required: true
  python:
    description: >-
      The interpreter the ranks run (C(python_env_python)); with I(state=listen), and with
      I(state=connect) when I(launchd_user) is set (the launchd job's program).
    type: path
  run_id:
    description: The probe's unique id (at least 16 characters), in the listener's argv.
    type: str
  listen:
    description: The addresses and ports this Mac's ranks listen on (C(address), C(port)).
    type: list
    elements: dict
    default: []
  deadline:
    description: Seconds after which the listener ends by itself.
    type: int
    default: 120
  targets:
    description: What this Mac connects to (C(host), C(address), C(port), C(role)); with I(state=connect).
    type: list
    elements: dict
    default: []
  token:
    description: The token sent to, and expected back from, the listeners.
    type: str
  timeout:
    description: Seconds each connect, and the answer after it, may take.
    type: int
    default: 5
  launchd_user:
    description: >-
      With I(state=connect): also connect as a launchd job run by I(python) as this user (the
      server's C(UserName)). Unset: the connects run in the module only (over ssh).
    type: str
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Listen where this Mac's ranks will
  mlx.cluster.mlx_port_probe:
    state: listen
    python: "{{ python_env_python }}"
    run_id: "{{ port_check_run_id }}"
    listen: [{address: 10.208.0.1, port: 32323}]

- name: Connect where this Mac's ranks will
  mlx.cluster.mlx_port_probe:
    state: connect
    token: "{{ port_check_run_id }}"
    targets: [{host: m1, address: 10.208.0.1, port: 32323, role: ring}]

- name: Connect over ssh, then as a launchd job, as the server's ranks will
  mlx.cluster.mlx_port_probe:
    state: connect
    token: "{{ port_check_run_id }}"
    targets: [{host: m1, address: 10.208.0.1, port: 42323, role: ring}]
    python: "{{ python_env_python }}"
    launchd_user: admin
  become: true
"""

RETURN = r"""
listener:
  description: With I(state=listen), what the listener said, or why it did not start (C(error)).
  returned: state is listen
  type: dict
  sample: {"pid": 4242, "executable": "/opt/homebrew/.../Python", "bound": [["10.208.0.1", 32323]],
           "errors": [{"address": "10.208.0.1", "port": 32324, "errno": 48, "error": "EADDRINUSE",
                       "text": "Address already in use"}], "error": null}
alf:
  description: >-
    With I(state=listen), the application firewall's state (C(enabled), C(state), C(block_all),
    C(stealth), C(allow_signed), C(allow_signed_downloaded)), C(app) (blocked, permitted,
    not_listed or null) for C(app_path), C(summary); null where C(socketfilterfw) is absent.
  returned: state is listen
  type: dict
  sample: {"enabled": true, "state": 1, "block_all": false, "stealth": true, "allow_signed": true,
           "allow_signed_downloaded": false, "app": "blocked",
           "app_path": "/opt/homebrew/.../Python.app", "summary": "on (stealth, interpreter blocked)"}
results:
  description: With I(state=connect), one entry per target.
  returned: state is connect
  type: list
  elements: dict
  sample: [{"host": "m1", "address": "10.208.0.1", "port": 32323, "role": "ring", "result": "timeout",
            "errno": null, "error": "timeout", "seconds": 5.0}]
launchd:
  description: >-
    With I(state=connect) and I(launchd_user), what the launchd job found: C(results) as
    C(results) (empty when it did not run), C(error) (why it did not run or wrote nothing:
    null when it did), C(label), C(user), C(python), C(executable) (the interpreter it ran, its
    real path), C(seconds); null without I(launchd_user).
  returned: state is connect
  type: dict
  sample: {"label": "org.mlx-cluster.port-probe.3f9a0c2d41be", "user": "admin",
           "python": "/Users/admin/mlx-cluster/venv/bin/python", "executable": "/opt/homebrew/.../Python",
           "error": null, "seconds": 1.2,
           "results": [{"host": "m1", "address": "10.208.0.1", "port": 42323, "role": "ring",
                        "result": "unreachable", "errno": 65, "error": "EHOSTUNREACH", "seconds": 0.002}]}
"""

import inspect
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_port_connect
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_port_connect import probe_all
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import (
    ALF_DIR,
    ALF_GETTERS,
    LISTENER,
    alf_summary,
    app_bundle,
    listener_argv,
    parse_alf,
    parse_app_blocked,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    CommandTimeout,
    Runner,
    command_text,
    first_line,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import (
    launchd_plist,
    open_nofollow,
    parse_launchctl_print,
)

# The launchd job: its label (a new one per run, never one a server or another probe holds),
# the directory its files live in while it runs (tests point it elsewhere), and the seconds it
# gets beyond its connects' own bound (the interpreter's start; launchd's spawn).
LAUNCHD_PREFIX = "org.mlx-cluster.port-probe"
LAUNCHD_TMP = "/tmp"
LAUNCHD_MARGIN = 15
# what the module reads of the job's files, at most
MAX_READ = 1 << 20
# `launchctl bootout` of a job launchd no longer holds: 3 (No such process), 113 (not found)
GONE = (3, 113)


def start_listener(python, run_id, deadline, pairs, wait):
    """Start the detached listener; -> what it printed (dict) or {"error": why}."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return {"error": f"the interpreter {python} does not exist on this Mac", "bound": [], "errors": []}
    argv = listener_argv(python, run_id, deadline, pairs)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
            cwd="/",
        )
        proc.stdin.write(LISTENER.encode())
        proc.stdin.close()
    except OSError as exc:
        return {"error": f"{python} could not be started: {exc}", "bound": [], "errors": []}
    line = first_line(proc, wait)
    try:
        said = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        stderr = ""
        if proc.poll() is not None:
            stderr = proc.stderr.read().decode("utf-8", "replace").strip()[-400:]
        else:
            proc.kill()
        proc.stderr.close()
        return {
            "error": f"the listener ({python}) did not start within {wait} s" + (f": {stderr}" if stderr else ""),
            "bound": [],
            "errors": [],
        }
    proc.stderr.close()
    said["error"] = None
    return said


def read_alf(module, runner, executable):
    tool = module.get_bin_path("socketfilterfw", opt_dirs=[ALF_DIR])
    if tool is None:
        return None
    try:
        rc, out, err = runner.run([tool, *ALF_GETTERS])
    except (CommandTimeout, OSError) as exc:
        module.warn(f"the application firewall's state is unknown: {exc}")
        return None
    alf = parse_alf(out)
    alf.update(app=None, app_path=None)
    if executable:
        alf["app_path"] = app_bundle(executable)
        try:
            rc, out, err = runner.run([tool, "--getappblocked", alf["app_path"]])
            alf["app"] = parse_app_blocked(out + err)
        except (CommandTimeout, OSError) as exc:
            module.warn(f"whether the firewall blocks {alf['app_path']} is unknown: {exc}")
    alf["summary"] = alf_summary(alf)
    return alf


# ---------------------------------------------------------------------------------------------
# the connects as a launchd job (launchd_user): run as the server's ranks run
# ---------------------------------------------------------------------------------------------


def _said(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()[:300]
    return "no output"


def _read_tail(path, limit=600):
    """The end of the job's log (its interpreter's errors)."""
    try:
        with open_nofollow(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _read_results(path):
    """The job's results file ({results, executable, pid}) once it is complete, else None. The
    job writes it under another name and renames it into place; no more than MAX_READ bytes
    are read."""
    try:
        with open_nofollow(path, "rb") as f:
            data = f.read(MAX_READ + 1)
    except OSError:
        return None
    try:
        said = json.loads(data.decode("utf-8", "replace")) if len(data) <= MAX_READ else None
    except ValueError:
        said = None
    if not isinstance(said, dict) or not isinstance(said.get("results"), list):
        return {"malformed": True}
    return said


def write_job(base, label, python, pw, targets, token, timeout):
    """The job's files in `base` (root's, 0711): the probe's program (this module's own
    mlx_port_connect, as its source), what it connects to, the plist (root:wheel, 0644), and
    `out/` (the user's, 0700) for its results and log. -> {name: path}."""
    out_dir = os.path.join(base, "out")
    paths = {
        "program": os.path.join(base, "mlx_port_connect.py"),
        "targets": os.path.join(base, "targets.json"),
        "plist": os.path.join(base, label + ".plist"),
        "out": out_dir,
        "results": os.path.join(out_dir, "results.json"),
        "log": os.path.join(out_dir, "probe.log"),
    }
    os.chmod(base, 0o711)
    plist = launchd_plist(
        label,
        [python, paths["program"], paths["targets"], paths["results"]],
        user=pw.pw_name,
        home=pw.pw_dir,
        workdir=out_dir,
        log=paths["log"],
        exit_timeout=5,
        keep_alive=False,
        comment="Written by mlx-cluster (module mlx_port_probe): the port probe as the server's ranks run, "
        "removed when the probe ends",
    )
    for key, text in (
        ("program", inspect.getsource(mlx_port_connect)),
        ("targets", json.dumps({"token": token, "timeout": timeout, "targets": targets})),
        ("plist", plist),
    ):
        with open(paths[key], "w") as f:
            f.write(text)
        os.chmod(paths[key], 0o644)
        if os.geteuid() == 0:
            os.chown(paths[key], 0, 0)  # launchd loads a plist of root:wheel only
    os.mkdir(out_dir, 0o700)
    os.chown(out_dir, pw.pw_uid, pw.pw_gid)
    return paths


def wait_for_job(runner, launchctl, label, paths, bound):
    """(the job's results or None, why there are none): polls its results file until `bound`
    seconds have passed, and asks launchd once a second whether the job ended without them."""
    deadline = time.monotonic() + bound
    next_look = time.monotonic() + 1.0
    while True:
        said = _read_results(paths["results"])
        if said is not None:
            return (None, "its results file is not the probe's JSON") if said.get("malformed") else (said, None)
        now = time.monotonic()
        if now >= deadline:
            tail = _read_tail(paths["log"])
            return None, f"it wrote no results within {bound} s" + (f"; its log ends: {tail}" if tail else "")
        if now >= next_look:
            next_look = now + 1.0
            try:
                rc, out, _err = runner.run([launchctl, "print", f"system/{label}"], timeout=max(1.0, deadline - now))
            except (CommandTimeout, OSError):
                rc, out = 1, ""
            job = parse_launchctl_print(out if rc == 0 else "")
            if job["loaded"] and job["state"] != "running" and isinstance(job["last_exit_code"], int):
                said = _read_results(paths["results"])  # written just before it exited
                if said is not None and not said.get("malformed"):
                    return said, None
                tail = _read_tail(paths["log"])
                return None, f"it ended (exit code {job['last_exit_code']}) without results" + (
                    f"; its log ends: {tail}" if tail else ""
                )
        time.sleep(0.1)


def bootout(module, runner, launchctl, label):
    """The job out of launchd, whatever state it is in (launchd ends what still runs of it)."""
    argv = [launchctl, "bootout", f"system/{label}"]
    try:
        rc, out, err = runner.run(argv)
    except (CommandTimeout, OSError) as exc:
        rc, out, err = None, "", str(exc)
    if rc not in (0, *GONE):
        module.warn(
            f"`{command_text(argv)}` did not unload the port probe's launchd job on this Mac "
            f"(exit {rc}: {_said(err, out)}): run it with sudo"
        )


def launchd_connect(module, runner, python, user, targets, token, timeout):
    """The connects again, as a launchd job: `python` runs the probe as `user`, started by
    `launchctl bootstrap system <plist>`, as the server's ranks are. -> {label, user, python,
    executable, results, error, seconds}. Whatever happens, the job is booted out and its files
    removed before this returns."""
    import pwd

    start = time.monotonic()
    out = {"label": None, "user": user, "python": python, "executable": None, "results": [], "error": None}
    launchctl = module.get_bin_path("launchctl")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        pw = None
    if launchctl is None:
        out["error"] = "launchctl is not on this Mac"
    elif pw is None:
        out["error"] = f"there is no user {user} on this Mac"
    elif not (os.path.isfile(python) and os.access(python, os.X_OK)):
        out["error"] = f"the interpreter {python} does not exist on this Mac"
    if out["error"]:
        out["seconds"] = 0.0
        return out
    label = out["label"] = f"{LAUNCHD_PREFIX}.{uuid.uuid4().hex[:12]}"
    base = tempfile.mkdtemp(prefix=label + ".", dir=LAUNCHD_TMP)
    try:
        paths = write_job(base, label, python, pw, targets, token, timeout)
        argv = [launchctl, "bootstrap", "system", paths["plist"]]
        rc, o, e = runner.run(argv)
        if rc != 0:
            out["error"] = f"`{command_text(argv)}` exited {rc}: {_said(e, o)}"
        else:
            said, why = wait_for_job(runner, launchctl, label, paths, timeout + LAUNCHD_MARGIN)
            out["error"] = f"the launchd job {label}: {why}" if why else None
            if said:
                out["results"] = [r for r in said["results"] if isinstance(r, dict)]
                out["executable"] = said.get("executable")
    except CommandTimeout as exc:
        out["error"] = exc.reason
    except OSError as exc:
        out["error"] = f"the launchd job could not be set up on this Mac: {exc}"
    finally:
        bootout(module, runner, launchctl, label)
        shutil.rmtree(base, ignore_errors=True)
    out["seconds"] = round(time.monotonic() - start, 2)
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["listen", "connect"], required=True),
            python=dict(type="path"),
            run_id=dict(type="str"),
            listen=dict(type="list", elements="dict", default=[]),
            deadline=dict(type="int", default=120),
            targets=dict(type="list", elements="dict", default=[]),
            token=dict(type="str", no_log=False),
            timeout=dict(type="int", default=5),
            launchd_user=dict(type="str"),
            **COMMAND_TIMEOUT_SPEC,
        ),
        required_if=[("state", "listen", ("python", "run_id")), ("state", "connect", ("token",))],
        required_by={"launchd_user": "python"},
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "listen":
        if len(p["run_id"]) < 16:
            module.fail_json(
                msg="run_id must be a unique id of at least 16 characters (it selects the listener to end)"
            )
        pairs = [(str(e["address"]), int(e["port"])) for e in p["listen"]]
        listener = {"error": None, "bound": [], "errors": [], "executable": None, "pid": None}
        if pairs:
            listener = start_listener(p["python"], p["run_id"], p["deadline"], pairs, p["command_timeout"])
        executable = listener.get("executable") or (
            os.path.realpath(p["python"]) if os.path.exists(p["python"]) else None
        )
        alf = read_alf(module, Runner(p["command_timeout"]), executable)
        module.exit_json(changed=False, listener=listener, alf=alf)

    results = probe_all(p["targets"], p["token"], p["timeout"])
    launchd = None
    if p["launchd_user"]:
        launchd = launchd_connect(
            module, Runner(p["command_timeout"]), p["python"], p["launchd_user"], p["targets"], p["token"], p["timeout"]
        )
    module.exit_json(changed=False, results=results, launchd=launchd)


if __name__ == "__main__":
    main()
