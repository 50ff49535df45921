#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mac_power
short_description: Set a Mac's power settings on AC power with pmset, only those that differ
description:
  - Reads the stored power settings (C(pmset -g custom)), compares the C(AC Power) ones with
    I(settings) and changes only those that differ, all in one C(pmset -c) run. C(-c) is the
    AC (charger) profile only, so a laptop's C(Battery Power) settings are never touched.
  - Reads the settings again afterwards; C(changed) is measured, and a setting that did not
    take (a configuration profile enforcing it) fails the module, naming it.
  - A setting the Mac does not have on AC (C(pmset -g custom) does not print it, e.g.
    C(autorestart) on a laptop) is left alone, named in C(unsupported) and a warning.
  - pmset keeps the settings in
    C(/Library/Preferences/SystemConfiguration/com.apple.PowerManagement.plist), so they
    survive a reboot.
  - "Changing settings needs root (C(become: true)); reading does not."
version_added: "0.4.0"
author: mlx-cluster contributors
extends_documentation_fragment:
  - mlx.cluster.command_timeout
options:
  settings:
    description:
      - pmset settings for AC power, each a number. Minutes for C(sleep), C(disksleep) and
        C(displaysleep) (0 means never); 0 or 1 for C(autorestart), C(womp), C(powernap),
        C(ttyskeepawake), C(tcpkeepalive), C(standby).
    type: dict
    default:
      sleep: 0
      disksleep: 0
      autorestart: 1
attributes:
  check_mode:
    support: full
    description: Reads the settings and reports what would change, without running C(pmset -c).
  diff_mode:
    support: full
    description: The managed AC settings before and after, as C(pmset -g custom) prints them.
notes:
  - macOS only. Runs C(pmset -g custom), and C(pmset -c ...) then C(pmset -g custom) again when
    something differs.
  - C(sleep 0) with a non-zero C(disksleep) or C(displaysleep) is fine for pmset; it warns
    (on stderr) only when system sleep is on and disk sleep is never.
seealso:
  - module: mlx_cluster_facts
"""

EXAMPLES = r"""
- name: Never sleep on power, restart after a power cut
  mlx.cluster.mac_power:
  become: true

- name: Also wake for network access and keep the display on
  mlx.cluster.mac_power:
    settings: {sleep: 0, disksleep: 0, autorestart: 1, womp: 1, displaysleep: 0}
  become: true
"""

RETURN = r"""
before:
  description: The managed settings as they were on AC power (those the Mac has).
  returned: always
  type: dict
  sample: {"sleep": 1, "disksleep": 10, "autorestart": 0}
after:
  description: The managed settings on AC power after the run (as read back; in check mode, as they would be).
  returned: always
  type: dict
  sample: {"sleep": 0, "disksleep": 0, "autorestart": 1}
changes:
  description: Each setting changed (or, in check mode, to change) with its old and new value.
  returned: always
  type: dict
  sample: {"sleep": {"before": 1, "after": 0}}
unsupported:
  description: Settings asked for that this Mac does not have on AC power (left alone).
  returned: always
  type: list
  elements: str
  sample: ["autorestart"]
cmd:
  description: The pmset command that changed the settings (null when nothing was changed).
  returned: always
  type: list
  elements: str
  sample: ["/usr/bin/pmset", "-c", "sleep", "0", "autorestart", "1"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_power import (
    AC,
    DEFAULT_SETTINGS,
    PMSET_CUSTOM_ARGV,
    PMSET_CUSTOM_COMMAND,
    parse_pmset_custom,
    plan_power,
    pmset_set_argv,
    settings_text,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import (
    COMMAND_TIMEOUT_SPEC,
    Runner,
    command_text,
    module_run,
)

FIX_ROOT = "run the task with become: true (passwordless sudo on the Mac)"


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()[:200]
    return "no output"


def read_plan(module, runner, pmset, settings):
    rc, out, err = module_run(module, runner, [pmset] + PMSET_CUSTOM_ARGV[1:])
    if rc != 0:
        module.fail_json(
            msg=f"`{PMSET_CUSTOM_COMMAND}` exited with {rc} on this Mac: {_first_line(out, err)}",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    try:
        return plan_power(parse_pmset_custom(out), settings)
    except ParseError as exc:
        module.fail_json(msg=f"cannot read `{exc.command}`: {exc.message}", stdout=out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(settings=dict(type="dict", default=dict(DEFAULT_SETTINGS)), **COMMAND_TIMEOUT_SPEC),
        supports_check_mode=True,
    )
    pmset = module.get_bin_path("pmset", required=True)
    runner = Runner(module.params["command_timeout"])
    plan = read_plan(module, runner, pmset, module.params["settings"])
    changes, unsupported = plan["changes"], plan["unsupported"]
    before = dict(plan["current"])
    after = dict(before, **{name: change["after"] for name, change in changes.items()})
    for name in unsupported:
        module.warn(f"pmset on this Mac has no `{name}` setting on AC power (a laptop has no autorestart): left alone")
    result = dict(changed=bool(changes), before=before, after=after, changes=changes, unsupported=unsupported, cmd=None)
    if changes and module._diff:
        result["diff"] = {
            "before": settings_text(before),
            "after": settings_text(after),
            "before_header": f"{PMSET_CUSTOM_COMMAND} ({AC})",
            "after_header": f"{PMSET_CUSTOM_COMMAND} ({AC})",
        }
    if not changes or module.check_mode:
        module.exit_json(**result)

    argv = [pmset] + pmset_set_argv(changes)[1:]
    rc, out, err = module_run(module, runner, argv)
    if rc != 0:
        said = _first_line(out, err)
        fix = FIX_ROOT if "must be run as root" in f"{out}{err}" else "run it by hand on the Mac to see why"
        module.fail_json(
            msg=f"`{command_text(argv)}` exited with {rc} on this Mac: {said}. Fix: {fix}",
            rc=rc,
            stdout=out,
            stderr=err,
            cmd=argv,
            changes=changes,
        )
    for line in (err or "").splitlines():
        if line.strip():
            module.warn(f"pmset: {line.strip()}")
    # measured, not assumed: read the settings back
    again = read_plan(module, runner, pmset, module.params["settings"])
    if again["changes"]:
        left = ", ".join(f"{name} is {c['before']} (wanted {c['after']})" for name, c in again["changes"].items())
        module.fail_json(
            msg=f"`{command_text(argv)}` succeeded but {PMSET_CUSTOM_COMMAND} still reads: {left}. "
            f"Fix: a configuration profile may enforce these settings (System Settings > "
            f"General > Device Management); change them there",
            cmd=argv,
            changes=changes,
        )
    result.update(after=dict(again["current"]), cmd=argv)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
