#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_run_cleanup
short_description: Find and end the processes one cluster run left behind on a Mac
description:
  - Lists processes with C(ps -ax -ww -o pid=,args=) (whole command lines; without C(-ww), macOS cuts
    them at 79 columns when the output is no terminal) and keeps only those that carry the run's
    unique id as an argument (the toolkit passes C(--run-id <uuid>) to every job it starts).
    Nothing is matched by process name.
  - Ends them by PID (SIGTERM, then SIGKILL after I(grace) seconds) and reports them. In check
    mode they are only reported.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  run_id:
    description: The unique id the run was started with (at least 16 characters).
    type: str
    required: true
  grace:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 3
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: End what the benchmark run left behind
  mlx_run_cleanup:
    run_id: "{{ benchmark_run_id }}"
"""

RETURN = r"""
leftovers:
  description: Processes of the run that were still alive.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "args": "python bench.py --run-id 3f2c..."}]
"""

import signal

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    Runner,
    processes_of_runs,
    signal_all,
    wait_gone,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            run_id=dict(type="str", required=True), grace=dict(type="int", default=3), **COMMAND_TIMEOUT_SPEC
        ),
        supports_check_mode=True,
    )
    run_id = module.params["run_id"]
    if len(run_id) < 16:
        module.fail_json(msg="run_id must be a unique id of at least 16 characters (it selects processes to end)")
    found = processes_of_runs(module, Runner(module.params["command_timeout"]), [run_id])
    if found and not module.check_mode:
        pids = [p["pid"] for p in found]
        signal_all(pids, signal.SIGTERM)
        signal_all(wait_gone(pids, module.params["grace"]), signal.SIGKILL)
    module.exit_json(changed=bool(found), leftovers=found)


if __name__ == "__main__":
    main()
