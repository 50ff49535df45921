"""Suite-wide pytest set-up.

- the toolkit is imported as the collection it is, `ansible_collections.mlx.cluster.*`, through
  Ansible's own collection loader over collections/ (where ansible_collections/mlx/cluster is
  this tree): the same names, and the same loader, as when Ansible runs it (ansible-test's
  unit tests do the same).
- the simulated Mac cluster fixtures come from tests/simcluster/pytest_plugin.py.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(ROOT, "ansible.cfg"))


def _install_collection_loader():
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if not any(type(f).__name__ == "_AnsibleCollectionFinder" for f in sys.meta_path):
        _AnsibleCollectionFinder(paths=[os.path.join(ROOT, "collections")])._install()


_install_collection_loader()

if os.path.exists(os.path.join(ROOT, "tests", "simcluster", "pytest_plugin.py")):
    pytest_plugins = ["tests.simcluster.pytest_plugin"]


def pytest_collection_modifyitems(config, items):
    """The simulated-cluster tests first (each takes seconds to a minute), the unit tests after
    (milliseconds each): with pytest-xdist's work stealing (scripts/test.sh) the short tests fill
    the workers' idle ends instead of one worker finishing a minute-long test alone. Stable: the
    order within each group is the collection order."""
    items.sort(key=lambda item: item.get_closest_marker("sim") is None)
