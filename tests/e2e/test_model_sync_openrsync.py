"""Issue 11, part 5: model sync's `changed` with openrsync on the Macs (the simulated Macs' rsync
is tests/simcluster/shims/openrsync.py). From the controller (GNU rsync sending to the Macs'
openrsync servers) and from rank 0 (openrsync sending, which itemizes no unchanged file, as
Apple's source reads; the earlier reading's `<f.......` lines: tests/sim/test_openrsync_shim.py):
a second run changes nothing, and --check after one file changed lists that file only."""

from __future__ import annotations

import shutil

import pytest

from tests.e2e.benchutil import settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

COPY_TASK = {
    "controller": "Copy the model from the controller to every Mac",
    "rank0": "Copy the model from rank 0 to the other Macs, over Thunderbolt",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def copies(run, source):
    """{host: module result} of the copy task's runs (skipped hosts left out)."""
    return {e["host"]: e["res"] for e in run.results(COPY_TASK[source]) if not e["res"].get("skipped")}


@pytest.mark.parametrize("source", ["controller", "rank0"])
def test_rerun_is_unchanged_and_check_lists_only_the_changed_file(sim_cluster, tmp_path, tiny, source):
    cluster = sim_cluster("pair")
    cluster.reset()
    cluster.clear_argv_logs()
    for h in cluster.hosts:
        shutil.rmtree(cluster.home(h) / "mlx-cluster" / "models", ignore_errors=True)
    if source == "rank0":
        model = cluster.home("m1") / "mlx-cluster" / "models" / "tiny"
        shutil.copytree(tiny, model)
        extra = {"model_sync_source": "rank0", "model_sync_source_path": ""}
        tags, receivers = ["network", "hostfile", "models"], ["m2"]
    else:
        model = tmp_path / "tiny"
        shutil.copytree(tiny, model)
        extra = {"model_sync_source": "controller", "model_sync_source_path": str(model)}
        tags, receivers = ["models"], list(cluster.hosts)
    extravars = settings(cluster, tiny, **extra)
    files = sorted(p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file())

    first = run_site(cluster, tags=tags, extravars=extravars)
    assert first.rc == 0, first.failures()
    got = copies(first, source)
    assert sorted(got) == receivers
    for h, res in got.items():
        assert res["changed"] is True and sorted(res["transferred"]) == files, (h, res)
    for h in receivers:  # the Macs' openrsync took the receiving end
        assert any(a[0] == "rsync" and "--server" in a for a in cluster.argv_log(h)), h
    if source == "rank0":
        assert any(a[0] == "rsync" and "--server" not in a for a in cluster.argv_log("m1"))

    again = run_site(cluster, tags=tags, extravars=extravars)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    got = copies(again, source)
    assert sorted(got) == receivers
    for h, res in got.items():
        assert res["changed"] is False and res["transferred"] == [] and res["created"] == [], (h, res)
        if source == "rank0":  # openrsync sending: no unchanged file itemized
            assert res["unchanged"] == [], (h, res)

    config = model / "config.json"
    config.write_text(config.read_text() + "\n")  # one byte more, a new time
    check = run_site(cluster, tags=tags, extravars=extravars, check=True)
    assert check.rc == 0, check.failures()
    got = copies(check, source)
    assert sorted(got) == receivers
    for h, res in got.items():
        assert res["changed"] is True and res["transferred"] == ["config.json"], (h, res)
        assert res["created"] == [] and res["deleted"] == [], (h, res)
    for h in receivers:  # --check copied nothing
        dest = cluster.home(h) / "mlx-cluster" / "models" / "tiny" / "config.json"
        assert dest.read_bytes() == (tiny / "config.json").read_bytes(), h
