"""Issue 13, item 4: a long copy shows its progress while it runs. On two Macs, rank 0 (m1)
pushes the model to m2 with its openrsync over their cable, slowed with `tc` to a few seconds
(bench/model_sync.py's shaping); with mlx_cluster_progress_interval 1 the playbook prints
`[m2 -> m1] model: x/y MB (n%), r MB/s` lines before the task's result, and the result is the
module's as before (no async keys), and nothing of the reads is left on the Mac. A second run
copies nothing and prints no progress."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from bench.model_sync import tc
from tests.e2e.benchutil import controller_model, model_files, settings
from tests.e2e.runner import run_site
from tests.tinymodel import make_tiny_model

pytestmark = [pytest.mark.sim, pytest.mark.slow]

COPY_TASK = "Copy the model from rank 0 to the other Macs, over Thunderbolt"
PAD_BYTES = 6 * 1000 * 1000  # beside the tiny model: about 4 s at the shaped rate
SHAPED_MBIT = 12  # m1's end of the m1-m2 cable (en2), its egress
LABEL = r"\[m2 -> m1(\([\d.]+\))?\]"  # as Ansible's default callback names the host: [m2 -> m1(10.99.0.11)]
PROGRESS = re.compile(LABEL + r" model: \d+\.\d/\d+\.\d MB \(\d+%\)(, [\d.]+ [KM]?B/s)?$")


def progress_lines(run, task_name, label_re, line_re):
    """(the host label of the task's first changed result, the progress lines printed before
    it), each line checked against line_re and that label; printed as a user sees them (-s)."""
    lines = run.stdout.splitlines()
    task = next(i for i, ln in enumerate(lines) if ln.startswith("TASK [") and task_name in ln)
    result = next((i for i, ln in enumerate(lines) if i > task and re.match("changed: " + label_re, ln)), None)
    assert result is not None, "\n".join(lines[task : task + 40])
    label = re.match("changed: (" + label_re + ")", lines[result]).group(1)
    shown = [ln for ln in lines[task:result] if re.match(label_re + " model: ", ln)]
    assert shown, "\n".join(lines[task : result + 1])
    assert all(line_re.match(ln) and ln.startswith(label + " ") for ln in shown), (label, shown)
    print("\n".join([lines[task], *shown, lines[result]]))
    return label, shown


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", dtype="float32")


def test_a_slow_copy_prints_progress_before_its_result(sim_cluster, tiny):
    cluster = sim_cluster("pair")
    cluster.reset()
    for h in cluster.hosts:
        shutil.rmtree(cluster.home(h) / "mlx-cluster" / "models", ignore_errors=True)
    model = cluster.home("m1") / "mlx-cluster" / "models" / "tiny"
    shutil.copytree(tiny, model)
    (model / "padding.dat").write_bytes(os.urandom(PAD_BYTES))  # not a weight file: no header read
    extravars = settings(
        cluster, tiny, model_sync_source="rank0", model_sync_source_path="", mlx_cluster_progress_interval=1
    )
    tc(cluster.ns("m1"), "en2", SHAPED_MBIT)
    try:
        first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    finally:
        subprocess.run(
            ["tc", "-n", cluster.ns("m1"), "qdisc", "del", "dev", "en2", "root"], check=False, capture_output=True
        )
    assert first.rc == 0, first.failures()
    (res,) = [e["res"] for e in first.results(COPY_TASK) if e["host"] == "m2"]
    assert res["changed"] is True and "padding.dat" in res["transferred"], res
    assert "--progress" in res["cmd"] and not set(res) & {"ansible_job_id", "started", "finished", "results_file"}
    # the copy ran as a plain task (no async job) and its temporary directory, with the progress
    # file, is gone from the Mac it ran on
    assert not (cluster.home("m1") / ".ansible_async").exists()
    assert (cluster.home("m1") / ".ansible" / "tmp").is_dir()  # where Ansible makes a task's directory
    left = [p.name for p in cluster.home("m1").glob(".ansible/tmp/ansible-tmp-*")]
    assert left == [], left

    label, shown = progress_lines(first, COPY_TASK, LABEL, PROGRESS)
    total = PAD_BYTES + sum(p.stat().st_size for p in tiny.rglob("*") if p.is_file())
    assert f"/{total / 1e6:.1f} MB" in shown[-1], (shown, total)

    again = run_site(cluster, tags=["models"], extravars=extravars)
    assert again.rc == 0, again.failures()
    assert again.changed() == 0, again.stats
    assert " model: " not in again.stdout


SEND_TASK = "Send along the cables, every copy at once, each file verified as it arrives: the model"
ANY_LABEL = r"\[m\d -> m\d(\([\d.]+\))?\]"


def test_the_default_copy_over_the_cable_prints_progress_too(sim_cluster, tiny):
    """The default (the tree from the controller: the LAN into one Mac, then the cable without
    ssh): the cable's copy (model_send) prints the same lines as rsync's, before its result."""
    cluster = sim_cluster("pair")
    model = controller_model(cluster, tiny)
    (model / "padding.dat").write_bytes(os.urandom(PAD_BYTES))
    extravars = settings(cluster, model, mlx_cluster_progress_interval=1)
    shaped = [(h, iface) for h in cluster.hosts for iface in cluster.spec.cables_of(h)]
    for host, iface in shaped:
        tc(cluster.ns(host), iface, SHAPED_MBIT)
    try:
        first = run_site(cluster, tags=["network", "hostfile", "models"], extravars=extravars)
    finally:
        for host, iface in shaped:
            subprocess.run(
                ["tc", "-n", cluster.ns(host), "qdisc", "del", "dev", iface, "root"], check=False, capture_output=True
            )
    assert first.rc == 0, first.failures()
    label, shown = progress_lines(
        first, SEND_TASK, ANY_LABEL, re.compile(ANY_LABEL + r" model: \d+\.\d/\d+\.\d MB \(\d+%\)(, [\d.]+ [KM]?B/s)?$")
    )
    total = sum(len(b) for b in model_files(model).values())
    assert f"/{total / 1e6:.1f} MB" in shown[-1], (shown, total)
    sender = re.match(r"\[m\d -> (m\d)", label).group(1)
    assert not list(
        cluster.home(sender).glob(".ansible/tmp/ansible-tmp-*")
    )  # the progress file went with its directory
