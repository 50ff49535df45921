"""Print the interpreter's Python, mlx and mlx-lm versions as one JSON line, and whether the
requirements in MLX_CLUSTER_REQUIREMENTS (a JSON list, pip's syntax) are all in place: only
exact pins (`name==version`, no extras or markers) can be, each installed at that version;
anything else is left to pip (`in_place` false)."""

import json
import os
import re
import sys
from importlib import metadata

PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9._+!-]+)\s*$")


def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def in_place(requirements):
    """True when every requirement is an exact pin installed at its version."""
    if not requirements:
        return False
    for req in requirements:
        m = PIN.match(req) if isinstance(req, str) else None
        if not m or version(m.group(1)) != m.group(2):
            return False
    return True


def main():
    try:
        wanted = json.loads(os.environ.get("MLX_CLUSTER_REQUIREMENTS") or "[]")
    except ValueError:
        wanted = []
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "executable": sys.executable,
                "mlx": version("mlx"),
                "mlx_lm": version("mlx-lm"),
                "in_place": in_place(wanted if isinstance(wanted, list) else []),
            }
        )
    )


if __name__ == "__main__":
    main()
