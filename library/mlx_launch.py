#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_launch
short_description: Run a job across the cluster with mlx.launch, bounded in time
description:
  - Runs C(mlx.launch --hostfile ...) where the task runs (the controller or rank 0), with a
    hard timeout. First checks that every host of the hostfile answers SSH, so a missing Mac
    is named before anything starts.
  - On timeout the launcher's whole process group is terminated (its SSH sessions close and
    the remote ranks get SIGHUP); nothing is killed by name.
  - Returns the job's JSON line (the last line of standard output that is a JSON object) and,
    on failure, the ranks that failed mapped to their hosts.
version_added: "0.1.0"
options:
  hostfile:
    description: MLX hostfile (JSON) on the machine the task runs on.
    type: path
    required: true
  backend:
    description: Backend override (default the hostfile's).
    type: str
  python:
    description: Interpreter on the Macs (same path everywhere).
    type: str
    required: true
  script:
    description: Script on the Macs (same path everywhere).
    type: str
    required: true
  args:
    description: Arguments of the script.
    type: list
    elements: str
    default: []
  env:
    description: KEY=VALUE environment for every rank.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds the whole job may take.
    type: int
    default: 600
  launcher:
    description: The mlx.launch executable; default the one beside the controller's Python, else PATH.
    type: str
  ssh_check_timeout:
    description: Seconds each host gets to answer the SSH check (0 skips the check).
    type: int
    default: 10
  path_prepend:
    description: Directories put first on PATH for the launcher (where its C(ssh) is found).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: none
    details: Running a job cannot be simulated; in check mode the module reports it would run.
  diff_mode:
    support: none
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Benchmark across the cluster
  mlx_launch:
    hostfile: "{{ mlx_cluster_artifacts_dir }}/hostfile.json"
    python: /Users/admin/mlx-cluster/venv/bin/python
    script: /Users/admin/mlx-cluster/bench/mlx_cluster_bench.py
    args: [--model, /Users/admin/mlx-cluster/models/qwen, --max-tokens, "128"]
    timeout: 900
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
result:
  description: The job's JSON line, parsed.
  returned: success
  type: dict
  sample: {"world_size": 2, "generation_tps": 31.2}
failed_ranks:
  description: Ranks that exited non-zero or were killed, with their host.
  returned: always
  type: list
  elements: dict
  sample: [{"rank": 1, "host": "m2", "code": 1, "killed": false}]
elapsed:
  description: Seconds the job took.
  returned: always
  type: float
  sample: 12.5
stdout_tail:
  description: The last lines of the launcher's standard output.
  returned: always
  type: str
  sample: "..."
stderr_tail:
  description: The last lines of the launcher's standard error.
  returned: always
  type: str
  sample: "..."
"""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.mlx_launch import describe_failed, failure_lines, hostfile_hosts, launch_argv, read_result


def tail(text, n=40):
    return "\n".join((text or "").splitlines()[-n:])


def ssh_check(env, hosts, timeout):
    def one(host):
        try:
            p = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}", host, "true"],
                               env=env, capture_output=True, text=True, timeout=timeout + 5,
                               stdin=subprocess.DEVNULL)
            return host, p.returncode, p.stderr.strip()
        except subprocess.TimeoutExpired:
            return host, None, f"no answer within {timeout + 5}s"
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return [r for r in pool.map(one, hosts) if r[1] != 0]


def run_job(argv, env, timeout):
    """Run the launcher in its own process group; on timeout terminate the whole group."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=wait)
                return proc.returncode, out, err, True
            except subprocess.TimeoutExpired:
                continue
        return proc.returncode, "", "", True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hostfile=dict(type="path", required=True), backend=dict(type="str"),
            python=dict(type="str", required=True), script=dict(type="str", required=True),
            args=dict(type="list", elements="str", default=[]), env=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=600), launcher=dict(type="str"),
            ssh_check_timeout=dict(type="int", default=10),
            path_prepend=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        with open(p["hostfile"]) as f:
            hosts = hostfile_hosts(json.load(f))
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the hostfile {p['hostfile']}: {exc}; run the hostfile stage first")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg=f"check mode: would run {p['script']} on {', '.join(hosts)}",
                         failed_ranks=[], elapsed=0.0, stdout_tail="", stderr_tail="")
    env = dict(os.environ, PATH=os.pathsep.join(p["path_prepend"] + [os.environ.get("PATH", "")]))
    if p["ssh_check_timeout"] > 0:
        down = ssh_check(env, hosts, p["ssh_check_timeout"])
        if down:
            module.fail_json(
                msg="not started: " + "; ".join(f"rank {hosts.index(h)} ({h}) does not answer SSH: {e or 'exit ' + str(rc)}"
                                               for h, rc, e in down)
                + ". Fix: check that the Mac is up and Remote Login is on, then re-run.",
                failed_ranks=[{"rank": hosts.index(h), "host": h, "code": None, "killed": False} for h, _, _ in down],
                elapsed=0.0, stdout_tail="", stderr_tail="")
    launcher = p["launcher"] or os.path.join(os.path.dirname(sys.executable), "mlx.launch")
    if not os.path.exists(launcher):
        launcher = module.get_bin_path("mlx.launch", required=True)
    argv = launch_argv(launcher, p["hostfile"], p["backend"], p["python"], p["script"], p["args"], p["env"])
    start = time.monotonic()
    rc, out, err, timed_out = run_job(argv, env, p["timeout"])
    elapsed = round(time.monotonic() - start, 3)
    parsed = read_result(out, err, hosts)
    info = dict(failed_ranks=parsed["failed"], elapsed=elapsed, stdout_tail=tail(out), stderr_tail=tail(err), cmd=argv)
    if timed_out or rc != 0 or parsed["result"] is None:
        who = describe_failed(parsed["failed"]) or "no rank reported"
        # mlx.launch may exit 0 after ending the other ranks of a job one rank broke
        why = (f"timed out after {p['timeout']}s" if timed_out else f"failed (launcher exit {rc})" if rc
               else "failed (mlx.launch exited 0, but without the job's result)")
        ranks, launcher = failure_lines(out, err)
        detail = "".join(f"\n{title}:\n" + "\n".join(lines) for title, lines in
                         (("Last lines of the ranks", ranks), ("mlx.launch said", launcher)) if lines)
        module.fail_json(msg=f"{os.path.basename(p['script'])} {why}: {who}.{detail}", **info)
    module.exit_json(changed=False, result=parsed["result"], **info)


if __name__ == "__main__":
    main()
