#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: model_receive
short_description: Receive a model over a Thunderbolt cable, without ssh (model_sync's own transport)
description:
  - "O(state=started): settles what of O(files) is already in O(path) (a file whose size and time
    match the directory's record of verified files is taken as it is; a file of the right size
    with no record is hashed once), checks that the rest fits on the disk, then starts a receiver
    detached from the module, listening on each of O(addresses) (this Mac's ends of the cables its
    senders use, never all addresses) at a port the kernel picks, and returns that port. The
    receiver accepts only senders that present O(token), writes only the files of O(files), only
    below O(path), each under a temporary name renamed once its sha256 matches, and ends by itself
    once every file is in place, when no sender is connected for O(idle_timeout) seconds, or when a
    connection stalls for O(stall_timeout) seconds. In check mode nothing is started: RV(todo)
    lists what the copy would bring."
  - "With O(report), a sender that reports for this Mac (M(mlx.cluster.model_send)
    O(mlx.cluster.model_send#module:report)) gets the receiver's result once every file is in
    place, the comparison with the source included (the weight files the source does not have,
    listed when the receiver starts); the receiver then ends and leaves no status behind, so
    O(state=finished) is needed only where that sender did not get it
    (RV(mlx.cluster.model_send#module:received) empty)."
  - "O(state=finished): waits up to O(wait) seconds for this directory's receiver to end, ends
    it (by PID, only while its arguments still name O(run_id)) when it has not, and returns what it
    received. Nothing listens afterwards. Problems (a file that arrived damaged, a full disk, a
    stalled connection, a stranger refused) are returned, not failed on: the caller words them.
    With O(expected), it also lists the directory (sizes, no file read) and compares it with the
    source the way M(mlx.cluster.model_manifest) does (RV(compare)), so no second module run is needed."
  - M(mlx.cluster.model_send) is the other end.
version_added: "0.2.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  state:
    description: Start the receiver, or collect (and end) it.
    type: str
    choices: [started, finished]
    required: true
  path:
    description: The model directory to receive into (the model_sync destination rules apply).
    type: path
    required: true
  files:
    description:
      - Every file of the model, by path relative to O(path), with C(size), C(sha256) and C(mtime)
        (the source's M(mlx.cluster.model_manifest) RV(files) with O(mlx.cluster.model_manifest#module:sha256_all)).
      - Required with O(state=started).
    type: dict
  addresses:
    description: This Mac's addresses to listen on (its ends of the cables its senders use).
    type: list
    elements: str
    default: []
  more_addresses:
    description:
      - "This Mac's ends of the further cables between it and a sender (several cables between the
        same two Macs), listened on at the same port where they can be; one that cannot (its cable
        unplugged or not addressed since the plan) is listed in RV(unused), not failed on: the
        sender's connections meant for it take the first cable."
    type: list
    elements: str
    default: []
  token:
    description: The one-time secret senders must present (at least 16 characters).
    type: str
  run_id:
    description: Unique id of this copy (at least 16 characters), in the receiver's arguments.
    type: str
    required: true
  stall_timeout:
    description: Seconds a connection may go without data before the receiver gives up on it.
    type: int
    default: 120
  idle_timeout:
    description: Seconds the receiver waits with no sender connected before it ends.
    type: int
    default: 300
  wait:
    description: With O(state=finished), seconds to wait for the receiver to end by itself.
    type: int
    default: 30
  expected:
    description:
      - With O(state=finished), the source's files (the RV(mlx.cluster.model_manifest#module:files) of
        the source) to compare this directory with, by size (missing files, wrong sizes and extra
        weight files, in RV(compare)).
    type: dict
  rehash:
    description:
      - Read every file already in place again to compare its sha256 with the source's, whatever
        the record of verified files (C(.mlx-cluster-sha256.json)) says, and record what was read
        (for model_sync_checksum, a file changed in place with its size and time kept).
      - Without it, a file whose size and modification time match its record is taken as it is.
    type: bool
    default: false
  report:
    description:
      - With O(state=started), a sender will ask for the result once it is done
        (M(mlx.cluster.model_send) O(mlx.cluster.model_send#module:report)); once every file is in
        place the receiver waits a few seconds for it, hands it the result and ends.
    type: bool
    default: false
  python:
    description: The interpreter the receiver runs under. Empty = the one running this module.
    type: path
  label:
    description: Name of this Mac in messages. Empty = its host name.
    type: str
    default: ""
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Start the receivers on the Macs that get the model over a cable
  mlx.cluster.model_receive:
    state: started
    path: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    files: "{{ source.files }}"
    addresses: ["169.254.10.2"]
    token: "{{ copy_token }}"
    run_id: "{{ copy_run_id }}"
  register: receiver

- name: Collect what each receiver got, and end it
  mlx.cluster.model_receive:
    state: finished
    path: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    run_id: "{{ copy_run_id }}"
"""

RETURN = r"""
port:
  description: With O(state=started), the port the receiver listens on (null when nothing is to come).
  returned: always
  type: int
  sample: 50123
pid:
  description: The receiver's process id (null when none was started).
  returned: always
  type: int
  sample: 4242
todo:
  description: The files still to come, largest first, with O(state=started).
  returned: always
  type: list
  elements: str
  sample: ["model-00001-of-00002.safetensors"]
todo_bytes:
  description: Their bytes still to come (a file stopped part-way counts its rest).
  returned: always
  type: int
  sample: 2264924160
had:
  description: The files already in place.
  returned: always
  type: list
  elements: str
copied:
  description: With O(state=finished), the files received and verified in this run.
  returned: always
  type: list
  elements: str
missing:
  description: With O(state=finished), the files not in place when the receiver ended.
  returned: always
  type: list
  elements: str
problems:
  description: What went wrong, each with C(file) (or null), C(kind) and C(msg).
  returned: always
  type: list
  elements: dict
  sample: [{"file": "model.safetensors", "kind": "sha256", "msg": "model.safetensors arrived with sha256 ..."}]
compare:
  description:
    - With O(state=finished) and O(expected), the differences between this directory and the source
      (M(mlx.cluster.model_manifest)'s RV(mlx.cluster.model_manifest#module:problems), naming O(label));
      null without O(expected).
  returned: always
  type: list
  elements: dict
strangers:
  description: Addresses that connected without the token and were refused.
  returned: always
  type: list
  elements: str
bytes:
  description: Bytes received in this run.
  returned: always
  type: int
seconds:
  description: How long the receiver ran.
  returned: always
  type: float
unused:
  description: The O(more_addresses) the receiver could not listen on, each with why.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "192.168.202.2", "why": "Can't assign requested address"}]
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import (
    LOG,
    STATUS,
    CopyError,
    Receiver,
    own_source,
    receiver_argv,
    send_order,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import check_dest, compare_manifests, walk
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    CommandTimeout,
    Runner,
    alive,
    first_line,
)

EMPTY = dict(
    port=None,
    pid=None,
    todo=[],
    todo_bytes=0,
    had=[],
    copied=[],
    missing=[],
    problems=[],
    strangers=[],
    bytes=0,
    seconds=0.0,
    compare=None,
    unused=[],
)


def settle(module, p, label):
    """The receiver's view before it starts: what is in place, what is still to come."""
    if os.path.exists(p["path"]) and not os.path.isdir(p["path"]):
        module.fail_json(msg=f"{p['path']} on {label} is not a directory: move it away, the model goes there", **EMPTY)
    try:
        # (the detached receiver settles again from the record this writes: no second read)
        rx = Receiver(p["path"], p["files"], p["token"], p["addresses"], rehash=p["rehash"])
        left = rx.prepare(dry=module.check_mode)  # the bytes still to come (a stopped file: its rest)
    except CopyError as exc:
        module.fail_json(msg=f"{label}: {exc.msg}", **EMPTY)
    except OSError as exc:
        module.fail_json(msg=f"{label}: cannot prepare {p['path']}: {exc.strerror or exc}", **EMPTY)
    todo = [rel for rel in send_order(p["files"]) if rx.status.get(rel) != "had"]
    return todo, sorted(set(p["files"]) - set(todo)), left


def spawn(python, run_id, settings, wait):
    """Start the detached receiver; -> its first line ({"port", "pid"} or {"error"})."""
    payload = own_source().encode("utf-8") + b"\0" + json.dumps(settings).encode("utf-8")
    log = os.open(os.path.join(settings["root"], LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        proc = subprocess.Popen(
            receiver_argv(python, run_id),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            close_fds=True,
            start_new_session=True,
            cwd="/",
        )
    finally:
        os.close(log)
    proc.stdin.write(payload)
    proc.stdin.close()
    line = first_line(proc, wait)
    try:
        return json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        if proc.poll() is None:
            proc.kill()
        return {"error": f"the receiver did not start within {wait} s (its log: {os.path.join(settings['root'], LOG)})"}


def read_status(path):
    try:
        with open(os.path.join(path, STATUS), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def still_ours(runner, pid, run_id):
    """True when PID is alive and its arguments still name run_id (a reused PID does not)."""
    try:
        rc, out, _ = runner.run(["ps", "-ww", "-o", "args=", "-p", str(pid)])
    except (CommandTimeout, OSError):
        return False
    return rc == 0 and run_id in out.split()


def end(runner, pid, run_id):
    """SIGTERM, then SIGKILL, the receiver PID while its arguments name run_id; -> whether it
    was signalled (False: gone already, or a PID that is not the receiver's any more)."""
    signalled = False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not still_ours(runner, pid, run_id):
            return signalled
        try:
            os.kill(pid, sig)
        except OSError:
            return signalled
        signalled = True
        for _ in range(20):
            time.sleep(0.1)
            if not alive(pid, zombie_is_gone=True):
                return signalled
    return signalled


def finish(module, p, runner, label):
    status = read_status(p["path"])
    deadline = time.monotonic() + max(0, p["wait"])
    while status.get("state") == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = read_status(p["path"])
    ended = False
    if status.get("state") == "running" and isinstance(status.get("pid"), int):
        ended = end(runner, status["pid"], p["run_id"])
        status = read_status(p["path"])
    out = dict(EMPTY)
    out.update({k: status[k] for k in EMPTY if k in status})
    if status.get("state") == "running":
        out["problems"] = list(out["problems"]) + [
            {
                "file": None,
                "kind": "stopped",
                "msg": f"the receiver was still running after {p['wait']} s and "
                + (
                    "was ended"
                    if ended
                    else f"was left alone: PID {status.get('pid')} does not name this copy any more"
                ),
            }
        ]
    elif not status:
        out["problems"] = [{"file": None, "kind": "none", "msg": "no receiver ran in this directory"}]
    try:
        os.unlink(os.path.join(p["path"], STATUS))
        log = os.path.join(p["path"], LOG)
        if os.path.getsize(log) == 0:  # kept only when the receiver had something to say
            os.unlink(log)
    except OSError:
        pass
    if p["expected"] is not None:
        out["compare"] = compare_with(module, p["path"], p["expected"], label)
    module.exit_json(changed=ended or bool(out["copied"]), **out)


def compare_once_in_place(module, path, files, label):
    """The comparison with the source that will hold once every file of `files` is in place: the
    receiver writes only those, so the weight files the source lacks are the ones there now
    (listed by size, no file read)."""
    listing, warnings = walk(path) if os.path.isdir(path) else ({}, [])
    for warning in warnings:
        module.warn(warning)
    done = dict(listing or {}, **{rel: {"size": f["size"]} for rel, f in files.items()})
    return [x for x in compare_manifests(files, {label: done}) if x["kind"] == "extra_weight"]


def compare_with(module, path, expected, label):
    """model_manifest's comparison, by size, of what is in path now (its own files left out;
    a listing by size reads no file, so it cannot fail: what it cannot see is a warning)."""
    files, warnings = walk(path) if os.path.isdir(path) else (None, [])
    for warning in warnings:
        module.warn(warning)
    return compare_manifests(expected, {label: files})


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["started", "finished"], required=True),
            path=dict(type="path", required=True),
            files=dict(type="dict"),
            addresses=dict(type="list", elements="str", default=[]),
            more_addresses=dict(type="list", elements="str", default=[]),
            token=dict(type="str", no_log=True),
            run_id=dict(type="str", required=True),
            stall_timeout=dict(type="int", default=120),
            idle_timeout=dict(type="int", default=300),
            wait=dict(type="int", default=30),
            rehash=dict(type="bool", default=False),
            report=dict(type="bool", default=False),
            expected=dict(type="dict"),
            python=dict(type="path"),
            label=dict(type="str", default=""),
            **COMMAND_TIMEOUT_SPEC,
        ),
        required_if=[("state", "started", ("files", "token", "addresses"))],
        supports_check_mode=True,
    )
    p = module.params
    label = p["label"] or socket.gethostname()
    if len(p["run_id"]) < 16:
        module.fail_json(msg="run_id must be a unique id of at least 16 characters", **EMPTY)
    home = os.path.expanduser("~")
    problem = check_dest(p["path"], home)
    if problem:
        module.fail_json(
            msg=f"refusing to receive the model into {p['path']} on {label}: {problem}. "
            "Fix: set model_sync_dest to a dedicated directory",
            **EMPTY,
        )
    runner = Runner(p["command_timeout"])
    if p["state"] == "finished":
        finish(module, p, runner, label)
    bad = [rel for rel, f in p["files"].items() if not isinstance(f, dict) or "sha256" not in f or "size" not in f]
    if bad:
        module.fail_json(
            msg=f"files without a size and sha256: {', '.join(sorted(bad)[:5])} (measure the source "
            "with model_manifest sha256_all: true)",
            **EMPTY,
        )
    todo, had, left = settle(module, p, label)
    out = dict(EMPTY, todo=todo, had=had, todo_bytes=left)
    if not todo or module.check_mode:
        module.exit_json(changed=bool(todo), **out)
    free = shutil.disk_usage(p["path"]).free
    if left > free:
        module.fail_json(
            msg=f"{label}: the model needs {left} more bytes in {p['path']} and the disk has {free} free. "
            "Fix: free space on that disk, or set model_sync_dest to a disk with room",
            **out,
        )
    said = spawn(
        p["python"] or sys.executable,
        p["run_id"],
        dict(
            root=p["path"],
            files=p["files"],
            token=p["token"],
            addresses=p["addresses"],
            more=p["more_addresses"],
            stall=p["stall_timeout"],
            idle=p["idle_timeout"],
            report=p["report"],
            compare=compare_once_in_place(module, p["path"], p["files"], label) if p["report"] else None,
        ),
        p["command_timeout"],
    )
    if said.get("error"):
        module.fail_json(msg=f"{label}: the model's receiver did not start: {said['error']}", **out)
    out.update(port=said["port"], pid=said["pid"], unused=said["unused"])
    module.exit_json(changed=True, **out)


if __name__ == "__main__":
    main()
