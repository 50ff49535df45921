#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_server_stop
short_description: Stop this Mac's rank of the MLX server by its recorded PID or launchd label
description:
  - With I(supervisor=launchd), boots the job out of the system domain by its label
    (C(launchctl bootout system/<label>)) and removes its plist, so it does not come back at boot.
  - First sends SIGTERM to the rank's supervisor (C(keeper<N>.pid), checked like the rank), so it
    restarts nothing; it passes SIGTERM on to the rank and exits once the rank is gone.
  - Sends SIGTERM to the recorded PID (C(rank<N>.pid), checked to still be our rank by its command
    line, which names the run directory and the run id), waits up to I(grace) seconds for the rank to
    leave (every rank stops at the next turn of the serving loop), then sends SIGKILL.
  - Then lists processes with C(ps -ax -ww -o pid=,args=) and ends those that carry the stopped
    start's run id as an argument (left behind); processes are never matched by name.
  - Moves the state files aside (C(rank<N>.json) to C(rank<N>.last.json), C(keeper<N>.json) to
    C(keeper<N>.last.json), C(state.json) to C(state.last.json)) so a new start never reads a
    stale state.
  - Run as root (the launchd supervisor's bootout needs it), it does only the launchd part as
    root, then goes on as the user who owns I(run_dir), so the files it reads there (never
    through a symbolic link) and the processes it signals are that user's. A run id read there
    is used only in the form the toolkit makes (24 lowercase letters and digits).
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  run_dir:
    description: The server's directory on this Mac.
    type: path
    required: true
  rank:
    description: The rank to stop; default every rank whose files are in I(run_dir).
    type: int
  supervisor:
    description: What keeps the rank running.
    type: str
    choices: [launchd, process]
    default: launchd
  label:
    description: >-
      launchd label (dot-separated words of letters, digits, C(_) and C(-); it names the plist this removes as root).
    type: str
    default: org.mlx-cluster.server
  plist:
    description: The launchd job's plist (removed with I(supervisor=launchd)).
    type: path
  grace:
    description: Seconds between SIGTERM and SIGKILL.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Reports what would be stopped; sends nothing and removes nothing.
  diff_mode:
    support: none
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Stop the server's rank on every Mac
  mlx_server_stop:
    run_dir: /Users/admin/mlx-cluster/server
    rank: "{{ mlx_server_rank.rank }}"
    plist: /Library/LaunchDaemons/org.mlx-cluster.server.plist
  become: true  # launchd (the default supervisor): bootout in the system domain, then the run directory's owner
"""

RETURN = r"""
stopped:
  description: The rank's process, as it was ended.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "how": "SIGTERM", "seconds": 1.2}]
supervisors:
  description: The rank's supervisor, as it was ended (process supervisor; launchd's bootout ends it there).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4240, "rank": 1, "how": "SIGTERM", "seconds": 1.3}]
leftovers:
  description: Other processes of the same start (by run id) that were still alive, and were ended.
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4250, "args": "python mlx_cluster_server.py ... --run-id k2x9..."}]
remaining:
  description: Processes that did not end even after SIGKILL (the task fails when any).
  returned: always
  type: list
  elements: dict
  sample: []
launchd:
  description: What was done with the launchd job (booted out, plist removed).
  returned: always
  type: dict
  sample: {"booted_out": true, "plist_removed": true}
run_ids:
  description: Run ids of the stopped starts (empty when nothing was recorded).
  returned: always
  type: list
  elements: str
  sample: [k2x9...]
ranks:
  description: The ranks whose files were found (and handled) on this Mac.
  returned: always
  type: list
  elements: int
  sample: [1]
"""

import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    Runner,
    alive,
    module_run,
    processes_of_runs,
    signal_all,
    wait_gone,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import (
    RUN_ID_RE,
    SERVER_SPEC,
    become_owner,
    parse_launchctl_print,
    process_matches,
    rank_files,
    ranks_in,
    read_json,
    read_pid,
    setting_problem,
)


def run(module, argv, timeout=None):
    """(rc, out, err) of argv, bounded (command_timeout, or `timeout` when longer)."""
    bound = max(module.params["command_timeout"], timeout or 0)
    return module_run(module, Runner(bound), argv)


def ours(module, ps, pid, run_dir, run_id):
    """(alive and ours, its ps line): the PID runs a program whose arguments name our run
    directory and run id (a rank or its supervisor); a reused PID fails this."""
    if not pid or not alive(pid, zombie_is_gone=True):
        return False, ""
    rc, out, _err = run(module, [ps, "-ww", "-p", str(pid), "-o", "pid=,args="])
    return rc == 0 and process_matches(out, pid, run_dir, run_id or None), out


def tell_supervisor(module, ps, run_dir, rank, supervisors):
    """SIGTERM the rank's supervisor (it restarts nothing after that, passes SIGTERM on to
    the rank and exits when the rank is gone). Returns (changed, its PID or None)."""
    files = rank_files(run_dir, rank)
    run_id = read_json(files["state"]).get("run_id") or read_json(files["keeper"]).get("run_id") or ""
    pid = read_pid(files["keeper_pid"]) or read_json(files["keeper"]).get("pid")
    mine, _out = ours(module, ps, pid, run_dir, run_id)
    if not mine:
        return False, None
    if module.check_mode:
        supervisors.append({"pid": pid, "rank": rank, "how": "would send SIGTERM", "seconds": 0.0})
        return True, None
    signal_all([pid], signal.SIGTERM)
    return True, pid


def reap_supervisor(pid, rank, start, supervisors, remaining):
    """Its rank is gone: the supervisor leaves within seconds; SIGKILL when it does not."""
    how = "SIGTERM"
    if wait_gone([pid], 10):
        signal_all([pid], signal.SIGKILL)
        how = "SIGKILL after 10s"
        if wait_gone([pid], 10):
            remaining.append({"pid": pid, "args": "the rank's supervisor"})
    supervisors.append({"pid": pid, "rank": rank, "how": how, "seconds": round(time.monotonic() - start, 2)})


def find_rank(module, ps, run_dir, rank):
    """(PID, its ps line) of the rank's recorded process when it is still our rank, else
    (None, ""). Looked up before its supervisor is told: the supervisor passes SIGTERM on at
    once, and a rank whose peers stopped first may end within milliseconds of that."""
    files = rank_files(run_dir, rank)
    info = read_json(files["state"])
    pid = read_pid(files["pid"]) or info.get("pid")
    mine, out = ours(module, ps, pid, run_dir, info.get("run_id") or "")
    return (pid, out) if mine else (None, "")


def stop_rank(module, rank, found, grace, stopped, remaining):
    """SIGTERM the rank found running (find_rank), SIGKILL after `grace`. Returns changed."""
    pid, out = found
    if pid is None:
        return False
    if module.check_mode:
        stopped.append({"pid": pid, "rank": rank, "how": "would send SIGTERM", "seconds": 0.0})
        return True
    start = time.monotonic()
    signal_all([pid], signal.SIGTERM)
    how = "SIGTERM"
    if wait_gone([pid], grace):
        signal_all([pid], signal.SIGKILL)
        how = f"SIGKILL after {grace}s"
        if wait_gone([pid], 10):
            remaining.append({"pid": pid, "args": out.strip()})
    stopped.append({"pid": pid, "rank": rank, "how": how, "seconds": round(time.monotonic() - start, 2)})
    return True


def argument_spec():
    return dict(
        rank=dict(type="int"),
        **SERVER_SPEC,
        plist=dict(type="path"),
        grace=dict(type="int", default=30),
        **COMMAND_TIMEOUT_SPEC,
    )


def ranks_to_stop(rank, run_dir):
    """The rank asked for, else every rank with a file in the run directory."""
    if rank is not None:
        return [rank]
    try:
        return ranks_in(os.listdir(run_dir))
    except OSError:
        return []


def current_run_ids(module, run_dir, ranks):
    """The run ids of what runs now, before anything moves: leftovers are found by them. One not
    of the toolkit's form is warned about and left out."""
    run_ids = []
    for rank in ranks:
        rid = read_json(f"{run_dir}/rank{rank}.json").get("run_id")
        if rid and not RUN_ID_RE.fullmatch(str(rid)):
            module.warn(
                f"{run_dir}/rank{rank}.json names run id {str(rid)[:40]!r}, not one the toolkit makes: "
                "its processes are looked for by their recorded PIDs only"
            )
        elif rid and rid not in run_ids:
            run_ids.append(rid)
    return run_ids


def stop_launchd(module, p, launchd, stopped):
    """Boot the launchd job out (by label) and remove its plist. Returns changed."""
    changed = False
    launchctl = module.get_bin_path("launchctl", required=True)
    target = f"system/{p['label']}"
    rc, out, _err = run(module, [launchctl, "print", target])
    job = parse_launchctl_print(out if rc == 0 else "")
    if job["loaded"]:
        changed = True
        if not module.check_mode:
            start = time.monotonic()
            cmd = [launchctl, "bootout", target]
            # bootout waits for the job to exit: up to its ExitTimeOut (the grace), then SIGKILL
            rc, out, err = run(module, cmd, timeout=p["grace"] + 30)
            # 3 / 113: the job went away meanwhile (not loaded)
            if rc not in (0, 3, 113):
                module.fail_json(
                    msg=f"launchctl bootout {target} failed: {(err or out).strip()}; run the stop with become (sudo)",
                    rc=rc,
                    cmd=cmd,
                    stderr=err,
                )
            launchd["booted_out"] = True
            if job["pid"]:
                stopped.append(
                    {
                        "pid": job["pid"],
                        "rank": None,
                        "how": "launchctl bootout",
                        "seconds": round(time.monotonic() - start, 2),
                    }
                )
    if p["plist"] and os.path.exists(p["plist"]):
        changed = True
        if not module.check_mode:
            os.unlink(p["plist"])
            launchd["plist_removed"] = True
    return changed


def become_run_dir_owner(module, run_dir, launchd, stopped):
    """Only launchd needed root (stop_launchd). From here on this runs as the user whose run
    directory it is: what it reads there, and every process it signals, are that user's."""
    if os.path.lexists(run_dir):
        try:
            become_owner(run_dir)
        except OSError as exc:
            module.fail_json(
                msg=f"refusing to stop the server from {run_dir}: {exc}. Fix: the run directory must be "
                "a directory of the login user's own (set mlx_cluster_remote_dir to one)",
                launchd=launchd,
                stopped=stopped,
            )


def stop_ranks(module, ps, run_dir, ranks, grace, stopped, supervisors, remaining):
    """Each rank: found, its supervisor told, the rank stopped, the supervisor reaped. Returns changed."""
    changed = False
    for rank in ranks:
        start = time.monotonic()
        found = find_rank(module, ps, run_dir, rank)
        told, keeper = tell_supervisor(module, ps, run_dir, rank, supervisors)
        did = stop_rank(module, rank, found, grace, stopped, remaining)
        if keeper:
            reap_supervisor(keeper, rank, start, supervisors, remaining)
        changed = changed or did or told
    return changed


def end_leftovers(module, run_ids, stopped, supervisors, remaining):
    """Anything else of those starts still alive on this Mac (by run id, never by name):
    SIGTERM, then SIGKILL. Returns what was found (the leftovers)."""
    done = {s["pid"] for s in stopped + supervisors if not module.check_mode}
    found = [
        f
        for f in processes_of_runs(module, Runner(module.params["command_timeout"]), run_ids)
        if f["pid"] not in done and alive(f["pid"], zombie_is_gone=True)
    ]
    if found and not module.check_mode:
        pids = [f["pid"] for f in found]
        signal_all(pids, signal.SIGTERM)
        left = wait_gone(pids, 5)
        signal_all(left, signal.SIGKILL)
        left = wait_gone(left, 5)
        remaining += [f for f in found if f["pid"] in left]
    return found


def tidy_rank_files(module, run_dir, ranks):
    """A stopped rank leaves no state a new start could mistake for its own: its state files
    set aside (the last one kept), its PID files removed. Returns changed."""
    tidy = []
    for rank in ranks:
        f = rank_files(run_dir, rank)
        for path, aside in (
            (f["state"], f["last"]),
            (f["pid"], None),
            (f["keeper"], f["keeper_last"]),
            (f["keeper_pid"], None),
        ) + (((f"{run_dir}/state.json", f"{run_dir}/state.last.json"),) if rank == 0 else ()):
            if os.path.exists(path):
                tidy.append((path, aside))
    if not module.check_mode:
        for path, aside in tidy:
            if aside:
                os.replace(path, aside)
            else:
                os.unlink(path)
    return bool(tidy)


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("supervisor", "launchd", ("plist",))],
        supports_check_mode=True,
    )
    p = module.params
    run_dir = p["run_dir"].rstrip("/") or "/"
    why = setting_problem(p["label"], {"the run directory (mlx_server_run_dir)": run_dir})
    if why:
        module.fail_json(msg=why)
    ps = module.get_bin_path("ps", required=True)
    ranks = ranks_to_stop(p["rank"], run_dir)
    changed = False
    launchd = {"booted_out": False, "plist_removed": False}
    stopped, supervisors, leftovers, remaining = [], [], [], []
    run_ids = current_run_ids(module, run_dir, ranks)
    if p["supervisor"] == "launchd":
        changed = stop_launchd(module, p, launchd, stopped)
    become_run_dir_owner(module, run_dir, launchd, stopped)
    changed = stop_ranks(module, ps, run_dir, ranks, p["grace"], stopped, supervisors, remaining) or changed
    if run_ids:
        leftovers = end_leftovers(module, run_ids, stopped, supervisors, remaining)
        changed = changed or bool(leftovers)
    changed = tidy_rank_files(module, run_dir, ranks) or changed
    result = dict(
        changed=changed,
        stopped=stopped,
        supervisors=supervisors,
        leftovers=leftovers,
        remaining=remaining,
        launchd=launchd,
        run_ids=run_ids,
        ranks=ranks,
    )
    if remaining:
        module.fail_json(
            msg=f"processes {[r['pid'] for r in remaining]} did not end even after SIGKILL; "
            "look at them with `ps -p PID` on this Mac",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
