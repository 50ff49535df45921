"""Print the interpreter's Python, mlx and mlx-lm versions as one JSON line, and whether the
requirements in MLX_CLUSTER_REQUIREMENTS (a JSON list, pip's syntax) are all in place: only
exact pins (`name==version`, no extras or markers) can be, each installed at that version;
anything else is left to pip (`in_place` false). Also the GPU's limit as the Mac reports it
(`gpu_working_set_bytes`: Metal's recommendedMaxWorkingSetSize through MLX; null where MLX
cannot be imported or has no Metal device)."""

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


def gpu_working_set():
    """MLX's device_info()["max_recommended_working_set_size"] (bytes), or None."""
    try:
        import mlx.core as mx

        info = mx.device_info()
    except Exception:  # noqa: BLE001 - no mlx yet, or one that cannot start: the estimate stands
        return None
    value = info.get("max_recommended_working_set_size") if isinstance(info, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


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
                "gpu_working_set_bytes": gpu_working_set(),
            }
        )
    )


if __name__ == "__main__":
    main()
