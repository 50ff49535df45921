#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_capture
short_description: Read, as they are, the outputs of every macOS command the toolkit parses on a Mac
description:
  - >-
    Runs discovery's own sequence of commands (the ones M(mlx.cluster.mlx_cluster_facts) parses,
    in its order and with its conditions), recording each command's argv, exit code, stdout,
    stderr and time instead of keeping only the facts; then every other command the stages read
    that discovery did not reach (the routes, the application firewall, the wired limit's
    LaunchDaemon, rsync's version, the Command Line Tools, C(networksetup -getinfo) of each
    network service), and the files the toolkit reads (the network preferences, the wired
    limit's LaunchDaemon).
  - >-
    A command that fails, hangs (each is bounded by I(command_timeout)) or whose output the
    parsers refuse is recorded as it is, and the capture goes on: a capture is for the Macs the
    toolkit does not understand yet.
  - >-
    Read-only; runs in check mode as well. Nothing is redacted here: the controller redacts the
    whole capture at once (M(mlx.cluster.mlx_capture_pack)), so one value gets one placeholder
    on every Mac.
  - >-
    The list lives in C(plugins/module_utils/mlx_capture.py) (C(CAPTURE_ARGVS), C(FILES)), over
    C(mlx_collect)'s, so the capture cannot drift from what discovery parses.
version_added: "0.3.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  launchd_labels:
    description:
      - More LaunchDaemons to read with C(launchctl print system/<label>) and their plists; the
        toolkit's own (C(/Library/LaunchDaemons/org.mlx-cluster.*.plist)) are read always.
      - Each must be a launchd label (dot-separated words of letters, digits, C(_) and C(-)); the
        module fails naming any other before it reads anything.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read every command the toolkit parses
  mlx.cluster.mlx_capture:
    command_timeout: 30
    launchd_labels: [org.mlx-cluster.server]
  register: capture_read
"""

RETURN = r"""
commands:
  description:
    - Each command run, in order, C({argv, rc, stdout, stderr, seconds}); C(error) instead of
      C(rc) for one that is not installed, did not answer in time, or could not be started.
  returned: always
  type: list
  elements: dict
  sample: [{"argv": ["sw_vers"], "rc": 0, "stdout": "ProductName:\t\tmacOS\n...", "stderr": "", "seconds": 0.021}]
files:
  description: Each file read, by path, as text; null for a file that is not there or cannot be read.
  returned: always
  type: dict
  sample: {"/Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist": null}
user:
  description: The login user (for the controller's redaction; not in the capture file).
  returned: always
  type: str
  sample: admin
notes:
  description: Where discovery's own sequence stopped, and why (the capture went on).
  returned: always
  type: list
  elements: str
"""

import getpass
import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_capture import (
    FILES,
    OUR_DAEMONS,
    firewall_argv,
    missing_argvs,
    record,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_collect import collect_cluster, module_runner
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_label
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_netcfg import SC_PREFERENCES, read_preferences
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ports import ALF_DIR
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout, Runner
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import LAUNCH_DAEMONS


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(launchd_labels=dict(type="list", elements="str", default=[]), **COMMAND_TIMEOUT_SPEC),
        supports_check_mode=True,
    )
    # a label names a file under /Library/LaunchDaemons that goes into the capture users send:
    # one like ../../Users/x/.ssh/id_ed25519 would read another file into it
    bad = [why for why in (unsafe_label(lb, "capture_launchd_labels") for lb in module.params["launchd_labels"]) if why]
    if bad:
        module.fail_json(msg="; ".join(bad))
    taken, notes = [], []
    runner = Runner(module.params["command_timeout"])
    run = record(module_runner(module, runner, {}), taken)
    home = os.path.expanduser("~")
    try:
        collect_cluster(
            run, os.environ.get("SSH_CONNECTION"), {"path": home, "free_bytes": None}, read_preferences(SC_PREFERENCES)
        )
    except (ParseError, CommandTimeout) as exc:
        notes.append(f"discovery would stop here: {exc}")
    except Exception as exc:  # noqa: BLE001 - a parser that breaks on this Mac's output is what a capture is for
        notes.append(f"discovery's parsers fail on this Mac's output: {type(exc).__name__}: {exc}")
    plists = sorted(
        set(glob.glob(OUR_DAEMONS)) | {f"{LAUNCH_DAEMONS}/{lb}.plist" for lb in module.params["launchd_labels"]}
    )
    labels = [os.path.basename(p)[: -len(".plist")] for p in plists]
    extra = [["launchctl", "print", f"system/{label}"] for label in labels]
    for _ in range(2):  # the second pass: -getinfo of the services the first one listed
        for argv in missing_argvs(taken, extra):
            try:
                run(argv, required=False)
            except (ParseError, CommandTimeout):
                pass  # recorded
    # the port check's read of the firewall, from where it finds socketfilterfw (not on PATH)
    socketfilterfw = module.get_bin_path("socketfilterfw", opt_dirs=[ALF_DIR])
    if socketfilterfw:
        try:
            record(lambda argv, required=True: runner.run(argv), taken)(firewall_argv(socketfilterfw))
        except (ParseError, CommandTimeout):
            pass  # recorded
    files = {path: read_text(path) for path in sorted(set(FILES) | set(plists))}
    module.exit_json(changed=False, commands=taken, files=files, notes=notes, user=getpass.getuser())


if __name__ == "__main__":
    main()
