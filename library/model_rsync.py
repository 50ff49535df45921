#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
module: model_rsync
short_description: Copy a model directory with rsync, from where the task runs to a host over ssh
description:
  - Copies the contents of the directory O(src) into the directory O(dest) on O(host) with rsync
    over ssh (or locally when O(host) is empty). Runs wherever the task runs, on the controller
    (C(delegate_to) localhost) or on the Mac that already has the model (rank 0), which then
    pushes to its peers over their Thunderbolt addresses.
  - C(changed) is measured from rsync's itemized changes (C(--out-format=%i %n%L), what C(-i)
    means in GNU rsync and openrsync), that is a file sent, a directory or link created, or a file
    deleted. Time or permission fixes alone are reported in RV(attrs_only), and files itemized as
    sent with no difference at all (openrsync's C(<f.......)) in RV(unchanged); neither counts.
  - Only the model directory is written; the source and destination both get a trailing slash,
    and C(--delete) is passed only with O(delete=true). A destination of C(/), the home directory,
    anything above it or fewer than two levels below it is refused before rsync runs.
  - Works with GNU rsync 3.x and with macOS's openrsync (C(/usr/bin/rsync) on macOS 15.4+), since only
    long options both take are used.
  - Runs with C(HF_HUB_OFFLINE=1) and C(TRANSFORMERS_OFFLINE=1) and a C locale; nothing is downloaded.
version_added: "0.1.0"
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  src:
    description: Directory whose contents are copied (on the machine the task runs on).
    type: path
    required: true
  dest:
    description: >-
      Absolute path of the model directory on O(host). Its parent must exist (rsync creates only the last level).
    type: str
    required: true
  host:
    description:
      - ssh destination (C(name), C(address), C(user@address)). Empty for a local copy.
    type: str
    default: ""
  ssh_args:
    description:
      - Extra ssh options, one word per item, e.g. C([-F, /path/ssh_config]) or
        C([-o, HostKeyAlias=m2, -o, BatchMode=yes]). Words may not hold whitespace or quotes
        (rsync takes its remote shell as one string).
    type: list
    elements: str
    default: []
  ssh:
    description: The ssh program (looked up on PATH unless a path), as Ansible's C(ansible_ssh_executable).
    type: str
    default: ssh
  host_label:
    description: Inventory name of O(host), for messages. Empty = O(host).
    type: str
    default: ""
  ssh_trust:
    description:
      - Whose ssh keys are used, for the fix in a failure message. C(yours) (controller to Mac, the
        user's own login) or C(toolkit) (Mac to Mac, the trust the ssh_trust role sets up).
    type: str
    choices: [yours, toolkit]
    default: yours
  dest_home:
    description:
      - Home directory of the user on O(host), for the destination safety rules. Empty means this
        machine's home for a local copy; for a remote one the destination must then have at
        least four path components.
    type: str
    default: ""
  delete:
    description: Delete files in O(dest) that are not in O(src) (inside O(dest) only).
    type: bool
    default: false
  checksum:
    description: Compare files by checksum instead of size and modification time (slow on big models).
    type: bool
    default: false
  log_file:
    description:
      - File rsync appends its itemized progress to, one line per file as it completes
        (C(tail -f) it during a long copy). GNU rsync 3.x and macOS 26's openrsync; macOS 15's
        openrsync has no C(--log-file) (asked with C(rsync --log-file=/dev/null --version)), so there
        the module warns and copies without one.
    type: path
  rsync_path:
    description:
      - The rsync to start on O(host) (C(--rsync-path)), e.g. C(/opt/homebrew/bin/rsync) for
        Homebrew's rsync 3.x instead of macOS's openrsync. Empty = the far end's default.
    type: str
    default: ""
  source_name:
    description: Name of the machine the task runs on, for messages. Empty = its host name.
    type: str
    default: ""
  progress_interval:
    description:
      - Seconds between two progress lines printed while the copy runs (bytes sent, the model's
        size, rate), each naming the host as Ansible does in results. The action plugin of this module
        runs it as a plain task would and reads its progress file over a second SSH session while
        it copies; no line is printed before this many seconds, so a short or empty copy prints
        none. 0 = no progress lines.
      - Not with C(async) on the task (Ansible's own polling is then used), nor in check mode.
    type: int
    default: 0
  stall_timeout:
    description:
      - Seconds the copy may go without moving any data before rsync ends it (C(--timeout), which
        GNU rsync and openrsync both take); the failure names both ends and says the next run
        resumes the copy. 0 = no bound of its own (a dead connection is then ended by ssh's
        keepalives from O(ssh_args), if any).
    type: int
    default: 120
  wait_for:
    description:
      - >-
        Pass on a copy that is still arriving (the tree of C(model_sync_source=tree)) - the
        source's files, C({relpath: {size, mtime}}) (RV(mlx.cluster.model_manifest#module:files)).
        O(src) is then this machine's own copy, which its own sender is still writing. Each file is
        sent as soon as it is complete in O(src): under its final name with the source's size and
        modification time (rsync, GNU and openrsync alike, writes into a temporary
        C(.<name>.XXXX) and renames it into place when done, times set). Each pass is one rsync
        of the directory with an anchored C(--exclude) for every file not yet complete and for
        its temporary name, so every other option applies as without it; a last pass runs once
        every file is complete. Between passes the copy is looked at (C(stat), no rsync) every
        0.2 s. The result adds up the passes.
      - With O(host), the passes share one SSH connection (C(ControlMaster), its socket in a
        temporary directory of this run's own, C(ControlPersist) 30 s), ended with C(ssh -O exit)
        when the passes are done.
      - When no file grows or completes for O(stall_timeout) seconds (600 when O(stall_timeout)
        is 0), fails naming this machine, O(upstream_name) and the fix.
      - Ignored in check mode (a dry run of O(src) as it is).
    type: dict
  upstream_name:
    description: With O(wait_for), the machine that sends this machine its own copy, for messages.
    type: str
    default: ""
  skip:
    description:
      - Files of the model, relative to O(src), that this copy leaves out because another sender
        brings them to O(host) at the same time (a copy of the model_sync role's tree that comes
        two ways, the C(split) of filter C(mlx.cluster.mlx_sync_rounds)). Each is excluded by its anchored name and
        its rsync temporary name, on every pass, so O(delete) leaves them and the other sender's
        files in progress alone; with O(wait_for), this copy waits only for the other files.
    type: list
    elements: str
    default: []
  progress_file:
    description:
      - File the module keeps up to date with the copy's progress while rsync runs (JSON with
        C(bytes), C(files), C(total), C(rate), C(elapsed), C(done)), from rsync's C(--progress)
        output (GNU rsync and openrsync print it alike). Set by the action plugin when
        O(progress_interval) is on; empty = rsync runs without C(--progress).
    type: path
attributes:
  check_mode:
    support: full
    details: Runs rsync with C(--dry-run); C(changed) and the lists say what would change.
  diff_mode:
    support: full
    details: The itemized changes, as rsync printed them.
notes:
  - "With or without O(progress_interval) the copy has no time limit of its own, since its length
    depends on the model's size; a copy that stops moving data is ended by O(stall_timeout)."
  - "I(command_timeout) bounds C(rsync --version); the transfer is bounded by O(stall_timeout) (no data moved),
    not by its total length."
  - Key-based ssh from the machine running the task to O(host) is required (C(BatchMode=yes) is advised).
author:
  - mlx-cluster contributors
"""

EXAMPLES = r"""
- name: Push the model from the controller
  model_rsync:
    src: /data/models/Qwen3-4B-4bit
    dest: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    host: 192.168.1.22
    ssh_args: [-o, BatchMode=yes, -o, User=admin]
    host_label: studio-2
  delegate_to: localhost

- name: Pass the model on from studio-2 to studio-3 while studio-2 still receives it
  model_rsync:
    src: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    dest: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    host: 10.208.0.6
    ssh_args: [-i, ~/.ssh/mlx_cluster_ed25519, -o, BatchMode=yes]
    ssh_trust: toolkit
    host_label: studio-3
    wait_for: "{{ source_manifest.files }}"   # {relpath: {size, mtime}}, model_manifest
    upstream_name: studio-1
  delegate_to: studio-2

- name: Push from rank 0 to a peer over a Thunderbolt cable
  model_rsync:
    src: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    dest: /Users/admin/mlx-cluster/models/Qwen3-4B-4bit
    host: 10.208.0.2
    ssh_args: [-i, ~/.ssh/mlx_cluster_ed25519, -o, UserKnownHostsFile=~/.ssh/mlx_cluster_known_hosts,
               -o, BatchMode=yes, -l, admin]
    ssh_trust: toolkit
    host_label: studio-2
    dest_home: /Users/admin
    log_file: /Users/admin/mlx-cluster/logs/model_sync.log
    progress_interval: 10     # "studio-2: 1.2/3.4 GB (35%), 850 MB/s" every 10 s
  delegate_to: studio-1
"""

RETURN = r"""
transferred:
  description: Files whose data was (or, in check mode, would be) copied, relative to O(dest).
  returned: always
  type: list
  elements: str
  sample: ["config.json", "model.safetensors"]
created:
  description: Directories and links created.
  returned: always
  type: list
  elements: str
  sample: ["./", "sub/"]
deleted:
  description: Files deleted (only with O(delete)).
  returned: always
  type: list
  elements: str
  sample: ["old.safetensors"]
attrs_only:
  description: Items whose time or permissions only were fixed (not a change of the model).
  returned: always
  type: list
  elements: str
  sample: ["tokenizer.json"]
unchanged:
  description: Files rsync itemized as sent although nothing about them differs (openrsync as the sender).
  returned: always
  type: list
  elements: str
  sample: ["config.json"]
rc:
  description: rsync's exit code.
  returned: always
  type: int
  sample: 0
cmd:
  description: The rsync argv that ran.
  returned: always
  type: list
  elements: str
  sample: ["/usr/bin/rsync", "--recursive", "--copy-links", "--perms", "--times", "--whole-file",
           "--out-format=%i %n%L", "--rsh", "/usr/bin/ssh -o BatchMode=yes", "/src/", "m2:/dest/"]
log_file:
  description: The progress file rsync wrote, or null when none was written.
  returned: always
  type: str
  sample: /Users/admin/mlx-cluster/logs/model_sync.log
passes:
  description:
    - With O(wait_for), the rsync passes that ran, each C({excluded, seconds, rc}) (how many files
      were still arriving, how long the pass took); RV(cmd) is then the last pass's argv. Empty
      without O(wait_for).
  returned: always
  type: list
  elements: dict
  sample: [{"excluded": 3, "seconds": 1.2, "rc": 0}, {"excluded": 0, "seconds": 0.4, "rc": 0}]
"""

import functools
import os
import shutil
import socket
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_progress import ProgressWriter
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import (
    LOG_FILE_PROBE,
    OFFLINE_ENV,
    RELAY_WAIT_DEFAULT,
    CopyProgress,
    UpstreamStalled,
    check_dest,
    explain_failure,
    merge_itemized,
    parse_itemized,
    parse_rsync_version,
    relay_excludes,
    relay_master_args,
    relay_master_exit_argv,
    relay_passes,
    remote_spec,
    rsync_argv,
    ssh_command,
    ssh_login,
    stall_message,
    without_progress,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import COMMAND_TIMEOUT_SPEC, CommandTimeout, Runner


def tree_size(path, skip=()):
    """Bytes of the files below `path` but `skip` (paths relative to it), symlinks followed (what
    --copy-links sends); None when the directory cannot be read."""
    total, skip = 0, set(skip)
    try:
        for root, _dirs, files in os.walk(path, followlinks=True):
            for name in files:
                full = os.path.join(root, name)
                if skip and os.path.relpath(full, path).replace(os.sep, "/") in skip:
                    continue
                try:
                    total += os.stat(full).st_size
                except OSError:
                    continue
    except OSError:
        return None
    return total


def look(path):
    """{rel: (size, mtime)} of every file below `path` now, temporary ones included ({} when absent)."""
    out = {}
    for root, _dirs, files in os.walk(path, followlinks=True):
        for name in files:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:  # renamed or removed since the listing: looked at again next time
                continue
            out[os.path.relpath(full, path).replace(os.sep, "/")] = (st.st_size, st.st_mtime)
    return out


def watch_progress(path, total):
    """(on_output for the runner, finish(rc)) keeping `path` up to date; (None, None) without."""
    if not path:
        return None, None
    progress = CopyProgress(total=total)
    writer = ProgressWriter(path)
    writer.update(progress.state(time.monotonic()), time.monotonic(), force=True)

    def on_output(text):
        now = time.monotonic()
        if progress.feed(text, now):
            writer.update(progress.state(now), now)

    def finish():
        now = time.monotonic()
        writer.update(progress.state(now, done=True), now, force=True)
        return writer.error

    return on_output, finish


def usable_log_file(module, runner, rsync, log_file, source):
    """log_file when this rsync can write it, else None with a warning.

    GNU rsync 3.x can; openrsync can on macOS 26 but not on macOS 15.4-15.x, and both print the
    same --version, so openrsync is asked: `--log-file=/dev/null --version` exits 0 only when the
    option is known (both stop at --version, after parsing the options before it).
    """
    if not log_file:
        return None
    try:
        rc, out, err = runner.run([rsync, "--version"])
        info = parse_rsync_version(out if rc == 0 else "")
        accepted = info["log_file"]
        if accepted is None:
            accepted = runner.run([rsync, *LOG_FILE_PROBE])[0] == 0
    except CommandTimeout as exc:
        module.fail_json(msg=exc.msg, **exc.result())
    if not accepted:
        module.warn(
            f"{rsync} on {source} is {info['flavour']} {info['version'] or ''}".rstrip()
            + f", which cannot write a progress file (no --log-file): copying without {log_file} "
            "(progress_interval still shows the copy as it runs)"
        )
        return None
    parent = os.path.dirname(log_file)
    if parent:
        os.makedirs(parent, exist_ok=True)
    return log_file


def module_args():
    """The options DOCUMENTATION describes, as AnsibleModule takes them."""
    return dict(
        src=dict(type="path", required=True),
        dest=dict(type="str", required=True),
        host=dict(type="str", default=""),
        ssh_args=dict(type="list", elements="str", default=[]),
        ssh=dict(type="str", default="ssh"),
        host_label=dict(type="str", default=""),
        ssh_trust=dict(type="str", choices=["yours", "toolkit"], default="yours"),
        dest_home=dict(type="str", default=""),
        delete=dict(type="bool", default=False),
        checksum=dict(type="bool", default=False),
        log_file=dict(type="path"),
        rsync_path=dict(type="str", default=""),
        source_name=dict(type="str", default=""),
        progress_interval=dict(type="int", default=0),
        progress_file=dict(type="path"),
        stall_timeout=dict(type="int", default=120),
        wait_for=dict(type="dict"),
        upstream_name=dict(type="str", default=""),
        skip=dict(type="list", elements="str", default=[]),
        **COMMAND_TIMEOUT_SPEC,
    )


def checked_request(module, relay):
    """(source, skip_words, wait_for): this Mac's name, the `--exclude` words of `skip` and what
    a relay waits for but them; fails on a refused destination or, but for a relay, a missing
    source directory."""
    p = module.params
    host, dest = p["host"], p["dest"]
    source = p["source_name"] or socket.gethostname()
    home = p["dest_home"] or ("" if host else os.path.expanduser("~"))
    problem = check_dest(dest, home)
    if problem:
        module.fail_json(msg=f"refusing to sync into {remote_spec(host, dest)}: {problem}")
    # what another sender brings (skip) stays out of every pass, and out of what a relay waits for
    skip_words, skipped = relay_excludes(p["skip"]), set(p["skip"])
    wait_for = {rel: e for rel, e in (p["wait_for"] or {}).items() if rel not in skipped}
    if not relay and not os.path.isdir(p["src"]):
        module.fail_json(
            msg=f"the model directory {p['src']} does not exist on {source}: nothing is "
            "downloaded by this stage; put the model there first"
        )
    return source, skip_words, wait_for


def ssh_transport(module, relay):
    """(ssh, rsh, control): the ssh program, rsync's --rsh and, for a relay, the socket of the
    SSH master its passes share (None without); all None for a local copy."""
    p = module.params
    rsh = ssh = control = None
    if not p["host"]:
        return ssh, rsh, control
    try:
        ssh = p["ssh"] if os.path.isabs(p["ssh"]) else module.get_bin_path(p["ssh"], required=True)
        rsh = ssh_command(ssh, p["ssh_args"])
    except ValueError as exc:
        module.fail_json(msg=f"ssh_args: {exc}")
    if relay:
        # the passes over one SSH connection (relay_master_args), its socket in a directory
        # of this run's own; a temporary directory whose path ssh's -e cannot carry: no sharing
        control_dir = tempfile.mkdtemp(prefix="mlxc-relay-")
        control = os.path.join(control_dir, "cm")
        try:
            rsh = ssh_command(ssh, list(p["ssh_args"]) + relay_master_args(control))
        except ValueError:
            shutil.rmtree(control_dir, ignore_errors=True)
            control = None
    return ssh, rsh, control


def end_master(runner, ssh, control, host):
    """Ends the relay's SSH master, if one was started, and removes its directory."""
    if control is None:
        return
    try:
        runner.run(relay_master_exit_argv(ssh, control, host))
    except (CommandTimeout, OSError):
        pass  # it ends by itself after RELAY_MASTER_IDLE seconds idle
    shutil.rmtree(os.path.dirname(control), ignore_errors=True)


def copy_total(p, relay, wait_for):
    """Bytes the copy is to bring: what a relay waits for, else the source directory's (but skip)."""
    if relay:
        return sum(int(e.get("size") or 0) for e in wait_for.values() if isinstance(e, dict))
    return tree_size(p["src"], p["skip"])


def pass_runner(module, runner, rsync, rsh, log_file, progress_file, on_output, skip_words, passes):
    """run_pass(excludes=()) -> (rc, out, err, argv): one rsync pass, recorded in `passes`."""
    p = module.params
    host = p["host"]

    def run_pass(excludes=()):
        argv = rsync_argv(
            rsync,
            p["src"],
            remote_spec(host, p["dest"]),
            ssh_command=rsh,
            dry_run=module.check_mode,
            delete=p["delete"],
            checksum=p["checksum"],
            log_file=log_file,
            rsync_path=p["rsync_path"] if host else None,
            progress=bool(progress_file),
            stall_timeout=p["stall_timeout"],
            excludes=list(excludes) + skip_words,
        )
        started = time.monotonic()
        rc, out, err = runner.run(argv, env_update=OFFLINE_ENV, timeout=None, on_output=on_output)
        passes.append({"excluded": len(excludes) // 2, "seconds": round(time.monotonic() - started, 3), "rc": rc})
        return rc, out, err, argv

    return run_pass


def relay_copy(module, source, wait_for, run_pass, passes, finish, end):
    """The relay's passes' results, as files arrive; fails when its sender stalls. `end()` ends
    the SSH master either way (after the failure's JSON, as a `finally`)."""
    p = module.params
    try:
        return relay_passes(
            wait_for,
            lambda: look(p["src"]),
            run_pass,
            time.monotonic,
            time.sleep,
            p["stall_timeout"] if p["stall_timeout"] > 0 else RELAY_WAIT_DEFAULT,
        )
    except UpstreamStalled as exc:
        if finish:
            finish()
        module.fail_json(
            msg=stall_message(
                source,
                p["host_label"] or p["host"],
                p["upstream_name"] or "its sender",
                exc.complete,
                exc.pending,
                exc.waited,
            ),
            complete=exc.complete,
            pending=exc.pending,
            passes=passes,
        )
    finally:
        end()


def finish_progress(module, finish):
    """Writes the progress file's last state; a problem writing it is a warning, not a failure."""
    if finish:
        problem = finish()
        if problem:
            module.warn(f"{problem} (the copy itself went on)")


def fail_copy(module, source, last, passes):
    """Fails with why the last pass `(rc, out, err, argv)` failed, in words."""
    p = module.params
    rc, out, err, argv = last
    host = p["host"]
    module.fail_json(
        msg=explain_failure(
            rc,
            err,
            host,
            p["dest"],
            source,
            name=p["host_label"] or host,
            user=ssh_login(p["ssh_args"]),
            trust=p["ssh_trust"],
            stall_timeout=p["stall_timeout"],
        ),
        rc=rc,
        cmd=argv,
        stderr=err,
        stdout=out,
        passes=passes,
    )


def exit_copied(module, results, log_file, passes):
    """Exits with what the passes `results` changed, the last one's rc and argv."""
    rc, _out, _err, argv = results[-1]
    items = merge_itemized([parse_itemized(r[1]) for r in results])
    result = dict(items, rc=rc, cmd=argv, log_file=log_file, passes=passes)
    if module._diff and items["changed"]:
        result["diff"] = {"prepared": "".join(without_progress(r[1]) for r in results)}
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=module_args(), supports_check_mode=True)
    p = module.params
    relay = p["wait_for"] is not None and not module.check_mode
    source, skip_words, wait_for = checked_request(module, relay)
    rsync = module.get_bin_path("rsync", required=True)
    ssh, rsh, control = ssh_transport(module, relay)
    runner = Runner(p["command_timeout"])
    log_file = usable_log_file(module, runner, rsync, p["log_file"], source)
    # a dry run sends nothing, so prints no progress
    progress_file = p["progress_file"] if not module.check_mode else None
    on_output, finish = watch_progress(progress_file, copy_total(p, relay, wait_for))
    passes = []
    run_pass = pass_runner(module, runner, rsync, rsh, log_file, progress_file, on_output, skip_words, passes)
    if relay:
        end = functools.partial(end_master, runner, ssh, control, p["host"])
        results = relay_copy(module, source, wait_for, run_pass, passes, finish, end)
    else:
        results = [run_pass()]
    finish_progress(module, finish)
    reported = passes if relay else []
    if results[-1][0] != 0:
        fail_copy(module, source, results[-1], reported)
    exit_copied(module, results, log_file, reported)


if __name__ == "__main__":
    main()
