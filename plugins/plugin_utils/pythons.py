# -*- coding: utf-8 -*-
"""Which Python each Mac's venv is made from: one minor version on every Mac, found, not assumed.

`base_python(pythons_by_host, settings)` takes each Mac's discovered `pythons` fact
(plugins/module_utils/mlx_python.py) and returns the choice, a line saying it, and preflight
problems (the same shape as plugins/plugin_utils/preflight.py's) for the Macs that have no
Python the pinned mlx can use. `lock_problem()` checks that the lock (python_env_require_hashes)
pins what the venv must hold. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_python import PYTHON_HOMES

CHECK = "python"


def _p(host, msg, fix):
    return {"severity": "error", "check": CHECK, "host": host, "port": None, "msg": msg, "fix": fix}


def _has(found, minor):
    """The first interpreter of `minor` in the homes' order, or None."""
    return next((p["path"] for p in found if p.get("version") == minor), None)


def _what(host, facts):
    """What a Mac has, for a message: its versioned Pythons and Ansible's interpreter."""
    found = facts.get("found") or []
    mod = facts.get("module") or {}
    parts = [f"{p['path']} ({p['version']})" for p in found]
    if mod.get("path"):
        parts.append(f"{mod['path']} ({mod.get('version') or '?'}, the one Ansible runs)")
    return ", ".join(parts) or "no Python found"


def _install_fix(minor):
    return (
        f"install Python {minor}: `brew install python@{minor}` (Homebrew), or python.org's macOS installer for {minor}"
    )


def base_python(pythons_by_host, settings):
    """`settings`: {"versions": the minor versions the pinned mlx has wheels for, preferred first
    (python_env_python_versions), "mlx_version": the pin, for messages, "base": an explicit base
    interpreter (python_env_base_python; empty: found)}.

    Returns {"minor": "3.13" or None, "paths": {host: path}, "message": str, "problems": [...]}.
    With an explicit base, every Mac uses it and nothing is checked here (the env stage checks
    that it runs). Otherwise the newest of `versions` that every Mac has; when none is on every
    Mac, the one most Macs have (the first in `versions` among equals) and an error for each Mac
    without it, naming what the Mac has and the fix."""
    hosts = sorted(pythons_by_host)
    versions = [str(v) for v in settings.get("versions") or []]
    base = str(settings.get("base") or "")
    if base:
        return {
            "minor": None,
            "paths": {h: base for h in hosts},
            "problems": [],
            "message": f"the venv is made from {base} on every Mac (python_env_base_python)",
        }
    found = {h: (pythons_by_host.get(h) or {}).get("found") or [] for h in hosts}
    common = [v for v in versions if all(_has(found[h], v) for h in hosts)]
    if common:
        minor = common[0]
        paths = {h: _has(found[h], minor) for h in hosts}
        where = "; ".join(f"{h} {paths[h]}" for h in hosts)
        return {
            "minor": minor,
            "paths": paths,
            "problems": [],
            "message": f"the venv is made from Python {minor} on every Mac: {where}",
        }
    counts = Counter(v for h in hosts for v in versions if _has(found[h], v))
    wanted = ", ".join(versions) or "none"
    homes = ", ".join(top for _, top in PYTHON_HOMES)
    problems = []
    if not counts:
        minor = versions[0] if versions else None
    else:
        best = max(counts.values())
        minor = next(v for v in versions if counts[v] == best)
    for h in hosts:
        if minor and _has(found[h], minor):
            continue
        mine = [v for v in versions if _has(found[h], v)]
        if mine:
            msg = (
                f"{h} has Python {', '.join(mine)} but not {minor}, which "
                f"{', '.join(x for x in hosts if _has(found[x], minor))} have: the venv must be the "
                f"same minor version on every Mac ({_what(h, pythons_by_host.get(h) or {})})"
            )
        else:
            mlx = " ".join(x for x in ("mlx", settings.get("mlx_version")) if x)
            msg = (
                f"{h} has no Python that {mlx} can use ({wanted}) in {homes}: it has "
                f"{_what(h, pythons_by_host.get(h) or {})}; the Command Line Tools' /usr/bin/python3 "
                f"is 3.9, too old"
            )
        fix = (
            f"on {h}, {_install_fix(minor)}; or set python_env_base_python to an interpreter "
            f"of that version present on every Mac"
            if minor
            else "set python_env_python_versions to the versions the pinned mlx supports"
        )
        problems.append(_p(h, msg, fix))
    return {
        "minor": minor,
        "paths": {},
        "problems": problems,
        "message": f"no Python version usable by mlx is on every Mac (wanted one of {wanted})",
    }


# ---- the lock (python_env_require_hashes) ------------------------------------------------------

_LOCK_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)\s*")


def _normal(name):
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text):
    """{normalized name: {versions}} a lock (a pip requirements file with hashes) pins."""
    pins = {}
    for name, version in _LOCK_PIN.findall(text or ""):
        pins.setdefault(_normal(name), set()).add(version)
    return pins


def lock_problem(text, requirements, path):
    """'' when the lock's `text` pins every one of `requirements` (["mlx==0.32.4", ...]) at the
    version asked for, with hashes; else what is wrong, naming the lock's `path` and the fix."""
    stop = "set python_env_require_hashes: false to install them by name and version alone, without hashes"
    if not (text or "").strip():
        return (
            f"the lock {path} (python_env_lock_file) cannot be read or is empty: name an existing lock, "
            f"made with scripts/lock_requirements.py; or {stop}"
        )
    if "--hash=sha256:" not in text:
        return (
            f"the lock {path} holds no --hash=sha256: lines, so pip cannot check a file: make it with "
            f"scripts/lock_requirements.py; or {stop}"
        )
    pins = lock_pins(text)
    parsed = [(str(r), _REQUIREMENT.fullmatch(str(r))) for r in requirements]
    missing = [r for r, m in parsed if not m or m.group(2) not in pins.get(_normal(m.group(1)), ())]
    if not missing:
        return ""
    asked = {_normal(m.group(1)): m.group(2) for _, m in parsed if m}
    own = ("mlx", "mlx-lm", "prometheus-client")  # the script's own options
    extras = [r for r, m in parsed if not m or _normal(m.group(1)) not in own]
    command = " ".join(
        ["scripts/lock_requirements.py"]
        + [f"--{name} {asked[name]}" for name in own if name in asked]
        + [f"--extra {r}" for r in extras]
        + ["-o", "my.lock"]
    )
    unpinned = [r for r, m in parsed if not m]
    what = (
        f"{', '.join(unpinned)} {'is' if len(unpinned) == 1 else 'are'} not name==version, which a lock needs; "
        if unpinned
        else ""
    )
    return (
        f"the lock {path} does not pin {', '.join(missing)}: {what}make a lock for these pins on the "
        f"controller (`{command}`, from the repository) and set python_env_lock_file to it; or {stop}"
    )


# What the Command Line Tools' stub prints when they are missing (over ssh: "xcode-select:
# error: no developer tools were found ... and no install could be requested (perhaps no UI
# is present)").
STUB_MARKERS = ("xcode-select", "no developer tools", "CommandLineTools")
PROBE_MARK = "mlx-cluster-python"
# Printed by the probe's shell just before it runs the interpreter: what a login shell's startup
# files print (a greeting in ~/.zshenv) comes before it, the interpreter's own words after.
PROBE_START = "mlx-cluster-probe-start"
CLT_FIX = (
    "install the Command Line Tools: at the Mac's screen `xcode-select --install`; or headless over ssh, "
    "`sudo touch /tmp/.com.apple.dt.CommandLineTools.installondemand.in-progress`, "
    '`softwareupdate --list` and `sudo softwareupdate --install "<the Command Line Tools label it lists>"`'
)


def script_json(stdout):
    """The JSON object a script the toolkit runs with ansible.builtin.script prints as its last
    line, or None. Such a script runs in the Mac's login shell, whose startup files may print
    first (a greeting in ~/.zshenv): only the last non-empty line is the script's."""
    lines = [line.strip() for line in str(stdout or "").splitlines() if line.strip()]
    if not lines or not lines[-1].startswith("{"):
        return None
    try:
        said = json.loads(lines[-1])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def interpreter_output(output):
    """What the interpreter itself printed in a raw run of the probe: the text after the
    PROBE_START line the probe's shell prints first (what the login shell printed before it is
    dropped); all of it when the line is missing."""
    text = str(output or "")
    at = text.rfind(PROBE_START)
    return text if at < 0 else text[at + len(PROBE_START) :]


def is_stub(output):
    """True when a raw run of the interpreter (its stdout and stderr) is the Command Line
    Tools' stub speaking, not a Python."""
    text = interpreter_output(output)
    return PROBE_MARK not in text and any(m in text for m in STUB_MARKERS)


def _first(text):
    return next((line.strip() for line in str(text or "").splitlines() if line.strip()), "")


def probe_message(failed, probe, host, python):
    """The failure message of a discovery that failed on `host`, from Ansible's failed result
    (`failed`) and a raw run of the Mac's Ansible interpreter (`probe`: the raw module's result,
    stdout holding PROBE_MARK and the version when it ran). A stub names the Command Line
    Tools and how to install them; a missing interpreter names ansible_python_interpreter;
    an interpreter that runs leaves the discovery's own message."""
    failed = failed if isinstance(failed, dict) else {}
    probe = probe if isinstance(probe, dict) else {}
    own = str(failed.get("msg") or "discovery failed")
    if str(failed.get("module_stderr") or "").strip() and own.startswith("MODULE FAILURE"):
        own = f"{own.splitlines()[0]}: {_first(failed.get('module_stderr'))}"
    out = interpreter_output(str(probe.get("stdout") or "") + str(probe.get("stderr") or ""))
    if probe.get("unreachable") or probe.get("rc") is None or PROBE_MARK in out:
        return f"{host}: {own}"
    said = _first(out)
    if is_stub(out):
        return (
            f"{host}: {python} is the stub macOS has until the Command Line Tools are installed "
            f"(it says: {said}), so Ansible's modules cannot run there. Fix: on {host}, {CLT_FIX}; "
            f"then run again; or let the toolkit install them headless with "
            f"mlx_cluster_install_command_line_tools: true. Or set ansible_python_interpreter for {host} to another "
            f"Python it has (e.g. /opt/homebrew/bin/python3.13)"
        )
    if probe.get("rc") == 127 or "not found" in out or "No such file" in out:
        return (
            f"{host}: the interpreter Ansible runs there, {python}, does not exist ({said or 'not found'}). "
            f"Fix: set ansible_python_interpreter for {host} to a Python it has (macOS: /usr/bin/python3, "
            f"with the Command Line Tools installed)"
        )
    return (
        f"{host}: the interpreter Ansible runs there, {python}, does not start (exit {probe.get('rc')}: "
        f"{said or 'no output'}); discovery said: {own}. Fix: set ansible_python_interpreter for {host} "
        f"to a Python that runs there"
    )


# pip's hash refusal (`--require-hashes`): a file on the index differs from the lock's
PIP_HASH_MISMATCH = "DO NOT MATCH THE HASHES"
PIP_ERROR_CHARS = 1500


def install_message(host, venv, result, source):
    """The failure message of pip installing into the venv on `host`: pip's exit status and its
    own error (from its first `ERROR:` line, at most PIP_ERROR_CHARS), then the fix for what it
    says. `result`: the command's result (rc, stderr, stdout); `source`: where pip took the
    packages from ("wheelhouse", an index URL, or "" for pip's own configuration)."""
    result = result if isinstance(result, dict) else {}
    said = str(result.get("stderr") or "") or str(result.get("stdout") or "")
    start = said.find("ERROR:")
    error = " ".join((said[start:] if start >= 0 else said).split())
    if len(error) > PIP_ERROR_CHARS:
        error = error[:PIP_ERROR_CHARS] + " [...]"
    where = {"wheelhouse": "the wheels the controller brought (python_env_wheelhouse)", "": "pip's own index"}.get(
        source, source
    )
    if PIP_HASH_MISMATCH in said:
        fix = (
            f"a file on {where} differs from the one the lock was made from: find out why before anything "
            "else; remake the lock (scripts/lock_requirements.py, python_env_lock_file) only if the change is "
            "one you trust"
        )
    elif source == "wheelhouse":
        fix = (
            "the wheels the controller downloaded do not cover this Mac: check python_env_wheel_platforms and "
            "the venv's Python version, then run again"
        )
    else:
        fix = (
            f"check that {host} reaches {where} (or set python_env_pip_index_url to a mirror it reaches, or "
            "python_env_wheelhouse: true to bring the wheels from the controller), then run again"
        )
    return (
        f"{host}: pip could not install into the venv {venv} (exit {result.get('rc')}): {error or 'no output'}. "
        f"Fix: {fix}"
    )
