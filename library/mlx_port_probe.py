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
  - The module never fails on what it finds. It returns it (a port in use, an address not on
    this Mac, a connect that timed out), for the controller to word one message naming both
    Macs, the port, the cause and the fix (filter C(mlx.cluster.mlx_port_problems)).
  - Changes nothing that lasts; runs in check mode as well.
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
    description: The interpreter the ranks run (C(python_env_python)); with I(state=listen).
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
"""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import (
    ALF_DIR,
    ALF_GETTERS,
    LISTENER,
    alf_summary,
    app_bundle,
    connect_probe,
    listener_argv,
    parse_alf,
    parse_app_blocked,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    CommandTimeout,
    Runner,
    first_line,
)


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
            **COMMAND_TIMEOUT_SPEC,
        ),
        required_if=[("state", "listen", ("python", "run_id")), ("state", "connect", ("token",))],
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

    def probe(target):
        out = dict(host=target.get("host"), role=target.get("role"))
        out.update(connect_probe(str(target["address"]), int(target["port"]), p["token"], p["timeout"]))
        return out

    with ThreadPoolExecutor(max_workers=max(1, len(p["targets"]))) as pool:
        results = list(pool.map(probe, p["targets"]))
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
