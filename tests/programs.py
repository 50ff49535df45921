"""The programs the roles deploy to the Macs (roles/<role>/files/*.py), loaded in-process for
tests as a Mac runs them: as a script, its own directory first on sys.path, so it imports
what was deployed beside it (mlx_cluster_startup.py) by name. They are not part of the
collection's Python packages (nothing imports them; mlx.launch starts them), so this is the
one way tests reach them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def program_path(role, name):
    return ROOT / "roles" / role / "files" / name


def load_program(role, name):
    """roles/<role>/files/<name> as a fresh module object (its module-level code run once)."""
    path = program_path(role, name)
    spec = importlib.util.spec_from_file_location(f"program_{role}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
