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
  - When RDMA could not be brought up (a rank of a C(jaccl) or C(jaccl-ring) job exited with the
    deployed programs' RDMA exit code, 8), nothing is retried; the failure names each Mac and
    cable to replug or reboot. With O(fallback_hostfile), the job is instead run once more on
    that C(ring) hostfile (the TCP ring over the same Thunderbolt cables), with a warning, and
    the result says so (C(fallback_from), C(fallback_reason)).
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
  fallback_hostfile:
    description:
      - A C(ring) hostfile of the same Macs (its content, as the plan's C(fallback.hostfile)) to
        run the job on once more when RDMA could not be brought up; written to a private
        temporary file for that run. Empty, such a failure fails the task.
      - The second run gets what is left of O(timeout).
    type: dict
  fallback_reason:
    description:
      - Set when RDMA already could not be brought up earlier in the same run (the reason given
        then); the job runs on O(fallback_hostfile) at once, and RDMA is not tried again.
    type: str
  ssh_targets:
    description:
      - "How the controller reaches each Mac of the hostfile, by the hostfile's names (inventory
        names): the C(targets) of M(mlx_ssh_targets). C(mlx.launch) runs C(ssh NAME); a private
        C(ssh) first on its PATH turns each name into the destination and options Ansible uses
        (address, user, port, key, ssh arguments), for this run only."
      - Empty, C(mlx.launch) uses the controller's own C(ssh) and names as they are.
    type: dict
    default: {}
  progress_interval:
    description:
      - "Seconds between two progress lines printed while the job runs: the latest
        C([rank R/N host] warm-up i/N) or C(trial i/N) line the ranks logged (the benchmark's),
        with the ranks that are behind. The action plugin of this module runs it as a plain task
        would and reads its progress file over a second SSH session while it runs; no line is
        printed before this many seconds, nor for a job that logs no such line. 0 = none."
      - Not with C(async) on the task (Ansible's own polling is then used), nor in check mode.
    type: int
    default: 0
  progress_file:
    description:
      - File the module keeps up to date with the ranks' latest progress lines while the job runs
        (JSON with C(ranks), C(seq) and C(done)). Set by the action plugin when O(progress_interval) is on.
    type: path
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
    ssh_targets: "{{ mlx_cluster_plan.ssh }}"
    python: /Users/admin/mlx-cluster/venv/bin/python
    script: /Users/admin/mlx-cluster/bench/mlx_cluster_bench.py
    args: [--model, /Users/admin/mlx-cluster/models/qwen, --max-tokens, "128"]
    timeout: 900
    progress_interval: 10       # "trial 2/5: prompt_tps=..., generation_tps=..." every 10 s
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
result:
  description:
    - The job's JSON line, parsed.
    - After a fallback also C(fallback_from) (the RDMA backend that failed) and C(fallback_reason).
  returned: success
  type: dict
  sample: {"world_size": 2, "generation_tps": 31.2}
rdma_failure:
  description: When RDMA could not be brought up, the ranks, Macs and cables concerned and the message.
  returned: when RDMA could not be brought up
  type: dict
  sample: {"backend": "jaccl", "hosts": ["m2"], "cables": ["m2:en2 <-> m1:en2"],
           "msg": "RDMA could not be brought up ..."}
fallback:
  description: The fallback made, or null.
  returned: always
  type: dict
  sample: {"from": "jaccl", "to": "ring", "hosts": ["m1", "m2"], "reason": "RDMA could not ..."}
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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import (
    DEFAULT_SSH_CHECK_TIMEOUT,
    DEFAULT_TIMEOUT,
    LaunchProgress,
    describe_failed,
    failure_lines,
    hostfile_hosts,
    launch_argv,
    rdma_failure,
    read_result,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_progress import ProgressWriter
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import stream_output
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ssh import explain_ssh_failure, wrapper_files


def tail(text, n=40):
    return "\n".join((text or "").splitlines()[-n:])


def write_wrapper(module, targets):
    """A private directory holding the run's `ssh` (see mlx_ssh.wrapper_files). The real ssh
    programs are resolved first: on PATH after this directory, `ssh` is the wrapper itself."""
    real = {}
    for name, t in targets.items():
        ssh = str((t or {}).get("ssh") or "ssh")
        real[name] = dict(t, ssh=ssh if os.path.isabs(ssh) else module.get_bin_path(ssh, required=True))
    where = tempfile.mkdtemp(prefix="mlx-cluster-ssh-")
    for name, text in wrapper_files(real, sys.executable, ssh=module.get_bin_path("ssh", required=True)).items():
        path = os.path.join(where, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o700 if name == "ssh" else 0o600)
    return where


def ssh_check(env, hosts, timeout):
    """[(host, rc, stderr)] of the hosts whose `ssh <host> true` failed."""

    def one(host):
        try:
            p = subprocess.run(
                ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}", host, "true"],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout + 5,
                stdin=subprocess.DEVNULL,
            )
            return host, p.returncode, p.stderr.strip()
        except subprocess.TimeoutExpired:
            return host, 255, f"ssh: connect to host {host}: timed out (no answer within {timeout + 5}s)"

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return [r for r in pool.map(one, hosts) if r[1] != 0]


def exit_dry_run(module, where):
    """Check mode: nothing runs; say what would run, and `where`."""
    module.exit_json(
        changed=False,
        skipped=True,
        msg=f"check mode: would run {module.params['script']} on {where}",
        failed_ranks=[],
        elapsed=0.0,
        stdout_tail="",
        stderr_tail="",
    )


def read_hostfile(module, path):
    try:
        with open(path) as f:
            hostfile = json.load(f)
        return hostfile, hostfile_hosts(hostfile)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the hostfile {path}: {exc}; run the hostfile stage first")


def watch_progress(path):
    """(on_output(stream) for run_job, finish()) keeping `path` up to date; (None, None) without."""
    if not path:
        return None, None
    progress, writer = LaunchProgress(), ProgressWriter(path)
    writer.update(progress.state(), time.monotonic(), force=True)

    def on_output(stream):
        def seen(text):
            if progress.feed(text, stream):
                writer.update(progress.state(), time.monotonic())

        return seen

    def finish():
        writer.update(progress.state(done=True), time.monotonic(), force=True)
        return writer.error

    return on_output, finish


def run_job(argv, env, timeout, on_output=None):
    """Run the launcher in its own process group; on timeout terminate the whole group.
    `on_output(name)` gives the callable that sees the pipe `name` ("stdout", "stderr") as it
    arrives (the ranks' progress)."""
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        if on_output is None:
            out, err = proc.communicate(timeout=timeout)
        else:
            out, err = stream_output(proc, timeout, on_output("stdout"), on_output("stderr"))
        return proc.returncode, _text(out), _text(err), False
    except subprocess.TimeoutExpired as exc:
        # communicate() keeps what it read for the next call; stream_output hands it over
        before = (exc.output or b"", exc.stderr or b"") if on_output is not None else (b"", b"")
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=wait)
                return proc.returncode, _text(before[0] + out), _text(before[1] + err), True
            except subprocess.TimeoutExpired:
                continue
        return proc.returncode, _text(before[0]), _text(before[1]), True


def _text(data):
    """Bytes as text with universal newlines (what text=True pipes gave: the ranks' "\\r\\n")."""
    return (data or b"").decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hostfile=dict(type="path", required=True),
            backend=dict(type="str"),
            python=dict(type="str", required=True),
            script=dict(type="str", required=True),
            args=dict(type="list", elements="str", default=[]),
            env=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=DEFAULT_TIMEOUT),
            launcher=dict(type="str"),
            ssh_check_timeout=dict(type="int", default=DEFAULT_SSH_CHECK_TIMEOUT),
            ssh_targets=dict(type="dict", default={}),
            fallback_hostfile=dict(type="dict"),
            fallback_reason=dict(type="str"),
            progress_interval=dict(type="int", default=0),
            progress_file=dict(type="path"),
        ),
        required_by={"fallback_reason": "fallback_hostfile"},
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode and not os.path.exists(p["hostfile"]):
        # a dry run on a cluster not configured yet: the hostfile stage, in check mode, showed the
        # hostfile without writing it; a real run writes it before this launch
        exit_dry_run(module, f"the Macs of {p['hostfile']}, which the hostfile stage writes first in a real run")
    hostfile, hosts = read_hostfile(module, p["hostfile"])
    if p["fallback_hostfile"]:
        try:
            ring_hosts = hostfile_hosts(p["fallback_hostfile"])
        except ValueError as exc:
            ring_hosts = exc
        if (
            p["fallback_hostfile"].get("backend") != "ring"
            or not isinstance(ring_hosts, list)
            or sorted(ring_hosts) != sorted(hosts)
        ):
            module.fail_json(
                msg=f"fallback_hostfile is not a ring hostfile of the same Macs as {p['hostfile']} "
                f"({ring_hosts}): run the discover and hostfile stages again"
            )
    if module.check_mode:
        exit_dry_run(module, ", ".join(hosts))
    unknown = [h for h in hosts if p["ssh_targets"] and h not in p["ssh_targets"]]
    if unknown:
        module.fail_json(
            msg=f"the hostfile {p['hostfile']} names {', '.join(unknown)}, which the inventory's "
            "cluster does not hold: run the hostfile stage again with this inventory"
        )
    try:
        wrapper = write_wrapper(module, p["ssh_targets"]) if p["ssh_targets"] else None
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot prepare ssh for mlx.launch: {exc}")
    try:
        run(module, p, hostfile, hosts, wrapper)
    finally:
        if wrapper:
            shutil.rmtree(wrapper, ignore_errors=True)


def run(module, p, hostfile, hosts, wrapper):
    """The job, once every host answers SSH: launched on the hostfile, or at once on the ring when
    RDMA already failed in this run; when RDMA could not be brought up, run again on the ring
    (fallback_hostfile) or fail naming the Macs and cables. Ends the module."""
    env = dict(os.environ)
    if wrapper:
        env["PATH"] = os.pathsep.join([wrapper, os.environ.get("PATH", "")])
    if p["ssh_check_timeout"] > 0:
        check_ssh(module, p, hosts, env)
    launcher = p["launcher"] or os.path.join(os.path.dirname(sys.executable), "mlx.launch")
    if not os.path.exists(launcher):
        launcher = module.get_bin_path("mlx.launch", required=True)
    start = time.monotonic()
    name = os.path.basename(p["script"])
    if p["fallback_reason"]:
        # RDMA failed earlier in this run: not tried again
        job = dict(why="", failed_ranks=[], stdout="", detail="")
        rdma = {"backend": hostfile.get("backend"), "msg": p["fallback_reason"], "earlier": True}
        module.warn(
            f"{name}: RDMA could not be brought up earlier in this run: running on the ring backend "
            "over the same Thunderbolt cables at once (RDMA is not tried again)"
        )
    else:
        job = launch(module, launcher, p, p["hostfile"], hosts, env, p["timeout"])
        rdma = rdma_failure(job["failed_ranks"], hostfile, job.pop("stdout")) if job["why"] else None
    if rdma and p["fallback_hostfile"]:
        return run_on_ring(module, p, launcher, env, name, job, rdma, start)
    if rdma:
        module.fail_json(
            msg=f"{name}: {rdma['msg']}, or set mlx_cluster_fallback_backend: ring to run on the "
            f"ring backend over the same cables when this happens.{job['detail']}",
            rdma_failure=rdma,
            fallback=None,
            **strip(job),
        )
    if job["why"]:
        module.fail_json(msg=f"{name} {job['why']}: {job['who']}.{job['detail']}", fallback=None, **strip(job))
    module.exit_json(changed=False, result=job["result"], fallback=None, **strip(job))


def check_ssh(module, p, hosts, env):
    """Fail before anything starts when a host of the hostfile does not answer `ssh HOST true`,
    naming each such rank, why ssh failed and the fix."""
    down = ssh_check(env, hosts, p["ssh_check_timeout"])
    if not down:
        return
    words = []
    for h, rc, err in down:
        t = p["ssh_targets"].get(h) or {}
        words.append(
            f"rank {hosts.index(h)}: "
            + (
                explain_ssh_failure(err, rc, "the controller", h, t.get("host", h), t.get("user"))
                or f"ssh to {h} failed (exit {rc}): {err or 'no message'}"
            )
        )
    module.fail_json(
        msg="not started: " + " ".join(words),
        failed_ranks=[{"rank": hosts.index(h), "host": h, "code": None, "killed": False} for h, _, _ in down],
        elapsed=0.0,
        stdout_tail="",
        stderr_tail="",
        fallback=None,
    )


def run_on_ring(module, p, launcher, env, name, first, rdma, start):
    """RDMA could not be brought up (in `first`, or earlier in this run): the job runs once more
    on the fallback ring hostfile (a private temporary file) with what is left of the timeout.
    The RDMA launch itself is never retried. Ends the module."""
    ring_hosts = hostfile_hosts(p["fallback_hostfile"])
    if not rdma.get("earlier"):
        module.warn(
            f"{name}: {rdma['msg']} Falling back to the ring backend over the same Thunderbolt "
            f"cables (mlx_cluster_fallback_backend: ring), ranks {', '.join(ring_hosts)}"
        )
    fallback = {"from": rdma["backend"], "to": "ring", "hosts": ring_hosts, "reason": rdma["msg"]}
    left = max(1, int(p["timeout"] - (time.monotonic() - start)))
    fd, path = tempfile.mkstemp(prefix="mlx-cluster-ring-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(p["fallback_hostfile"], f)
        job = launch(module, launcher, p, path, ring_hosts, env, left, backend="ring")
    finally:
        os.unlink(path)
    job.pop("stdout")
    job["elapsed"] = round(time.monotonic() - start, 3)
    if job["why"]:
        module.fail_json(
            msg=f"{name}: {rdma['msg']} The fallback to the ring backend over the same cables "
            f"{job['why']}: {job['who']}.{job['detail']}",
            rdma_failure=rdma,
            fallback=fallback,
            first_run=strip(first) or None,
            **strip(job),
        )
    job["result"].update(fallback_from=rdma["backend"], fallback_reason=rdma["msg"])
    module.exit_json(changed=False, result=job["result"], rdma_failure=rdma, fallback=fallback, **strip(job))


def strip(job):
    """The module's return keys of one launch (without the wording kept for the message)."""
    return {k: v for k, v in job.items() if k in ("failed_ranks", "elapsed", "stdout_tail", "stderr_tail", "cmd")}


def launch(module, launcher, p, hostfile, hosts, env, timeout, backend=None):
    """One mlx.launch run, bounded by `timeout`: its result and, when it failed, why ("why",
    "who", "detail": the wording of the failure message; "why" empty on success)."""
    argv = launch_argv(launcher, hostfile, backend or p["backend"], p["python"], p["script"], p["args"], p["env"])
    on_output, finish = watch_progress(p["progress_file"])
    start = time.monotonic()
    rc, out, err, timed_out = run_job(argv, env, timeout, on_output)
    elapsed = round(time.monotonic() - start, 3)
    problem = finish() if finish else None
    if problem:
        module.warn(problem)
    parsed = read_result(out, err, hosts)
    job = dict(
        result=parsed["result"],
        failed_ranks=parsed["failed"],
        elapsed=elapsed,
        stdout_tail=tail(out),
        stderr_tail=tail(err),
        cmd=argv,
        stdout=out,
        why="",
        who="",
        detail="",
    )
    if timed_out or rc != 0 or parsed["result"] is None:
        # mlx.launch may exit 0 after ending the other ranks of a job one rank broke
        job["why"] = (
            f"timed out after {timeout}s"
            if timed_out
            else f"failed (launcher exit {rc})"
            if rc
            else "failed (mlx.launch exited 0, but without the job's result)"
        )
        job["who"] = describe_failed(parsed["failed"]) or "no rank reported"
        ranks, launcher_lines = failure_lines(out, err)
        job["detail"] = "".join(
            f"\n{title}:\n" + "\n".join(lines)
            for title, lines in (("Last lines of the ranks", ranks), ("mlx.launch said", launcher_lines))
            if lines
        )
    return job


if __name__ == "__main__":
    main()
