#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: mlx_server_status
short_description: Show (or wait for) this Mac's rank of the MLX server
description:
  - Reads the rank's files in I(run_dir) (C(rank<N>.pid), C(rank<N>.json), the log) and checks
    that the recorded PID still runs our rank (its command line names the run directory and
    the run id). Processes are never looked up by name.
  - Reports the serving loop's progress from the rank's heartbeat (C(progress) in
    C(rank<N>.json)), that is requests done, the request under way and its tokens, rank 0's
    queue, seconds since the last turn or token; a ready rank that made no progress for its
    stall bound is C(stalled), which is unhealthy and a problem (the server stage restarts it).
  - Reads the rank's supervisor (C(keeper<N>.pid), C(keeper<N>.json)), that is whether it runs,
    the restarts it made and why, and whether it gave up.
  - With I(supervisor=launchd), also reads C(launchctl print system/<label>) (the job's PID is
    the supervisor's). Run as root for that (become), the module reads the files of I(run_dir),
    and asks rank 0's API, as the user who owns it, never through a symbolic link, and is root
    again only for the next C(launchctl print).
  - Refuses a I(label) that is not dot-separated words and a I(run_dir) a shell would read
    (whitespace, quotes, C($), C(..)), naming the setting.
  - With I(wait) > 0, polls until the rank is ready (for rank 0 with I(url), C(/v1/models) lists
    the model and, with I(chat), a short chat completion returns) or has died, or the time is
    up. The module itself does not fail on an unhealthy rank, it returns C(healthy) and
    C(reason), so the caller can report every rank together.
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.attributes
  - mlx.cluster.command_timeout
options:
  run_dir:
    description: The server's directory on this Mac.
    type: path
    required: true
  rank:
    description: This Mac's rank; default the rank whose files are in I(run_dir) (one rank per Mac).
    type: int
  supervisor:
    description: What keeps the rank running.
    type: str
    choices: [launchd, process]
    default: launchd
  label:
    description: launchd label (dot-separated words of letters, digits, C(_) and C(-)).
    type: str
    default: org.mlx-cluster.server
  want_hash:
    description: Settings hash the rank should run with; sets C(problems).
    type: str
    default: ""
  wait:
    description: Seconds to wait for the rank to be ready (0 = look once).
    type: int
    default: 0
  url:
    description: Rank 0's base URL (C(http://address:port)), probed when this Mac runs rank 0.
    type: str
    default: ""
  model_id:
    description: Model name C(/v1/models) must list (empty = any).
    type: str
    default: ""
  chat:
    description: Also run one short chat completion (rank 0 with I(url)).
    type: bool
    default: false
  log_lines:
    description: Lines of the rank's log to return.
    type: int
    default: 20
  api_key:
    description: The server's API key (mlx_server_api_key), sent with the probes of I(url); empty sends none.
    type: str
    default: ""
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Wait for every rank, chat once through rank 0
  mlx_server_status:
    run_dir: /Users/admin/mlx-cluster/server
    rank: "{{ mlx_server_rank.rank }}"
    wait: 300
    url: "{{ 'http://127.0.0.1:8080' if mlx_server_rank.rank == 0 else '' }}"
    chat: true
  become: true  # launchd (the default supervisor): launchctl print in the system domain
  register: mlx_server_health
"""

RETURN = r"""
status:
  description: The rank as found.
  returned: always
  type: dict
  sample:
    rank: 0
    running: true
    pid: 4242
    phase: ready
    message: serving qwen on http://127.0.0.1:8080/v1
    started: 1763700000.5
    since: "2025-11-21T05:40:00+00:00"
    until: null
    settings_hash: 9f2c...
    run_id: k2x9...
    launchd: null
    supervisor: {"pid": 4240, "running": true, "state": "running", "message": "", "restarts": 0,
                 "last_restart": null}
    progress: {"generating": false, "tokens": 8, "requests_done": 3, "queue_depth": 0,
               "last_turn_at": 1763700100.2, "last_token_at": 1763700090.1,
               "seconds_since_progress": 0.3, "stall_timeout": 120, "stalled": ""}
    progress_line: "3 request(s) done, idle (last turn 0.3s ago)"
    log_tail: "..."
    problems: []
    http: {"models": ["qwen"], "chat": "Hello"}
healthy:
  description: With I(wait), whether the rank became ready in time.
  returned: always
  type: bool
  sample: true
reason:
  description: Why the rank is not healthy (empty when it is).
  returned: always
  type: str
  sample: "rank 1 exited (phase failed: loading /models/qwen failed: ...)"
"""

import json
import os
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, Runner, alive, module_run
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_server import (
    SERVER_SPEC,
    open_nofollow,
    parse_launchctl_print,
    problems,
    process_matches,
    progress_line,
    progress_report,
    rank_files,
    ranks_in,
    read_json,
    read_pid,
    reading_as_owner,
    setting_problem,
)

# Seconds a rank that is not (yet) running gets before the wait calls it dead.
STARTUP_GRACE = 5.0


def tail(path, n):
    """The log's last n lines (of its last 64 KiB); "" when missing or a symbolic link."""
    try:
        with open_nofollow(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return ""


def run(module, argv, timeout=None):
    """(rc, out, err) of argv, bounded (command_timeout, or `timeout` when longer)."""
    bound = max(module.params["command_timeout"], timeout or 0)
    return module_run(module, Runner(bound), argv)


def ours(module, pid, run_dir, run_id):
    if not pid or not alive(pid):
        return False
    ps = module.get_bin_path("ps", required=True)
    rc, out, _err = run(module, [ps, "-ww", "-p", str(pid), "-o", "pid=,args="])
    return rc == 0 and process_matches(out, pid, run_dir, run_id)


def launchd_job(module, label):
    launchctl = module.get_bin_path("launchctl")
    if launchctl is None:
        module.warn("launchctl is not on this host: the launchd job cannot be read (not macOS?)")
        return {
            "loaded": False,
            "state": None,
            "pid": None,
            "last_exit_code": None,
            "path": None,
            "error": "no launchctl",
        }
    rc, out, err = run(module, [launchctl, "print", f"system/{label}"])
    # exit 113: "Could not find service ... in domain for system" = not loaded
    job = parse_launchctl_print(out if rc == 0 else "")
    if rc not in (0, 113):
        job["error"] = (err or out).strip()[:500]
    return job


def supervisor_of(module, files, run_dir, run_id, job):
    """The rank's supervisor: its PID (launchd's job PID under launchd), whether it runs
    (checked like the rank's: its command line carries our run dir and run id), its state."""
    state = read_json(files["keeper"])
    pid = (job or {}).get("pid") or read_pid(files["keeper_pid"]) or state.get("pid")
    running = ours(module, pid, run_dir, run_id)
    restarts = state.get("restarts") if isinstance(state.get("restarts"), list) else []
    return {
        "pid": pid if running else None,
        "running": running,
        "state": state.get("state"),
        "message": state.get("message", ""),
        "restarts": len(restarts),
        "last_restart": restarts[-1] if restarts else None,
        "max_restarts": state.get("max_restarts"),
    }


def look(module, p, rank):
    """The rank's status. Under launchd the module runs as root for `launchctl print` alone:
    the run directory's files are read as their owner (reading_as_owner)."""
    run_dir = p["run_dir"].rstrip("/") or "/"
    job = launchd_job(module, p["label"]) if p["supervisor"] == "launchd" else None
    try:
        with reading_as_owner(run_dir):
            return read_status(module, p, rank, run_dir, job)
    except FileNotFoundError:
        return read_status(module, p, rank, run_dir, job)  # (nothing there to read as anyone)
    except OSError as exc:
        module.fail_json(
            msg=f"refusing to read the server's status from {run_dir}: {exc}. Fix: the run directory "
            "must be a directory of the login user's own (set mlx_cluster_remote_dir to one)"
        )


def read_status(module, p, rank, run_dir, job):
    files = rank_files(run_dir, rank)
    info = read_json(files["state"])
    pid = read_pid(files["pid"])
    # The last stopped start's state, shown only while nothing newer was started (a PID file
    # without a state file is a start that died before it wrote one: its log says why).
    last = read_json(files["last"]) if not info and pid is None else {}
    if info and info.get("pid") not in (None, pid) and not alive(pid or 0):
        pid = info.get("pid")
    running = ours(module, pid, run_dir, info.get("run_id") or None)
    shown = info or last
    started = shown.get("started")
    st = {
        "rank": rank,
        "running": running,
        "pid": pid if running else None,
        "phase": shown.get("phase") if shown else None,
        "message": shown.get("message", "") if shown else "",
        "started": started,
        "since": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds") if started else None,
        "updated": shown.get("updated"),
        "until": None
        if running or not shown.get("updated")
        else datetime.fromtimestamp(shown["updated"], timezone.utc).isoformat(timespec="seconds"),
        "settings_hash": shown.get("settings_hash"),
        "run_id": shown.get("run_id"),
        "host": shown.get("host"),
        "world_size": shown.get("world_size"),
        "launchd": job,
        "log": files["log"],
        "log_tail": tail(files["log"], p["log_lines"]),
        "supervisor": supervisor_of(module, files, run_dir, info.get("run_id") or None, job) if info else None,
        "progress": progress_report(info, time.monotonic(), time.time()) if running else None,
    }
    st["progress_line"] = progress_line(st["progress"])
    if running and info.get("phase") in ("stopped", "failed"):
        st["phase"] = info["phase"]  # exiting: it said so already
    st["problems"] = problems(st, p["want_hash"], p["supervisor"]) if p["want_hash"] else []
    return st


def http(url, body=None, timeout=10.0, api_key=""):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET", headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our own URL
        return resp.status, json.loads(resp.read().decode() or "null")


def probe(p, deadline):
    """-> (ok, detail dict or error text), asked as the run directory's owner: under launchd the
    module runs as root for `launchctl print` alone, and an HTTP client needs none of root's
    rights (reading_as_owner; not root: nothing changes)."""
    try:
        with reading_as_owner(p["run_dir"].rstrip("/") or "/"):
            return ask_api(p, deadline)
    except OSError as exc:  # (the run directory became a link, or went away, since it was read)
        return False, f"not asked: {exc}"


def ask_api(p, deadline):
    """-> (ok, detail dict or error text): /v1/models, then (chat) one token of a chat."""
    base = p["url"].rstrip("/")
    try:
        status, body = http(
            f"{base}/v1/models", timeout=max(1.0, min(10.0, deadline - time.monotonic())), api_key=p["api_key"]
        )
        ids = [m.get("id") for m in (body or {}).get("data", []) if isinstance(m, dict)]
        if status != 200 or (p["model_id"] and p["model_id"] not in ids):
            return False, f"/v1/models answered {status} with {ids}"
        detail = {"models": ids}
        if p["chat"]:
            left = max(5.0, deadline - time.monotonic())
            status, body = http(
                f"{base}/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 1, "temperature": 0},
                timeout=left,
                api_key=p["api_key"],
            )
            choice = ((body or {}).get("choices") or [{}])[0]
            if status != 200 or "message" not in choice:
                return False, f"/v1/chat/completions answered {status}: {json.dumps(body)[:300]}"
            detail["chat"] = choice["message"].get("content", "")
            detail["usage"] = (body or {}).get("usage")
        return True, detail
    except urllib.error.HTTPError as exc:
        return False, f"{exc.url} answered HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"{base} did not answer: {getattr(exc, 'reason', exc)}"


def describe(st):
    """The rank's last word: its phase and message (a dead rank's phase says where it died)."""
    phase, msg = st["phase"], st["message"]
    if phase is None:
        return "it wrote no state: it exited at once or never started; see its log"
    if not st["running"] and phase in ("starting", "init", "loading", "ready", "stopping"):
        return f"it died in phase {phase}{': ' + msg if msg else ''}"
    return f"{phase}{': ' + msg if msg else ''}"


def pending(st):
    """A rank without a word yet whose supervisor is about to start it: worth waiting for."""
    job = st.get("launchd") or {}
    keeper = st.get("supervisor") or {}
    return (bool(job.get("loaded")) and job.get("state") in ("running", "spawn scheduled", "spawning", "xpcproxy")) or (
        keeper.get("running") and keeper.get("state") in ("starting", "running", "waiting")
    )


def stalled(st):
    return (st.get("progress") or {}).get("stalled") or ""


def argument_spec():
    return dict(
        rank=dict(type="int"),
        **SERVER_SPEC,
        want_hash=dict(type="str", default=""),
        wait=dict(type="int", default=0),
        url=dict(type="str", default=""),
        model_id=dict(type="str", default=""),
        chat=dict(type="bool", default=False),
        log_lines=dict(type="int", default=20),
        api_key=dict(type="str", default="", no_log=True),
        **COMMAND_TIMEOUT_SPEC,
    )


def no_rank_status():
    """The status of a host with no rank of the server."""
    return {
        "rank": None,
        "running": False,
        "phase": None,
        "message": "",
        "pid": None,
        "since": None,
        "started": None,
        "settings_hash": None,
        "run_id": None,
        "launchd": None,
        "supervisor": None,
        "progress": None,
        "progress_line": "",
        "log_tail": "",
        "problems": ["no rank of the server on this host"],
    }


def rank_to_read(module, p):
    """The rank asked for, else the first with a file in the run directory; with none, the
    module answers (not healthy) here."""
    if p["rank"] is not None:
        return p["rank"]
    try:
        found = ranks_in(os.listdir(p["run_dir"]))
    except OSError:
        found = []
    if not found:
        module.exit_json(
            changed=False,
            status=no_rank_status(),
            healthy=False,
            reason="no rank of the server on this host",
        )
    return found[0]


def health_now(p, rank, st):
    """(healthy, reason) of the rank as it is, without waiting (its API probed once when
    ready); the probe's answer goes into st["http"], its failure into st["problems"]."""
    healthy, reason = st["running"] and st["phase"] == "ready", ""
    if not st["running"]:
        reason = f"rank {rank} is not running ({describe(st)})"
    elif not healthy:
        reason = f"rank {rank} is not ready ({describe(st)})"
    elif stalled(st):
        healthy, reason = False, f"rank {rank} is stalled: {stalled(st)}"
    elif p["url"]:
        healthy, st["http"] = probe(p, time.monotonic() + 10)
        if not healthy:
            reason = f"rank {rank}'s API does not answer: {st['http']}"
            if p["want_hash"]:
                st["problems"].append(reason)
    return healthy, reason


def given_up(st, rank, began):
    """Why waiting for the rank is over though it is not ready, or "" while it may come up."""
    if not st["running"]:
        # A rank that said it failed or stopped is done (this is a start: its supervisor
        # may try again, but the failure is the news); one without a word may not have
        # written its files yet (just started), or its supervisor is about to start it.
        if st["phase"] in ("failed", "stopped") or time.monotonic() - began >= STARTUP_GRACE and not pending(st):
            return f"rank {rank} is not running ({describe(st)})"
    elif st["phase"] in ("stopped", "failed"):
        return f"rank {rank} is exiting ({describe(st)})"
    elif stalled(st):
        return f"rank {rank} is stalled: {stalled(st)}"
    return ""


def timed_out(st, rank, wait, http_detail):
    """Why the rank is not healthy when the wait is over."""
    if st["running"] and st["phase"] == "ready":
        return f"rank {rank} is up but its API is not healthy after {wait}s: {http_detail}"
    if st["running"]:
        return f"rank {rank} did not come up within {wait}s ({describe(st)})"
    return f"rank {rank} is not running ({describe(st)})"


def wait_healthy(module, p, rank, st, began, deadline):
    """Look at the rank every second until it is ready (and its API answers) or the wait is
    over; the module answers here either way."""
    http_detail = None
    while True:
        reason = given_up(st, rank, began)
        if reason:
            break
        if st["running"] and st["phase"] == "ready":
            if not p["url"]:
                module.exit_json(changed=False, status=st, healthy=True, reason="")
            ok, http_detail = probe(p, deadline)
            st["http"] = http_detail
            if ok:
                module.exit_json(changed=False, status=st, healthy=True, reason="")
        if time.monotonic() >= deadline:
            reason = timed_out(st, rank, p["wait"], http_detail)
            break
        time.sleep(1.0)
        st = look(module, p, rank)
    st["http"] = http_detail
    module.exit_json(changed=False, status=st, healthy=False, reason=reason)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    why = setting_problem(p["label"], {"the run directory (mlx_server_run_dir)": p["run_dir"]})
    if why:
        module.fail_json(msg=why)
    rank = rank_to_read(module, p)
    if rank != 0:
        p["url"] = ""  # only rank 0 serves HTTP
    began = time.monotonic()
    deadline = began + p["wait"]
    st = look(module, p, rank)
    if p["wait"] <= 0:
        healthy, reason = health_now(p, rank, st)
        module.exit_json(changed=False, status=st, healthy=healthy, reason=reason)
    wait_healthy(module, p, rank, st, began, deadline)


if __name__ == "__main__":
    main()
