# -*- coding: utf-8 -*-
# Copyright: mlx-cluster contributors
# MIT License
"""The Pythons a Mac has for MLX's environment, found without running any of them.

A Mac fresh out of the box has only ``/usr/bin/python3``: a stub until the Command Line Tools
are installed, then Apple's Python 3.9, too old for mlx (mlx-lm 0.32 needs 3.11 or later). Users get
a newer one from Homebrew (``brew install python@3.13``: ``/opt/homebrew/bin/python3.13``) or
from python.org's installer (``/Library/Frameworks/Python.framework/Versions/3.13/bin``, linked
from ``/usr/local/bin``). Only versioned names are taken (``python3.13``, not ``python3``), so
the minor version is known from the name alone and nothing is run.

Runs on the Macs (mlx_cluster_facts): standard library only, Python 3.9 syntax.
"""

from __future__ import annotations

import os
import re
import sys

# Where a Python for MLX comes from on a Mac, in the order the toolkit prefers them: Homebrew's
# (Apple silicon prefix), python.org's framework builds, then /usr/local/bin (python.org's
# links, or an Intel Homebrew).
PYTHON_HOMES = (
    ("homebrew", "/opt/homebrew/bin"),
    ("python.org", "/Library/Frameworks/Python.framework/Versions"),
    ("/usr/local/bin", "/usr/local/bin"),
)
PYTHON_NAME = re.compile(r"^python3\.(\d+)$")
FRAMEWORK_VERSION = re.compile(r"^3\.(\d+)$")


def _executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def find_pythons(homes=PYTHON_HOMES):
    """[{"path", "version", "source"}]: every versioned Python 3 found in `homes`, in the
    homes' order, newest minor first within each. A dangling link or a file that cannot be
    run is left out."""
    found = []
    for source, top in homes:
        here = []
        for name in _listdir(top):
            if source == "python.org":  # Versions/3.N/bin/python3.N
                m, path = FRAMEWORK_VERSION.match(name), os.path.join(top, name, "bin", "python" + name)
            else:
                m, path = PYTHON_NAME.match(name), os.path.join(top, name)
            if m and _executable(path):
                here.append((int(m.group(1)), path))
        for minor, path in sorted(here, key=lambda x: -x[0]):
            found.append({"path": path, "version": "3.%d" % minor, "source": source})
    return found


def python_facts(homes=PYTHON_HOMES):
    """`pythons` of mlx_cluster: {"found": find_pythons(), "module": the interpreter this
    module runs with (Ansible's, ansible_python_interpreter) and its full version}."""
    return {
        "found": find_pythons(homes),
        "module": {"path": sys.executable, "version": "%d.%d.%d" % tuple(sys.version_info[:3])},
    }
