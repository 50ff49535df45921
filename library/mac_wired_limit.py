#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mac_wired_limit
short_description: Raise a Mac's GPU wired-memory limit (iogpu.wired_limit_mb) now and at every boot, or undo it
description:
  - "C(iogpu.wired_limit_mb) is the most memory the GPU may wire. macOS starts every boot at 0,
    its own default (about 2/3 of memory up to 36 GB, 3/4 above), and C(sysctl) changes last
    only until the next restart. This module sets it now and keeps it with a LaunchDaemon,
    C(/Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist) (root:wheel, 0644), that
    launchd runs at every boot (C(RunAtLoad)): C(/usr/sbin/sysctl iogpu.wired_limit_mb=N),
    run again every 10 s while it fails (C(KeepAlive) C(SuccessfulExit) false)."
  - "I(state=present): the plist is written only when its content, owner or mode differ, loaded
    with C(launchctl bootstrap system) (after C(launchctl bootout) when launchd holds an older
    one), and C(sysctl iogpu.wired_limit_mb=N) runs only when the live value differs; the value
    is read back (C(changed) measured; a value that did not take fails the module)."
  - "I(state=absent): the job is unloaded (C(launchctl bootout)), the plist removed and the live
    value set back to 0, macOS's default, each only when needed."
  - I(limit_mb=auto) is memory less 1/8 of it, at least 6 GB and at most 16 GB left to macOS,
    never below macOS's default; it is also the most the module sets. A larger number is
    refused with the numbers and the fix.
  - "Changing anything needs root (C(become: true)); reading does not."
version_added: "0.4.0"
author: mlx-cluster contributors
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  state:
    description:
      - C(present) sets the limit now and at every boot; C(absent) removes the LaunchDaemon
        and sets the limit back to 0 (macOS's default).
    type: str
    choices: [present, absent]
    default: present
  limit_mb:
    description:
      - C(auto) (the safe value from the Mac's memory) or a number of MB up to it. Ignored
        with I(state=absent).
    type: str
    default: auto
attributes:
  check_mode:
    support: full
    description: Reads the live value, the plist and launchd's job, and reports what would change.
  diff_mode:
    support: full
    description: The live value and the LaunchDaemon's plist before and after.
notes:
  - macOS on Apple silicon only (the C(iogpu.wired_limit_mb) oid, macOS 14 and later).
  - Runs C(sysctl -n hw.memsize), C(sysctl -n iogpu.wired_limit_mb), C(launchctl print
    system/org.mlx-cluster.wired-limit); to change, C(launchctl bootout), C(launchctl bootstrap
    system <plist>), C(sysctl iogpu.wired_limit_mb=N), then the live value again.
  - A wired limit close to the memory size can freeze a Mac under memory pressure (wired memory
    cannot be paged out); the refusal above the safe value is the guard.
seealso:
  - module: mlx_cluster_facts
  - module: mac_power
"""

EXAMPLES = r"""
- name: Let the GPU wire all but macOS's share of memory, now and after every restart
  mlx.cluster.mac_wired_limit:
    limit_mb: auto
  become: true

- name: A fixed limit of 100 GB
  mlx.cluster.mac_wired_limit:
    limit_mb: "102400"
  become: true

- name: Back to macOS's default
  mlx.cluster.mac_wired_limit:
    state: absent
  become: true
"""

RETURN = r"""
limit_mb:
  description: The limit asked for, in MB (0 with I(state=absent), macOS's default).
  returned: always
  type: int
  sample: 114688
safe_max_mb:
  description: The most this Mac's memory allows the module to set (the value of C(auto)).
  returned: always
  type: int
  sample: 114688
memsize:
  description: The Mac's memory in bytes (C(hw.memsize)).
  returned: always
  type: int
  sample: 137438953472
before:
  description: The live value, whether the plist is there as wanted, and whether launchd holds the job, before the run.
  returned: always
  type: dict
  sample: {"live_mb": 0, "daemon_mb": null, "loaded": false}
after:
  description: The same after the run (read back; in check mode, as it would be).
  returned: always
  type: dict
  sample: {"live_mb": 114688, "daemon_mb": 114688, "loaded": true}
changes:
  description: What changed (or, in check mode, would change), in words.
  returned: always
  type: list
  elements: str
  sample: ["write /Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist (iogpu.wired_limit_mb=114688 at every boot)"]
plist:
  description: The LaunchDaemon's path.
  returned: always
  type: str
  sample: /Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist
cmds:
  description: The commands that changed the Mac, in order.
  returned: always
  type: list
  elements: list
  sample: [["/bin/launchctl", "bootstrap", "system", "/Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist"]]
"""

import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_host import WIRED_LIMIT_OID, parse_wired_limit
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import small_int
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    Runner,
    command_text,
    module_run,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_wired import (
    LABEL,
    PLIST_PATH,
    SERVICE,
    daemon_bytes,
    daemon_limit,
    file_problem,
    plan_wired,
    resolve_limit,
    safe_wired_limit_mb,
    state_text,
)

# the plist's path (tests point it elsewhere)
PLIST = PLIST_PATH
FIX_ROOT = "run the task with become: true (passwordless sudo on the Mac)"
# `launchctl bootstrap` right after `launchctl bootout` of the same label can fail with 5
# (Input/output error) while launchd still drains the old job: tried again this many times, 1 s apart
BOOTSTRAP_TRIES = 3
# `launchctl print` of a label launchd does not hold
NOT_LOADED_RC = 113


def _said(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()[:200]
    return "no output"


class WiredLimit:
    """The reads and changes of one run (thin: the decisions are mlx_wired's)."""

    def __init__(self, module):
        self.module = module
        self.runner = Runner(module.params["command_timeout"])
        self.sysctl = module.get_bin_path("sysctl", required=True)
        self.launchctl = module.get_bin_path("launchctl", required=True)
        self.cmds = []

    def run(self, argv, change=False):
        if change:
            self.cmds.append(list(argv))
        return module_run(self.module, self.runner, argv)

    def fail(self, msg, **kw):
        self.module.fail_json(msg=msg, cmds=self.cmds, **kw)

    def memsize(self):
        argv = [self.sysctl, "-n", "hw.memsize"]
        rc, out, err = self.run(argv)
        value = small_int((out or "").strip()) if rc == 0 else None
        if not value:
            self.fail(
                f"`{command_text(argv)}` gave no memory size on this Mac (exit {rc}): {_said(out, err)}",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return value

    def live(self):
        argv = [self.sysctl, "-n", WIRED_LIMIT_OID]
        rc, out, err = self.run(argv)
        value = parse_wired_limit(rc, out)
        if value is None:
            self.fail(
                f"this Mac has no {WIRED_LIMIT_OID} (`{command_text(argv)}` exited {rc}: {_said(err, out)}). "
                f"Fix: the GPU wired limit needs Apple silicon and macOS 14 or later; leave "
                f"mlx_cluster_wired_limit empty for this Mac",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        return value

    def plist(self):
        """(content or None, file_problem or None)."""
        try:
            st = os.stat(PLIST)
            with open(PLIST, "rb") as f:
                return f.read(), file_problem(st)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            self.fail(f"cannot read {PLIST} on this Mac: {exc}")

    def loaded(self):
        argv = [self.launchctl, "print", SERVICE]
        rc, out, err = self.run(argv)
        if rc == 0:
            return True
        if rc == NOT_LOADED_RC or "Could not find service" in f"{out}{err}":
            return False
        self.fail(f"`{command_text(argv)}` exited {rc} on this Mac: {_said(err, out)}", rc=rc, stdout=out, stderr=err)

    def state(self):
        content, problem = self.plist()
        return (
            {"live_mb": self.live(), "daemon_mb": None if problem else daemon_limit(content), "loaded": self.loaded()},
            content,
            problem,
        )

    # ---- changes ----
    def bootout(self):
        argv = [self.launchctl, "bootout", SERVICE]
        rc, out, err = self.run(argv, change=True)
        if rc != 0 and self.loaded():
            self.fail(
                f"`{command_text(argv)}` exited {rc} on this Mac: {_said(err, out)}. Fix: {FIX_ROOT}",
                rc=rc,
                stdout=out,
                stderr=err,
            )

    def bootstrap(self, after_bootout):
        argv = [self.launchctl, "bootstrap", "system", PLIST]
        for attempt in range(1, BOOTSTRAP_TRIES + 1):
            rc, out, err = self.run(argv, change=True)
            if rc == 0:
                return
            if not (after_bootout and rc == 5 and attempt < BOOTSTRAP_TRIES):
                break
            time.sleep(1)
        self.fail(
            f"`{command_text(argv)}` exited {rc} on this Mac: {_said(err, out)}. Fix: launchd refused "
            f"{PLIST}: it must be root:wheel, mode 0644, a valid plist (`plutil -lint {PLIST}`); "
            f"{FIX_ROOT}; launchd's reason is in `log show --last 5m --predicate 'process == \"launchd\"'`",
            rc=rc,
            stdout=out,
            stderr=err,
        )

    def write(self, content):
        directory = os.path.dirname(PLIST)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{LABEL}.", dir=directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(content)
                os.chmod(tmp, 0o644)
                os.chown(tmp, 0, 0)
                os.replace(tmp, PLIST)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except PermissionError as exc:
            self.fail(f"cannot write {PLIST} on this Mac: {exc}. Fix: {FIX_ROOT}")
        except OSError as exc:
            self.fail(f"cannot write {PLIST} on this Mac: {exc}")
        self.cmds.append(["write", PLIST])

    def remove(self):
        try:
            os.unlink(PLIST)
        except FileNotFoundError:
            pass
        except PermissionError as exc:
            self.fail(f"cannot remove {PLIST} on this Mac: {exc}. Fix: {FIX_ROOT}")
        self.cmds.append(["remove", PLIST])

    def set_live(self, value):
        argv = [self.sysctl, f"{WIRED_LIMIT_OID}={value}"]
        rc, out, err = self.run(argv, change=True)
        if rc != 0:
            fix = FIX_ROOT if "not permitted" in f"{out}{err}" else "run it by hand on the Mac to see why"
            self.fail(
                f"`{command_text(argv)}` exited {rc} on this Mac: {_said(err, out)}. Fix: {fix}",
                rc=rc,
                stdout=out,
                stderr=err,
            )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            limit_mb=dict(type="str", default="auto"),
            **COMMAND_TIMEOUT_SPEC,
        ),
        supports_check_mode=True,
    )
    mac = WiredLimit(module)
    memsize = mac.memsize()
    present = module.params["state"] == "present"
    try:
        target = resolve_limit(module.params["limit_mb"], memsize) if present else None
    except ValueError as exc:
        mac.fail(f"wired limit on this Mac: {exc}")
    before, content, problem = mac.state()
    plan = plan_wired(target, before["live_mb"], content, problem, before["loaded"])
    want = daemon_bytes(target) if present else None
    after = {"live_mb": target or 0, "daemon_mb": target, "loaded": present}
    result = dict(
        changed=bool(plan["changes"]),
        limit_mb=target or 0,
        safe_max_mb=safe_wired_limit_mb(memsize),
        memsize=memsize,
        before=before,
        after=after if plan["changes"] else dict(before),
        changes=plan["changes"],
        plist=PLIST,
        cmds=[],
    )
    if problem and present:
        module.warn(f"{PLIST} is {problem}: launchd would not load it; written again")
    if plan["changes"] and module._diff:
        result["diff"] = {
            "before": state_text(before["live_mb"], content),
            "after": state_text(target or 0, want),
            "before_header": f"{LABEL} (before)",
            "after_header": f"{LABEL} (after)",
        }
    if not plan["changes"] or module.check_mode:
        module.exit_json(**result)

    if plan["bootout"]:
        mac.bootout()
    if plan["remove"]:
        mac.remove()
    if plan["write"]:
        mac.write(want)
    if plan["bootstrap"]:
        mac.bootstrap(after_bootout=plan["bootout"])
    if plan["live"] is not None:
        mac.set_live(plan["live"])
    # measured, not assumed: read everything back
    again, _content, _problem = mac.state()
    if again != after:
        mac.fail(
            f"after {', '.join(plan['changes'])}, this Mac reads {again} (wanted {after}). Fix: run "
            f"`sysctl {WIRED_LIMIT_OID}` and `launchctl print {SERVICE}` on the Mac to see why",
            before=before,
        )
    result.update(after=again, cmds=mac.cmds)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
