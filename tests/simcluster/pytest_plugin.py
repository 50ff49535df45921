"""pytest fixtures for the simulated Mac cluster (register with
`pytest_plugins = ["tests.simcluster.pytest_plugin"]`).

- `sim_cluster`: session-scoped factory. `sim_cluster("mesh4")` returns a running
  SimCluster, built once per spec (and keyword arguments) per session, in the session's
  temporary directory; every cluster is torn down at the end of the session, also when
  tests failed (and, as a last resort, at interpreter exit).
  Tests that change a shared cluster (addresses, cables, overrides) call
  `cluster.reset()` when done, or build their own SimCluster.
- `sim_clean_logs`: function-scoped; empties the argv logs of every cluster started so far
  and returns a callable that does it again.
- Tests marked `sim` (and every test using the fixtures) are skipped with a one-line
  reason when the machine cannot run the simulation (not root, no `ip netns`, no sshd); with
  MLXSIM_REQUIRED set (.ci/run sets it) the session fails instead.
"""

from __future__ import annotations

import atexit
import os

import pytest

from .cluster import SimCluster, cleanup, unavailable_reason

_REASON = None
_CHECKED = False


def _reason():
    global _REASON, _CHECKED
    if not _CHECKED:
        _REASON = unavailable_reason()
        _CHECKED = True
    return _REASON


def pytest_configure(config):
    config.addinivalue_line("markers", "sim: needs the simulated Mac cluster (root, network namespaces, sshd)")


def pytest_collection_modifyitems(config, items):
    sim_items = [i for i in items if i.get_closest_marker("sim") is not None]
    if not sim_items:
        return
    reason = _reason()
    if reason and os.environ.get("MLXSIM_REQUIRED"):
        # CI (.ci/run) must run the simulated tier: a skip there would be a green run of unit tests alone
        message = (
            f"the simulated Mac cluster cannot run on this machine ({reason}), and "
            "MLXSIM_REQUIRED is set: its tests would all be skipped"
        )
        if hasattr(config, "workeroutput"):  # an xdist worker: the controller raises it too
            config.workeroutput["mlxsim_required"] = message
        raise pytest.UsageError(message)
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in sim_items:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: a worker's usage error shows only as a crashed test (INTERNALERROR,
    exit 3, the reason lost); raise it here, as a session without xdist does (exit 4)."""
    message = getattr(node, "workeroutput", {}).get("mlxsim_required")
    if message:
        raise pytest.UsageError(message)


class _Registry:
    def __init__(self, root):
        self.root = root
        self.clusters: dict[tuple, SimCluster] = {}

    def __call__(self, spec="mesh4", **kwargs) -> SimCluster:
        key = (str(spec), tuple(sorted(kwargs.items())))
        cluster = self.clusters.get(key)
        if cluster is None:
            name = str(spec).rsplit("/", 1)[-1].removesuffix(".yml").removesuffix(".yaml")
            state = self.root / f"{name}-{len(self.clusters)}"
            cluster = SimCluster(spec, state, **kwargs)
            self.clusters[key] = cluster  # registered first: torn down even if `up` fails half-way
            cluster.up()
        return cluster

    def clear_logs(self):
        for c in self.clusters.values():
            c.clear_argv_logs()

    def reset_all(self):
        """Every cluster built so far back to freshly booted Macs (SimCluster.reset)."""
        for c in self.clusters.values():
            c.reset()

    def down_all(self):
        errors = []
        for c in list(self.clusters.values()):
            try:
                c.down()
            except Exception as exc:  # noqa: BLE001 - tear the others down anyway
                errors.append(f"{c.spec.name}: {exc}")
        self.clusters.clear()
        return errors


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory):
    """Factory: sim_cluster("mesh4") -> a running SimCluster (one per spec per session)."""
    reason = _reason()
    if reason:
        pytest.skip(reason)
    # clusters of earlier sessions that died without teardown and whose state dirs pytest
    # has since deleted (it keeps the last three base temp dirs)
    cleanup(include_unlabeled=False)
    registry = _Registry(tmp_path_factory.mktemp("mlxsim"))
    atexit.register(registry.down_all)
    try:
        yield registry
    finally:
        errors = registry.down_all()
        atexit.unregister(registry.down_all)
        if errors:
            raise RuntimeError("simulated clusters did not come down cleanly: " + "; ".join(errors))


@pytest.fixture
def sim_clean_logs(sim_cluster):
    """Empty the argv logs of every simulated cluster of the session before the test."""
    sim_cluster.clear_logs()
    return sim_cluster.clear_logs
