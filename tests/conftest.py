"""Suite-wide pytest set-up.

- plugins/module_utils is on sys.path (pyproject: pythonpath), and its modules are also
  registered as `ansible.module_utils.<name>` so library/ modules import in unit tests
  exactly as they do inside AnsiballZ.
- the simulated Mac cluster fixtures come from tests/simcluster/pytest_plugin.py.
"""

import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))

_MU = os.path.join(ROOT, "plugins", "module_utils")
# mlx_tb first: the others import its ParseError.
for _name in sorted((f[:-3] for f in os.listdir(_MU) if f.endswith(".py")), key=lambda n: (n != "mlx_tb", n)):
    sys.modules.setdefault(f"ansible.module_utils.{_name}", importlib.import_module(_name))

if os.path.exists(os.path.join(ROOT, "tests", "simcluster", "pytest_plugin.py")):
    pytest_plugins = ["tests.simcluster.pytest_plugin"]
