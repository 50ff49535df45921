"""Print the interpreter's Python, mlx and mlx-lm versions as one JSON line."""

import json
import sys
from importlib import metadata


def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
                  "mlx": version("mlx"), "mlx_lm": version("mlx-lm")}))
