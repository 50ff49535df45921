#!/usr/bin/env python3
"""Make the env stage's lock: the pinned mlx and mlx-lm and everything they need, each at one
version with the sha256 of every file a Mac could install for it, for `pip install
--require-hashes` on the Macs (roles/python_env/files/requirements.lock).

pip itself resolves (`pip install --dry-run --report`) for Apple-silicon macOS at the oldest
macOS the lock is for (so every Mac can use it) and each Python minor version of
python_env_python_versions; a package whose version differs between Pythons gets a marker.
The hashes come from the index's JSON API (PEP 691): every macOS arm64, universal2 and pure
Python wheel of that version (and its source archive), so a Mac on a newer macOS, whose pip
picks a newer wheel, finds it hashed too. A `--wheels DIR` lock hashes the wheels in DIR
instead (a lab mirror's files, or `pip download`'s) and asks no index.

Run it after changing a pin, from the repository:

    .venv/bin/python scripts/lock_requirements.py              # the defaults' pins -> the role's lock
    .venv/bin/python scripts/lock_requirements.py --mlx 0.33.0 --mlx-lm 0.33.1 -o my.lock
        # then set python_env_lock_file: /path/to/my.lock

Exit status 0 with the lock written, 1 with the reason on stderr (a pin pip cannot resolve for
one of the Pythons names that Python).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = ROOT / "roles" / "python_env" / "defaults" / "main.yml"
LOCK = ROOT / "roles" / "python_env" / "files" / "requirements.lock"
# mlx's oldest macOS (its wheels: macosx_14_0_arm64 and newer); pip takes older tags with it.
PLATFORM = "macosx_14_0_arm64"
INDEX = "https://pypi.org/simple"
HEADER = "# The env stage's lock (scripts/lock_requirements.py): pip install --require-hashes -r this file.\n"


def normal(name):
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def defaults():
    import yaml

    return yaml.safe_load(DEFAULTS.read_text())


def resolve(requirements, minor, platform, python=sys.executable):
    """{normalized name: version} that pip resolves `requirements` to for CPython `minor` on
    `platform` (binary wheels only, as the Macs install them)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        r = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--disable-pip-version-check",
                "--report",
                str(report),
                "--only-binary=:all:",
                "--platform",
                platform,
                "--python-version",
                minor,
                "--implementation",
                "cp",
                "--target",
                str(Path(tmp) / "t"),
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if r.returncode != 0:
            errors = [line for line in r.stderr.splitlines() if line.startswith("ERROR")]
            raise SystemExit(
                f"lock_requirements: pip cannot resolve {' '.join(requirements)} for Python {minor} "
                f"on {platform}: {' '.join(errors)[-1200:] or r.stderr[-1200:]}"
            )
        installs = json.loads(report.read_text())["install"]
    return {normal(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def mac_file(filename):
    """A file a Mac may install: a macOS arm64 or universal2 wheel, a pure wheel, a source archive."""
    if filename.endswith((".tar.gz", ".zip")):
        return True
    if not filename.endswith(".whl"):
        return False
    platform_tag = filename[:-4].split("-")[-1]
    return platform_tag == "any" or any(
        t.startswith("macosx_") and t.endswith(("_arm64", "_universal2")) for t in platform_tag.split(".")
    )


def index_hashes(name, version, index=INDEX):
    """sha256 of every file of `name` `version` a Mac may install, from the index's JSON API."""
    req = urllib.request.Request(
        f"{index.rstrip('/')}/{normal(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - the index's own URL
        files = json.load(resp)["files"]
    wanted = []
    for f in files:
        fname = f["filename"]
        stem = fname[: -len(".tar.gz")] if fname.endswith(".tar.gz") else fname.rsplit(".", 1)[0]
        parts = stem.split("-")
        if (
            len(parts) > 1
            and normal(parts[0]) == normal(name)
            and parts[1] == version
            and mac_file(fname)
            and f.get("hashes", {}).get("sha256")
            and not f.get("yanked")
        ):
            wanted.append(f["hashes"]["sha256"])
    if not wanted:
        raise SystemExit(f"lock_requirements: the index has no file of {name} {version} for a Mac")
    return sorted(set(wanted))


def wheel_hashes(folder):
    """{normalized name: (version, [sha256])} of the wheels in `folder`."""
    found = {}
    for whl in sorted(Path(folder).glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        old = found.get(normal(name))
        if old and old[0] != version:
            raise SystemExit(f"lock_requirements: {folder} holds two versions of {name}: {old[0]} and {version}")
        found[normal(name)] = (version, sorted(set((old[1] if old else []) + [digest])))
    return found


def marker(minors, all_minors):
    """'' when a version holds for every Python, else a marker naming the Pythons it is for."""
    if sorted(minors) == sorted(all_minors):
        return ""
    return " ; " + " or ".join(
        f'python_version == "{m}"' for m in sorted(minors, key=lambda v: tuple(map(int, v.split("."))))
    )


def render(pins, entries, note):
    """The lock's text: `entries` [(name, version, marker, [sha256])], sorted by name."""
    lines = [HEADER, f"# pins: {' '.join(pins)}\n", f"# resolved for: {note}\n"]
    for name, version, mark, hashes in sorted(entries, key=lambda e: (e[0], e[2])):
        lines.append(f"{name}=={version}{mark} \\\n")
        lines.append(" \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n")
    return "".join(lines)


def lock(pins, minors, platform=PLATFORM, index=INDEX):
    """The lock's text for `pins` (["mlx==X", ...]) on Pythons `minors`."""
    by_version = {}
    for minor in minors:
        for name, version in resolve(pins, minor, platform).items():
            by_version.setdefault((name, version), []).append(minor)
    entries = [
        (name, version, marker(ms, minors), index_hashes(name, version, index))
        for (name, version), ms in by_version.items()
    ]
    return render(pins, entries, f"{platform}, Python {' '.join(minors)}")


def lock_from_wheels(pins, folder):
    """The lock's text for the wheels in `folder` (one version of each project)."""
    entries = [(name, version, "", hashes) for name, (version, hashes) in wheel_hashes(folder).items()]
    return render(pins, entries, f"the wheels in {folder}")


def main(argv=None):
    d = defaults()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mlx", default=d["python_env_mlx_version"], help="mlx's version (default: the role's)")
    ap.add_argument("--mlx-lm", default=d["python_env_mlx_lm_version"], help="mlx-lm's version (default: the role's)")
    ap.add_argument(
        "--prometheus-client",
        default=d["python_env_prometheus_client_version"],
        help="prometheus-client's version, for the server's /metrics (default: the role's)",
    )
    ap.add_argument("--extra", action="append", default=[], help="another requirement (python_env_extra_packages)")
    ap.add_argument("--python", action="append", help="a Python minor version (default: python_env_python_versions)")
    ap.add_argument("--platform", default=PLATFORM, help=f"pip's platform tag to resolve for (default {PLATFORM})")
    ap.add_argument("--index", default=INDEX, help=f"the package index's simple API (default {INDEX})")
    ap.add_argument("--wheels", help="hash the wheels in this folder instead of resolving and asking the index")
    ap.add_argument("-o", "--output", default=str(LOCK), help="where to write the lock (default: the role's)")
    args = ap.parse_args(argv)
    pins = [f"mlx=={args.mlx}", f"mlx-lm=={args.mlx_lm}", f"prometheus-client=={args.prometheus_client}", *args.extra]
    if args.wheels:
        text = lock_from_wheels(pins, args.wheels)
    else:
        text = lock(pins, args.python or [str(v) for v in d["python_env_python_versions"]], args.platform, args.index)
    Path(args.output).write_text(text)
    print(f"lock_requirements: wrote {args.output} ({text.count('==')} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
