#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: model_send
short_description: Send a model over a Thunderbolt cable to a receiver, without ssh (model_sync's own transport)
description:
  - Connects to the receiver M(mlx.cluster.model_receive) started on the other Mac, at O(address)
    (the other Mac's end of the cable) and O(port), presents O(token), and sends every file of
    O(files) the receiver does not have yet, from where it stopped when a copy was stopped
    part-way, over O(streams) connections at once (one file per connection at a time, largest
    first). The bytes go from the disk to the cable with sendfile(2), not encrypted (the cable
    joins two of the user's Macs), verified by the receiver's sha256 of each file as it arrives.
  - "With O(more), several cables between the two Macs: O(streams) connections go over each, every
    connection taking the next file (a faster cable carries more of them). A connection that
    cannot reach its further cable (unplugged or not addressed since the plan) goes over the first
    instead, listed in RV(fell_back): the copy is slower, not failed."
  - With O(follow=true) this Mac is a relay, O(path) its own copy, still arriving, and each
    file is passed on as its bytes appear; a file that stops growing for O(stall_timeout) seconds
    fails naming O(upstream_name).
  - Fails naming this Mac, the receiving Mac, the address and the file, with the fix. In check mode
    nothing is sent (the receiver's side lists what would be).
version_added: "0.2.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
options:
  path:
    description: The model directory on this Mac.
    type: path
    required: true
  files:
    description: Every file of the model (the source's manifest, with C(size) and C(sha256)).
    type: dict
    required: true
  address:
    description: The receiving Mac's address on the cable.
    type: str
    required: true
  port:
    description: The receiver's port (M(mlx.cluster.model_receive)'s RV(mlx.cluster.model_receive#module:port)).
    type: int
    required: true
  token:
    description: The receiver's one-time secret.
    type: str
    required: true
  more:
    description:
      - The further cables between the two Macs (after the one of O(address)), each with the
        receiving Mac's address on it and how it is named in messages.
    type: list
    elements: dict
    default: []
    suboptions:
      address:
        description: The receiving Mac's address on that cable.
        type: str
        required: true
      cable:
        description: How that cable is named in messages. Empty = by address.
        type: str
        default: ""
  streams:
    description: Connections at once on each cable (several files on the cable at the same time).
    type: int
    default: 4
  stall_timeout:
    description: >-
      Seconds without progress (the receiver's answer, or with O(follow) this Mac's own copy) before giving up.
    type: int
    default: 120
  follow:
    description: Pass on a copy that is still arriving on this Mac.
    type: bool
    default: false
  label:
    description: Name of the receiving Mac in messages.
    type: str
    required: true
  source_name:
    description: Name of this Mac in messages. Empty = its host name.
    type: str
    default: ""
  upstream_name:
    description: With O(follow), the Mac this Mac's own copy comes from.
    type: str
    default: ""
  cable:
    description: How the cable is named in messages (e.g. C(m1:en2 <-> m2:en3)). Empty = by address.
    type: str
    default: ""
  what:
    description: What is sent, in the progress lines (e.g. C(model), C(wheels)).
    type: str
    default: model
  progress_interval:
    description:
      - Seconds between progress lines while the copy runs (C([m2 -> m1] model 1.2/3.4 GB (35%), 850.0 MB/s)),
        printed by the action plugin from O(progress_file); no line before the first interval. 0 = none.
    type: int
    default: 0
  progress_file:
    description: Where this module keeps its progress (set by the action plugin; not for playbooks).
    type: path
  report:
    description:
      - Once every file is sent, ask the receiver for its result (RV(received)); with every file in
        place there it ends by itself, and its Mac needs no
        M(mlx.cluster.model_receive) O(mlx.cluster.model_receive#module:state=finished).
      - One sender per receiving Mac reports (not the tree's direct share).
    type: bool
    default: false
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Send the model to each Mac over its cable from rank 0
  mlx.cluster.model_send:
    path: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    files: "{{ source.files }}"
    address: 169.254.10.2
    port: "{{ hostvars['m2'].receiver.port }}"
    token: "{{ hostvars['m2'].copy_token }}"
    label: m2
  delegate_to: m1
"""

RETURN = r"""
bytes:
  description: Bytes sent in this run.
  returned: always
  type: int
  sample: 2264924160
seconds:
  description: How long the copy took.
  returned: always
  type: float
mb_per_s:
  description: Bytes sent per second, in MB (10^6).
  returned: always
  type: float
files:
  description: Per file sent, C(bytes) and C(resumed) (the offset it resumed from), or C(had).
  returned: always
  type: dict
received:
  description:
    - With O(report), the receiver's result when every file was in place (what
      M(mlx.cluster.model_receive) O(mlx.cluster.model_receive#module:state=finished) returns, with
      C(compare)); none when it was not settled (another sender's files still to come, a file
      that failed) or did not answer.
  returned: success
  type: dict
cables:
  description: Bytes sent over each cable, the one of O(address) first, then O(more).
  returned: always
  type: list
  elements: dict
  sample: [{"address": "192.168.201.2", "cable": "m1:en2 <-> m2:en2", "bytes": 1132462080}]
fell_back:
  description: The further cables a connection could not use (it went over the first), each with why.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "192.168.202.2", "why": "no answer from 192.168.202.2:50123 within 3 s"}]
"""

import socket
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import Sender
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_progress import ProgressWriter
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import CopyProgress

# How often the progress file is brought up to date while the copy runs (s); the writer itself
# rewrites it at most every mlx_progress.WRITE_EVERY.
PROGRESS_TICK = 0.5

FIXES = {
    "refused": "its receiver is not running (the task that starts the receivers says why); run the stage again",
    "timeout": (
        "check the cable ({cable}: `thunderbolt_ping`, or the network stage), and the firewall of {dest} "
        "(System Settings > Network > Firewall: allow incoming connections for the Python that Ansible "
        "runs there), or set model_sync_transport: rsync"
    ),
    "connect": "check the cable ({cable}) and that the network stage addressed it; run the stage again",
    "refused_token": "another copy's receiver answered: run the stage again",
    "sha256": "run the stage again (it resumes); if the same cable damages files again, replace the cable ({cable})",
    "stalled": "check the cable ({cable}) and that {dest} is up; run the stage again (it resumes where it stopped)",
    "connection": "check the cable ({cable}) and that {dest} is up; run the stage again (it resumes where it stopped)",
    "upstream": (
        "the copy of {src} itself stopped arriving from {upstream}: fix what its failure names, "
        "then run the stage again"
    ),
    "short": "the file changed on {src} while it was being sent: run the stage again",
    "receiver": "see {dest}'s receiver (the task that collects the receivers names the cause)",
}


def run_with_progress(sender, path, what, tick=PROGRESS_TICK, clock=time.monotonic):
    """sender.run(), keeping `path` (when set) up to date with what was sent; -> its result."""
    if not path:
        return sender.run()
    progress = CopyProgress(total=sum(int(f.get("size") or 0) for f in sender.files.values()))
    writer = ProgressWriter(path)
    stop = threading.Event()

    def state(done=False):
        return dict(progress.state(clock(), done=done), what=what)

    def watch():
        while not stop.wait(tick):
            if progress.count(sender.sent, len(sender.results), clock()):
                writer.update(state(), clock())

    progress.count(0, 0, clock())  # the start: the rate counts from here
    writer.update(state(), clock(), force=True)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        return sender.run()
    finally:
        stop.set()
        thread.join()
        progress.count(sender.sent, len(sender.results), clock())
        writer.update(state(done=True), clock(), force=True)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            address=dict(type="str", required=True),
            more=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(address=dict(type="str", required=True), cable=dict(type="str", default="")),
            ),
            port=dict(type="int", required=True),
            token=dict(type="str", required=True, no_log=True),
            streams=dict(type="int", default=4),
            stall_timeout=dict(type="int", default=120),
            follow=dict(type="bool", default=False),
            label=dict(type="str", required=True),
            source_name=dict(type="str", default=""),
            upstream_name=dict(type="str", default=""),
            cable=dict(type="str", default=""),
            what=dict(type="str", default="model"),
            progress_interval=dict(type="int", default=0),
            progress_file=dict(type="path"),
            report=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(
            changed=False, bytes=0, seconds=0.0, mb_per_s=0.0, files={}, received=None, cables=[], fell_back=[]
        )
    src = p["source_name"] or socket.gethostname()
    sender = Sender(
        p["path"],
        p["files"],
        p["token"],
        [p["address"]] + [m["address"] for m in p["more"]],
        p["port"],
        streams=p["streams"],
        stall=p["stall_timeout"],
        follow=p["follow"],
        report=p["report"],
    )
    result = run_with_progress(sender, p["progress_file"], p["what"])
    rate = round(result["bytes"] / result["seconds"] / 1e6, 1) if result["seconds"] else 0.0
    names = {m["address"]: m["cable"] for m in p["more"]}
    names[p["address"]] = p["cable"]
    out = dict(
        bytes=result["bytes"],
        seconds=result["seconds"],
        mb_per_s=rate,
        files=result["files"],
        cables=[{"address": a, "cable": names.get(a) or "", "bytes": n} for a, n in result["by_address"].items()],
        fell_back=result["fell_back"],
    )
    if result["errors"]:
        first = result["errors"][0]
        where = first.get("address") or p["address"]
        cable = names.get(where) or f"{src} -> {where}"
        fix = FIXES.get(first["kind"], "run the stage again").format(
            cable=cable, dest=p["label"], src=src, upstream=p["upstream_name"] or "its sender"
        )
        more = f" (and {len(result['errors']) - 1} more)" if len(result["errors"]) > 1 else ""
        module.fail_json(
            msg=f"copy {src} -> {p['label']} over {cable} ({where}:{p['port']}): {first['msg']}{more}. Fix: {fix}",
            errors=result["errors"],
            **out,
        )
    module.exit_json(
        changed=result["bytes"] > 0 or any(not f.get("had") for f in result["files"].values()),
        received=result["received"],
        **out,
    )


if __name__ == "__main__":
    main()
