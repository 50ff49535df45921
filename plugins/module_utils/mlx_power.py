# -*- coding: utf-8 -*-
"""What keeps a Mac in a run: its power settings (`pmset`) and its automatic macOS updates.

Pure: no command runs here. The discovery module reads both (mlx_collect), the module
`mac_power` changes the power settings, the preflight warns about automatic updates.

pmset (Apple's PowerManagement source, pmset/pmset.m; real captures in tests/fixtures):
- `pmset -g custom` prints every power source's stored settings: a line `<Source>:` (`AC
  Power`, `Battery Power` on a laptop, `UPS Power` with a UPS attached), then one line per
  setting, `" %-20s %s"` (name, value). A name may hold spaces (`Sleep On Power Button 1`)
  or fill the 20 columns (`highstandbythreshold 50`). A desktop (Mac mini, Mac Studio) has
  only `AC Power:`; settings a Mac does not support are not printed (a laptop has no
  `autorestart`). Readable by any user.
- `pmset -c <setting> <value> ...` changes the AC settings only (a laptop's battery settings
  are left alone); it needs root (`'pmset' must be run as root...` on stdout, exit 1
  otherwise), and any bad argument prints the usage on stdout and exits 1. The values are
  stored in /Library/Preferences/SystemConfiguration/com.apple.PowerManagement.plist and
  survive a reboot.

Automatic updates: `defaults read /Library/Preferences/com.apple.SoftwareUpdate` (the whole
domain, one command for the four keys) prints it as an old-style property list: `{`, one line
per key indented by four spaces, `    Key = value;` (`1`/`0` for a boolean; a key with other
characters quoted, a nested array or dictionary over several deeper-indented lines), `}`. A
domain never written exits 1 with "Domain ... does not exist". A key never written is absent:
unknown here (null), as macOS then applies its own default, which this code does not guess.
"""

from __future__ import annotations

import re

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import ParseError, small_int, to_text

PMSET_CUSTOM_ARGV = ["pmset", "-g", "custom"]
PMSET_CUSTOM_COMMAND = " ".join(PMSET_CUSTOM_ARGV)
AC = "AC Power"
BATTERY = "Battery Power"
UPS = "UPS Power"
SOURCES = (AC, BATTERY, UPS)

# The settings this toolkit may set with `pmset -c`: name -> "minutes" (0 = never) or "bool".
# Each name is both what pmset takes and what `pmset -g custom` prints.
SETTINGS = {
    "sleep": "minutes",
    "disksleep": "minutes",
    "displaysleep": "minutes",
    "autorestart": "bool",
    "womp": "bool",
    "powernap": "bool",
    "ttyskeepawake": "bool",
    "tcpkeepalive": "bool",
    "standby": "bool",
}
# What the role `power` asks for by default (power_settings): never sleep on power, no disk
# sleep, start again by itself after a power cut. roles/power/defaults/main.yml repeats it in
# YAML (tests/unit/module_utils/test_mlx_power.py fails when they differ).
DEFAULT_SETTINGS = {"sleep": 0, "disksleep": 0, "autorestart": 1}
# A value pmset would take: minutes up to a year are plenty; pmset stores an int32.
MAX_MINUTES = 525600

SOFTWARE_UPDATE_DOMAIN = "/Library/Preferences/com.apple.SoftwareUpdate"
# fact name -> preference key (System Settings > General > Software Update > Automatic Updates)
UPDATE_KEYS = {
    "automatic_check": "AutomaticCheckEnabled",  # Check for updates
    "automatic_download": "AutomaticDownload",  # Download new updates when available
    "install_macos_updates": "AutomaticallyInstallMacOSUpdates",  # Install macOS updates (restarts)
    "critical_update_install": "CriticalUpdateInstall",  # Install Security Responses and system files
}


UPDATES_ARGV = ["defaults", "read", SOFTWARE_UPDATE_DOMAIN]
# a top-level `Key = value;` line of `defaults read <domain>` (nested lines are indented deeper)
_DEFAULTS_ENTRY = re.compile(r'^ {4}(?:"((?:[^"\\]|\\.)*)"|([^\s"=]+)) = (.*);$')


def parse_pmset_custom(text):
    """`pmset -g custom` -> {source: {setting: int or str}}, sources in the order printed.

    Integer values become ints; others (`/var/vm/sleepimage`) stay text. Output with no
    `<Source>:` line, or a setting line before any, raises ParseError."""
    text, _ = to_text(text, PMSET_CUSTOM_COMMAND)
    sources, current = {}, None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line[0].isspace() and line.rstrip().endswith(":"):
            current = sources.setdefault(line.strip()[:-1], {})
            continue
        if current is None or not line[0].isspace():
            raise ParseError(PMSET_CUSTOM_COMMAND, f"line {number} is not under a power source: {line.strip()[:80]!r}")
        name, _, value = line.strip().rpartition(" ")
        name = name.strip()
        if not name:
            raise ParseError(PMSET_CUSTOM_COMMAND, f"line {number} has no value: {line.strip()[:80]!r}")
        number_value = small_int(value)
        current[name] = number_value if number_value is not None else value
    if not sources:
        raise ParseError(PMSET_CUSTOM_COMMAND, "no power source (no `AC Power:` line)")
    return sources


def check_settings(desired):
    """`desired` ({setting: value}) as pmset stores it: ints (true/false as 1/0); on/off
    settings 0 or 1 only (pmset would store 5 as 1 for some and as 5 for others: powernap,
    standby). Raises ValueError naming the first setting this toolkit does not set, or a bad
    value."""
    if not isinstance(desired, dict):
        raise ValueError(f"the power settings must be a mapping of pmset settings to numbers, not {desired!r}")
    out = {}
    for name, value in desired.items():
        kind = SETTINGS.get(name)
        if kind is None:
            raise ValueError(f"{name!r} is not a pmset setting this toolkit sets (known: {', '.join(SETTINGS)})")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, str) and value.strip().isdecimal():
            value = int(value)
        top = 1 if kind == "bool" else MAX_MINUTES
        if not isinstance(value, int) or not 0 <= value <= top:
            what = "0 or 1" if kind == "bool" else f"minutes from 0 (never) to {MAX_MINUTES}"
            raise ValueError(f"pmset setting {name}: {value!r} is not {what}")
        out[name] = value
    return out


def plan_power(sources, desired, source=AC):
    """What `pmset -c` must change on a Mac whose `pmset -g custom` is `sources`, for the
    settings `desired` (checked with check_settings()).

    Returns {"source", "changes": {setting: {"before", "after"}}, "unsupported": [settings
    the Mac does not print for that source: it does not have them], "current": {setting:
    value now}}. Raises ValueError when the Mac has no such source at all."""
    desired = check_settings(desired)
    have = (sources or {}).get(source)
    if have is None:
        raise ValueError(
            f"`{PMSET_CUSTOM_COMMAND}` lists no {source} settings (it lists: {', '.join(sources or {}) or 'nothing'})"
        )
    changes, unsupported, current = {}, [], {}
    for name, value in desired.items():
        if name not in have:
            unsupported.append(name)
            continue
        current[name] = have[name]
        if have[name] != value:
            changes[name] = {"before": have[name], "after": value}
    return {"source": source, "changes": changes, "unsupported": unsupported, "current": current}


def pmset_set_argv(changes):
    """`pmset -c name value ...` for the changes of plan_power(): every change in one run
    (pmset checks sleep against disk and display sleep once, on the result)."""
    argv = ["pmset", "-c"]
    for name, change in changes.items():
        argv += [name, str(change["after"])]
    return argv


def settings_text(values, source=AC):
    """Settings as `pmset -g custom` prints them under `source` (for --diff)."""
    return f"{source}:\n" + "".join(f" {name:<20} {value}\n" for name, value in values.items())


def parse_defaults_domain(rc, out, err):
    """`defaults read <domain>` -> {key: int} for its top-level keys whose value is a small
    whole number (booleans print 1/0); others are left out. A failed read (domain never written)
    gives {}."""
    if rc != 0:
        return {}
    values = {}
    for line in to_text(out, "defaults read")[0].splitlines():
        m = _DEFAULTS_ENTRY.match(line)
        if m:
            value = small_int(m.group(3))
            if value is not None:
                values[m.group(1) if m.group(1) is not None else m.group(2)] = value
    return values


def updates_facts(result):
    """{fact: True/False/None} for UPDATE_KEYS from the (rc, out, err) of UPDATES_ARGV, or None
    (not read). A key never written or unreadable is None: unknown, not off."""
    values = parse_defaults_domain(*result) if result is not None else {}
    return {name: None if values.get(key) is None else bool(values[key]) for name, key in UPDATE_KEYS.items()}
