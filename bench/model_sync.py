#!/usr/bin/env python3
"""Benchmark: the model on every Mac, ours (tree) against the seed guide's serial loop, the
controller fan-out and mlx_lm.share, on simulated clusters with shaped links.

    .venv/bin/python bench/model_sync.py [--topologies mesh4,ring8,mesh3_dock] [--runs N]
        [--baseline-runs N] [--methods M,...] [--size-mb 200] [--tb-mbit 400] [--lan-mbit 8]
        [--progress-interval N] [--quick] [--journal FILE] [--json [FILE]] [--markdown FILE]
    .venv/bin/python bench/model_sync.py --report --journal FILE [--journal FILE...] [--markdown FILE]

Each simulated cluster (tests/simcluster; needs root) is configured once (`site.yml --tags
network,hostfile`, backend ring), then its links are shaped with `tc` (tbf) in the namespaces:
every Thunderbolt port's egress at --tb-mbit x (cable speed / 80 Gb/s) (a 40 Gb/s leg through a
dock at half), every Mac's management port at --lan-mbit both ways (its en0 and the switch
port toward it), and the controller's own uplink (mgmt0) at --lan-mbit: the copies the
controller sends in parallel share it, as they share a real controller's one network port.
A model of --size-mb is made locally: random bytes in four `.safetensors` shards plus a
config.json (rsync does not compress, so random bytes are what any weights cost).

What is timed, the order rotating from round to round so a load change hits every method:
- one copy: rsync from rank 0 to its first peer over their cable, the options model_rsync uses
  (the physical limit of any broadcast is about this one copy's time);
- parallel: the same from rank 0 to every cabled peer at once, one rsync per cable: whether a
  Mac sending over several cables at once is slower per copy (what model_sync_tree_fanout 0
  assumes it is not);
- tree: `site.yml --tags models` with `model_sync_source: tree` (model on rank 0 only): the whole
  run, and its copy phase (the span of its copy task, where every copy of the tree runs at once,
  each Mac passing each file on as soon as it has it);
- share: `mlx_lm.share --path <dest> --hostfile <our hostfile>` from the controller: MLX's own
  broadcast, all_sum over the ring backend across the same cables;
- share_fixed: the same with a config.json alone: share's cost whatever the model's size (launch,
  start-up, the ring's set-up), to set against the tree's copy phase (share minus it);
- serial (the seed guide's loop): rsync -a from rank 0 to one Mac after another, by the name
  the user reaches it at (the management network), each finished before the next starts;
- controller: `site.yml --tags models` with `model_sync_source: controller` (the fan-out over the
  management network; its copy task's span is its copy phase).
The playbook runs (tree, controller) use the role's mlx_cluster_progress_interval (10 s: each copy's
progress file read on its sender every few seconds while it runs) unless --progress-interval says
otherwise (0: no reads); it is recorded in the journal's setting.
The LAN-bound methods (serial, controller) run --baseline-runs times (default 1: their time is
the shaped LAN's, minutes per copy); the others --runs times. Every run starts with the model on
rank 0 only (the controller's run: on the controller only) and ends checked (sizes on every Mac).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]  # tests.*, and the toolkit as its collection

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import OWN_PREFIX  # noqa: E402
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import rsync_argv, ssh_command  # noqa: E402
from ansible_collections.mlx.cluster.plugins.plugin_utils import sync_plan  # noqa: E402
from bench.common import BenchError, emit, fmt, log, machine, machine_lines, measure, stats  # noqa: E402
from bench.common import write_section as common_write_section  # noqa: E402

TOPOLOGIES = ("mesh4", "ring8", "mesh3_dock")
# The tree's copies, all in one task (pipelined; before, one task per round: "..., round N").
TREE_TASK = "Copy the model along the cables, every copy at once"
# The tree's Thunderbolt hops without ssh (model_sync_transport: auto, the default since issue #27).
SEND_TASK = "Send along the cables, every copy at once, each file verified as it arrives: the model"
# How the tree copies, recorded in each journal (journals without it measured the tree by rounds).
TREE_KIND = "pipelined"
METHODS = (
    "one_copy",
    "parallel",
    "tree",
    "tree_rsync",
    "share",
    "share_fixed",
    "serial",
    "controller",
    "controller_tree",
)
# the LAN-bound methods (minutes each): measured in the first --baseline-runs runs only
BASELINES = ("serial", "controller", "controller_tree")
LABELS = {
    "one_copy": "one copy",
    "parallel": "parallel copies from rank 0",
    "tree": "tree (ours)",
    "tree_rsync": "tree over rsync and ssh",
    "share": "mlx_lm.share",
    "share_fixed": "mlx_lm.share of config.json alone",
    "serial": "serial loop",
    "controller": "controller fan-out",
    "controller_tree": "tree from the controller",
}
DISTS = ("ansible-core", "mlx", "mlx-lm")
MODEL = "bench"
FIXED = "bench-fixed"  # share_fixed's model: the config.json alone
SHARDS = 4
FULL_SPEED_GBPS = 80
BIN = Path(sys.executable).parent
# The harness's own rsyncs from rank 0 (one copy, parallel, serial): the harness key (in every
# Mac's authorized_keys) copied to rank 0, and the peers' host keys by every address, written by
# harness_trust(). Not the cluster key: the tree without ssh makes none, and revokes an old one.
KEY, KNOWN = "~/.mlxbench/id_ed25519", "~/.mlxbench/known_hosts"


def make_model(path, size_mb, shards=SHARDS):
    """config.json, an index and `shards` .safetensors files, size_mb MB in all: each shard one
    layer's tensor of random bytes (rsync does not compress, so random bytes cost what weights
    cost) behind a real safetensors header, as the model stage reads the headers (memory fit)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(
        json.dumps({"model_type": "bench", "size_mb": size_mb, "num_hidden_layers": shards}) + "\n"
    )
    per = size_mb * 1024 * 1024 // shards
    weight_map = {}
    for k in range(1, shards + 1):
        name, tensor = f"model-{k:05d}-of-{shards:05d}.safetensors", f"model.layers.{k - 1}.weight"
        weight_map[tensor] = name
        header = json.dumps({tensor: {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})
        # the tensor fills the shard: its size depends on the header's, whose digits depend on it
        nbytes = per - 8 - len(header) - 32
        header = json.dumps({tensor: {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}})
        header = header.encode() + b" " * (-len(header) % 8)  # 8-byte aligned, padded with spaces
        with open(path / name, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
            left = nbytes
            while left:
                chunk = os.urandom(min(left, 1 << 22))
                f.write(chunk)
                left -= len(chunk)
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": per * shards}, "weight_map": weight_map}) + "\n"
    )
    return sorted((p.name, p.stat().st_size) for p in path.iterdir())


def tc(netns, dev, mbit):
    """tbf on dev's egress in netns: mbit Mbit/s, bursts of 1/100 s (at least 32 KB)."""
    burst = max(32 * 1024, int(mbit * 1e6 / 8 / 100))
    argv = [
        "tc",
        "-n",
        netns,
        "qdisc",
        "replace",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        f"{mbit}mbit",
        "burst",
        str(burst),
        "latency",
        "100ms",
    ]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BenchError(f"{' '.join(argv)}: {res.stderr.strip()}")


def shape(cluster, plan, tb_mbit, lan_mbit):
    """Shape every Thunderbolt port (by its cable's speed), every management port both ways and
    the controller's uplink. Returns {cable id: Mbit/s}."""
    speeds = {c["id"]: c.get("speed_gbps") or FULL_SPEED_GBPS for c in plan["links"]["cables"]}
    rates = {}
    for i, host in enumerate(cluster.hosts):
        for end in plan["ip_plan"]["hosts"].get(host, []):
            rates[end["cable"]] = max(1, round(tb_mbit * speeds[end["cable"]] / FULL_SPEED_GBPS))
            tc(cluster.ns(host), end["iface"], rates[end["cable"]])
        tc(cluster.ns(host), "en0", lan_mbit)
        tc(cluster.ctl_ns, f"h{i}", lan_mbit)
    tc(cluster.ctl_ns, "mgmt0", lan_mbit)
    return rates


def dest_of(cluster, host):
    return cluster.home(host) / "mlx-cluster" / "models" / MODEL


def fresh(cluster, model, seed):
    """The model on rank 0 only (seed=True) or on no Mac at all."""
    rank0 = cluster.hosts[0]
    for h in cluster.hosts:
        if h != rank0 or not seed:
            shutil.rmtree(dest_of(cluster, h), ignore_errors=True)
        dest_of(cluster, h).parent.mkdir(parents=True, exist_ok=True)
    if seed and not dest_of(cluster, rank0).exists():
        shutil.copytree(model, dest_of(cluster, rank0))


def check_everywhere(cluster, files, who, hosts=None):
    for h in hosts or cluster.hosts:
        dest = dest_of(cluster, h)
        # (the record of verified files the copies without ssh keep beside the model is not the model's)
        got = (
            sorted((p.name, p.stat().st_size) for p in dest.iterdir() if not p.name.startswith(OWN_PREFIX))
            if dest.is_dir()
            else []
        )
        if got != files:
            raise BenchError(f"{who}: {h} has {got}, expected {files}")


def span(run, match):
    """Seconds from the first start to the last end of the (not skipped) task results whose task
    name `match` accepts."""
    starts, ends = [], []
    for e in run.events:
        data = e.get("event_data") or {}
        if e.get("event") == "runner_on_ok" and match(data.get("task") or "") and not data["res"].get("skipped"):
            starts.append(datetime.fromisoformat(data["start"]))
            ends.append(datetime.fromisoformat(data["end"]))
    if not starts:
        raise BenchError("no copy task ran")
    return (max(ends) - min(starts)).total_seconds()


def run_playbook(cluster, model, method, timeout, progress_interval=None):
    """The models stage, `method` tree (from rank 0), controller (fan-out) or controller_tree
    (model_sync_tree_from: controller); (seconds, its copy phase, its data movement: moving())."""
    from tests.e2e.runner import run_site

    on_controller = method in ("controller", "controller_tree")
    extra = {
        "model_sync_name": MODEL,
        "model_sync_source": "controller" if method == "controller" else "tree",
        "mlx_cluster_backend": "ring",
        "model_sync_source_path": str(model) if on_controller else "",
    }
    if method == "tree_rsync":
        extra["model_sync_transport"] = "rsync"
    if method != "controller":
        extra["model_sync_tree_from"] = "controller" if method == "controller_tree" else "rank0"
    if progress_interval is not None:
        extra["mlx_cluster_progress_interval"] = progress_interval
    t = time.perf_counter()
    run = run_site(cluster, tags=["models"], extravars=extra, timeout=timeout)
    seconds = time.perf_counter() - t
    if run.rc != 0:
        raise BenchError(f"{LABELS[method]}: {run.failures()}")
    if method != "controller":  # the tree's copies: over rsync, and (auto) the cables' own
        copy = span(run, lambda name: name in (TREE_TASK, SEND_TASK))
    else:
        copy = span(run, lambda name: name == "Copy the model from the controller to every Mac")
    return seconds, copy, moving(run)


def moving(run):
    """The longest time a sender of the cables' copies moved data (model_send's own `seconds`:
    from its first connection to its last file verified), or None without such a copy. Every
    sender starts its copy within a fraction of a second of the others (each relay passing on
    its copy as it arrives), so this is the copies' data movement; the copy task's span adds
    Ansible's start of each sender (the controller's worker, the module's payload, its Python)."""
    took = [
        e["event_data"]["res"]["seconds"]
        for e in run.events
        if e.get("event") == "runner_on_ok"
        and (e.get("event_data") or {}).get("task") == SEND_TASK
        and isinstance(e["event_data"].get("res", {}).get("seconds"), (int, float))
    ]
    return max(took) if took else None


def rank0_rsync(cluster, host, address, archive=False):
    """rsync from rank 0 to host at address, with the cluster key; seconds. archive: the guide's
    `rsync -a`, else the options model_rsync uses."""
    rank0 = cluster.hosts[0]
    src = str(Path(cluster.session_home(rank0)) / "mlx-cluster" / "models" / MODEL)
    rsh = ssh_command(
        "ssh",
        [
            "-i",
            KEY,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={KNOWN}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-l",
            cluster.user,
        ],
    )
    dest = f"{address}:{Path(cluster.session_home(host)) / 'mlx-cluster' / 'models' / MODEL}/"
    argv = (
        ["rsync", "-a", "--rsh", rsh, src + "/", dest] if archive else rsync_argv("rsync", src, dest, ssh_command=rsh)
    )
    t = time.perf_counter()
    res = cluster.exec(rank0, argv, timeout=7200)
    if res.returncode != 0:
        raise BenchError(f"rsync {rank0} -> {host} ({address}): {res.stderr.strip()[-1000:]}")
    return time.perf_counter() - t


def harness_trust(cluster, plan):
    """Put KEY and KNOWN on rank 0 (see there): each peer's host key, as the Mac has it, under
    its management address and every address of its cables."""
    rank0 = cluster.hosts[0]
    home = cluster.home(rank0) / ".mlxbench"
    home.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(cluster.key_path, home / "id_ed25519")
    os.chmod(home / "id_ed25519", 0o600)
    lines = []
    for h in cluster.hosts[1:]:
        res = cluster.exec(h, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
        if res.returncode != 0:
            raise BenchError(f"{h}'s host key: {res.stderr.strip()}")
        names = [cluster.mgmt_address(h)] + [e["address"] for e in plan["ip_plan"]["hosts"].get(h, [])]
        lines.append(",".join(names) + " " + " ".join(res.stdout.split()[:2]))
    (home / "known_hosts").write_text("\n".join(lines) + "\n")


def cabled_peers(cluster, plan):
    """[(peer, its address)] of rank 0's cables, one per peer (the first cable to it)."""
    out = {}
    for end in plan["ip_plan"]["hosts"][cluster.hosts[0]]:
        out.setdefault(end["peer_host"], end["peer_address"])
    return list(out.items())


def one_copy(cluster, plan):
    return rank0_rsync(cluster, *cabled_peers(cluster, plan)[0])


def parallel(cluster, plan):
    """rank 0 to every cabled peer at once; the slowest copy's seconds."""
    times, errors = {}, []

    def copy(host, address):
        try:
            times[host] = rank0_rsync(cluster, host, address)
        except BenchError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=copy, args=peer) for peer in cabled_peers(cluster, plan)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError("; ".join(errors))
    return max(times.values())


def serial(cluster, plan):
    return sum(rank0_rsync(cluster, h, cluster.mgmt_address(h), archive=True) for h in cluster.hosts[1:])


def share(cluster, hostfile, timeout, name=MODEL):
    rank0 = cluster.hosts[0]
    path = Path(cluster.session_home(rank0)) / "mlx-cluster" / "models" / name
    argv = [str(BIN / "mlx_lm.share"), "--path", str(path), "--hostfile", str(hostfile), "--tmpdir", str(path.parent)]
    env = dict(cluster.harness_env(), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PATH"] = os.pathsep.join([str(BIN), env["PATH"]])
    t = time.perf_counter()
    res = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )
    seconds = time.perf_counter() - t
    if res.returncode != 0:
        raise BenchError(f"mlx_lm.share exited with {res.returncode}: {(res.stdout + res.stderr)[-2000:]}")
    return seconds


def share_fixed(cluster, model, hostfile, timeout):
    """mlx_lm.share of the model's config.json alone: what share costs whatever the model's size
    (the launch over SSH, Python and MLX starting on every Mac, the ring's set-up, the file list)."""
    dirs = {h: dest_of(cluster, h).parent / FIXED for h in cluster.hosts}
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    dirs[cluster.hosts[0]].mkdir()
    shutil.copy2(model / "config.json", dirs[cluster.hosts[0]])
    seconds = share(cluster, hostfile, timeout, FIXED)
    missing = [h for h, d in dirs.items() if not (d / "config.json").is_file()]
    if missing:
        raise BenchError(f"mlx_lm.share of config.json alone: no copy on {', '.join(missing)}")
    return seconds


class Journal:
    """Every measurement as it is made, one JSON line each in `path` (None: kept in memory only).
    The machine is shared and the LAN-bound runs take many minutes: a run cut short is resumed by
    the next one given the same file, which measures only what is missing."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        text = self.path.read_text() if self.path and self.path.exists() else ""
        self.records = [json.loads(line) for line in text.splitlines() if line.strip()]

    def add(self, **record):
        self.records.append(record)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")

    def get(self, topology, method, run, part=None):
        return next(
            (
                r
                for r in self.records
                if (r.get("topology"), r.get("method"), r.get("run"), r.get("part")) == (topology, method, run, part)
            ),
            None,
        )

    def meta(self, topology):
        return next((r["meta"] for r in self.records if r.get("topology") == topology and "meta" in r), None)

    def result(self, topology):
        """{topology, hosts, cables, depth, rates_mbit, samples, copy_phase} from the records."""
        samples = {m: [] for m in METHODS}
        copy_phase = {"tree": [], "tree_rsync": [], "controller": [], "controller_tree": []}
        moving = []  # the tree's data movement over the cables (journals before 2026-11-29 lack it)
        for r in self.records:
            if r.get("topology") == topology and r.get("method") in samples and r.get("part") is None:
                samples[r["method"]].append(r["seconds"])
                if r["method"] in copy_phase:
                    copy_phase[r["method"]].append(r["copy"])
                if r["method"] == "tree" and "moving" in r:
                    moving.append(r["moving"])
        return {
            "topology": topology,
            **self.meta(topology),
            "samples": samples,
            "copy_phase": copy_phase,
            "moving": moving,
        }


def schedule(runs, baseline_runs, only=METHODS):
    """[(run, method)] in the order they are measured: the methods rotate from run to run."""
    out = []
    for r in range(runs):
        methods = [m for m in METHODS if (m not in BASELINES or r < baseline_runs) and m in only]
        k = r % len(methods) if methods else 0
        out += [(r, m) for m in methods[k:] + methods[:k]]
    return out


def measure_one(cluster, spec, plan, method, run, journal, model, files, timeout, progress_interval=None):
    """One measurement of `method` (the serial loop copy by copy, each journaled); the record."""
    art = cluster.inventory_path.parent / "artifacts"
    record = {"topology": spec, "method": method, "run": run}
    fresh(cluster, model, seed=method not in ("controller", "controller_tree"))
    if method in ("tree", "tree_rsync", "controller", "controller_tree"):
        record["seconds"], record["copy"], moved = run_playbook(cluster, model, method, timeout, progress_interval)
        if moved is not None:
            record["moving"] = moved
    elif method == "one_copy":
        record["seconds"] = one_copy(cluster, plan)
    elif method == "parallel":
        record["seconds"] = parallel(cluster, plan)
    elif method == "share":
        record["seconds"] = share(cluster, art / "hostfile.json", timeout)
    elif method == "share_fixed":
        record["seconds"] = share_fixed(cluster, model, art / "hostfile.json", timeout)
    else:  # serial: one Mac after another; each copy kept as soon as it is done
        total = 0.0
        for host in cluster.hosts[1:]:
            part = journal.get(spec, method, run, host)
            if part is None:
                seconds = rank0_rsync(cluster, host, cluster.mgmt_address(host), archive=True)
                check_everywhere(cluster, files, method, [host])
                part = {"topology": spec, "method": method, "run": run, "part": host, "seconds": seconds}
                journal.add(**part)
            total += part["seconds"]
        record["seconds"] = total
    if method in ("tree", "tree_rsync", "controller", "controller_tree", "share"):
        check_everywhere(cluster, files, method)
    journal.add(**record)
    return record


def bench_topology(spec, args, runs, baseline_runs, state_root, model, files, journal):
    from tests.e2e.runner import run_site
    from tests.simcluster import SimCluster

    todo = [(r, m) for r, m in schedule(runs, baseline_runs, args.methods) if journal.get(spec, m, r) is None]
    if not todo:
        log(f"{spec}: every measurement is in the journal already")
        return journal.result(spec)
    cluster = SimCluster(spec, state_dir=state_root / spec)
    t0 = time.monotonic()
    cluster.up()
    try:
        setup = run_site(cluster, tags=["network", "hostfile"], extravars={"mlx_cluster_backend": "ring"})
        if setup.rc != 0:
            raise BenchError(f"{spec}: the network stage failed: {setup.failures()}")
        plan = json.loads((cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
        rounds = sync_plan.plan_rounds(plan, source=cluster.hosts[0])
        rates = shape(cluster, plan, args.tb_mbit, args.lan_mbit)
        if journal.meta(spec) is None:
            journal.add(
                topology=spec,
                meta={
                    "hosts": len(cluster.hosts),
                    "cables": len(plan["links"]["cables"]),
                    "depth": rounds["depth"],
                    "rates_mbit": rates,
                },
            )
        log(
            f"{spec}: {len(cluster.hosts)} Macs, {len(plan['links']['cables'])} cables, tree depth "
            f"{rounds['depth']}, up and configured in {time.monotonic() - t0:.1f} s; links shaped "
            f"(Thunderbolt {sorted(set(rates.values()))} Mbit/s, LAN {args.lan_mbit} Mbit/s); "
            f"{len(todo)} measurement(s) to make"
        )
        harness_trust(cluster, plan)
        for method in ("tree_rsync", "tree"):  # warm-up (not timed)
            fresh(cluster, model, seed=True)
            run_playbook(cluster, model, method, args.timeout, args.progress_interval)
        for r, method in todo:
            rec = measure_one(
                cluster, spec, plan, method, r, journal, model, files, args.timeout, args.progress_interval
            )
            log(
                f"{spec} run {r + 1}/{runs}: {LABELS[method]} {rec['seconds']:.1f} s"
                + (f" (copies {rec['copy']:.1f} s)" if "copy" in rec else "")
            )
    finally:
        cluster.down()
    return journal.result(spec)


def summarize(result):
    """min/median/max of every method (and of the copy phases), their ratios, the runs of each."""
    s, c = result["samples"], result["copy_phase"]
    out = {m: stats(v) for m, v in s.items() if v}
    out.update({f"{m}_copies": stats(v) for m, v in c.items() if v})
    if result.get("moving"):
        out["tree_moving"] = stats(result["moving"])

    def ratio(key, a, b, times=1):
        if a in out and b in out:
            out[key] = out[a]["median"] / (out[b]["median"] * times)

    ratio("parallel_vs_one", "parallel", "one_copy")
    ratio("tree_vs_one", "tree_copies", "one_copy")
    ratio("tree_vs_depth", "tree_copies", "one_copy", result["depth"])
    ratio("moving_vs_one", "tree_moving", "one_copy")
    ratio("tree_run_vs_one", "tree", "one_copy")
    ratio("share_vs_one", "share", "one_copy")
    for m in ("serial", "controller", "share"):
        ratio(f"{m}_vs_tree", m, "tree")
    ratio("controller_vs_controller_tree", "controller", "controller_tree")
    ratio("tree_rsync_vs_one", "tree_rsync_copies", "one_copy")
    ratio("tree_vs_tree_rsync", "tree_copies", "tree_rsync_copies")
    out["runs"] = {m: len(v) for m, v in s.items() if v}
    return out


HEADER = (
    "topology",
    "Macs",
    "depth",
    "runs",
    "one copy (s)",
    "parallel from rank 0 (s)",
    "tree: run (s)",
    "tree: copies (s)",
    "copies / one copy",
    "copies / (one copy x depth)",
    "tree: data moving (s)",
    "moving / one copy",
    "run / one copy",
    "mlx_lm.share (s)",
    "share / one copy",
    "share of config.json alone (s)",
    "serial loop (s)",
    "controller fan-out: run (s)",
    "controller: copies (s)",
    "serial / tree run",
    "controller / tree run",
    "tree over rsync and ssh: copies (s)",
    "its copies / one copy",
    "ours / over rsync (copies)",
    "tree from the controller: run (s)",
    "its copies (s)",
    "controller fan-out / tree from the controller",
)


def _runs(counts):
    """'3', or '3; serial 1, controller 1' when some methods ran fewer times."""
    if not counts:
        return "0"
    most = max(counts.values())
    fewer = [f"{m} {n}" for m, n in counts.items() if n != most]
    return f"{most}" + (f"; {', '.join(fewer)}" if fewer else "")


def table_rows(results):
    rows = []
    for r in results:
        x = summarize(r)
        cell = lambda key, digits=1: fmt(x[key], digits) if key in x else "-"  # noqa: E731, B023 - used at once, in this iteration
        ratio = lambda key, digits=2, unit="": f"{x[key]:.{digits}f}{unit}" if key in x else "-"  # noqa: E731, B023 - used at once, in this iteration
        rows.append(
            (
                r["topology"],
                str(r["hosts"]),
                str(r["depth"]),
                _runs(x["runs"]),
                cell("one_copy"),
                cell("parallel") + (f" ({x['parallel_vs_one']:.2f}x)" if "parallel_vs_one" in x else ""),
                cell("tree"),
                cell("tree_copies"),
                ratio("tree_vs_one"),
                ratio("tree_vs_depth"),
                cell("tree_moving"),
                ratio("moving_vs_one"),
                ratio("tree_run_vs_one"),
                cell("share"),
                ratio("share_vs_one"),
                cell("share_fixed"),
                cell("serial", 0),
                cell("controller", 0),
                cell("controller_copies", 0),
                ratio("serial_vs_tree", 1, "x"),
                ratio("controller_vs_tree", 1, "x"),
                cell("tree_rsync_copies"),
                ratio("tree_rsync_vs_one"),
                ratio("tree_vs_tree_rsync"),
                cell("controller_tree", 0),
                cell("controller_tree_copies", 0),
                ratio("controller_vs_controller_tree", 1, "x"),
            )
        )
    return rows


def describe(setting, tree=None):
    text = (
        f"{setting['size_mb']} MB model; Thunderbolt {setting['tb_mbit']} Mbit/s per 80 Gb/s cable, "
        f"LAN {setting['lan_mbit']} Mbit/s (Thunderbolt {setting['tb_mbit'] / setting['lan_mbit']:.0f}x the LAN)"
    )
    if "progress_interval" in setting:
        text += f"; mlx_cluster_progress_interval {setting['progress_interval']}"
    return text + {
        None: "",
        "rounds": "; the tree by rounds (before pipelining)",
        "pipelined": "; the pipelined tree",
    }.get(tree, f"; tree: {tree}")


def text_table(tables):
    """tables: [(setting, info, results, ...)]; one plain-text table per setting."""
    out = []
    for setting, info, results, *_ in tables:
        rows = table_rows(results)
        widths = [max(len(row[i]) for row in rows + [HEADER]) for i in range(len(HEADER))]
        line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731, B023 - used at once, in this iteration
        out += [
            f"median (min–max); {describe(setting, info.get('tree'))}",
            line(HEADER),
            "  ".join("-" * w for w in widths),
        ]
        out += [line(row) for row in rows] + [""]
    return "\n".join(out).rstrip("\n")


SECTION = "## Model on every Mac (bench/model_sync.py)"


def markdown_section(tables, command):
    """This benchmark's section: what is measured, then per setting (tables: [(setting, info,
    results, commands)]) its table, the machine and the commands that measured it."""
    out = [
        SECTION,
        "",
        "Generated by `bench/model_sync.py` (re-run it with `--report --journal FILE... --markdown",
        "docs/benchmarks.md`: it replaces this section only).",
        "",
        f"A model (random bytes behind real safetensors headers, in {SHARDS} `.safetensors` shards, an index",
        "and a config.json) from rank 0 to every Mac of a simulated cluster whose links are shaped with",
        "`tc` (tbf) in the namespaces: each Thunderbolt port at the given rate for an 80 Gb/s cable (a",
        "40 Gb/s leg at half), each Mac's management port both ways and the controller's own uplink at",
        "the LAN rate.",
        "",
        "- one copy: rsync from rank 0 to one peer over their cable (model_rsync's options): the time",
        "  any broadcast is bounded by (a pipelined one comes close to it);",
        "- parallel from rank 0: the same to every cabled peer of rank 0 at once, the slowest copy (and",
        "  its ratio to one copy): does a Mac sending over several cables slow each copy down?",
        "- tree (ours): `site.yml --tags models`, `model_sync_source: tree` (Thunderbolt hops without ssh,",
        "  model_sync_transport auto, since issue #27; `tree over rsync and ssh`: model_sync_transport",
        "  rsync, what the tree was before); run = the whole playbook",
        "  (discovery, plan, SSH trust, manifests, memory fit, verification), copies = its copy task",
        "  (every copy of the tree at once, each Mac passing each file on as soon as it has it; before",
        "  the pipelined tree: the first round's start to the last round's end); data moving = the",
        "  longest a sender of the cables' copies moved data (model_send's own seconds, from its first",
        "  connection to its last file verified; every sender starts within a fraction of a second of",
        "  the others): the copies without Ansible's start of each sender (its worker, payload, Python);",
        "- mlx_lm.share: MLX's broadcast (all_sum over the ring backend, same cables, our hostfile);",
        "  share of config.json alone: the same with no weights, what share costs whatever the size",
        "  (launch over SSH, Python and MLX starting on every Mac, the ring's set-up);",
        "- serial loop (the seed guide's): `rsync -a` from rank 0 to one Mac after another by the",
        "  name the user reaches it at, over the management network;",
        "- controller fan-out: `model_sync_source: controller`, every Mac at once over the LAN (run: the",
        "  whole playbook; copies: its copy task).",
        "",
        "Median (min–max) of interleaved runs (the runs column: how many; a method named there ran fewer",
        "times). Every run starts with the model on rank 0 only (the controller fan-out: on the controller",
        "only) and ends checked on every Mac. Targets (issue #15): a mesh's copies within 1.5x of one copy;",
        "ring8 within 1.5x of one copy x the tree's depth and at least 10x faster than the serial loop.",
    ]
    for setting, info, results, commands in tables:
        rows = table_rows(results)
        out += [
            "",
            f"### {describe(setting, info.get('tree'))}",
            "",
            *([f"({info['label']})", ""] if info.get("label") else []),
            "| " + " | ".join(HEADER) + " |",
            "|" + "|".join("---" for _ in HEADER) + "|",
        ]
        out += ["| " + " | ".join(row) + " |" for row in rows]
        out += ["", *machine_lines(info, DISTS)]
        out += [f"- measured with: `{c}`" for c in commands]
    out += ["", f"This section: `{command}`", ""]
    return "\n".join(out)


def journal_table(journal, topologies):
    """(setting, machine, results of `topologies` it has, the commands that measured them) of a
    journal: the machine as first recorded, with the dates it spans and the highest end load."""
    setting = next(r["setting"] for r in journal.records if "setting" in r)
    machines = [r["machine"] for r in journal.records if "machine" in r]
    info = dict(
        machines[0],
        loadavg_end=max(m.get("loadavg_end", 0) for m in machines),
        date=" to ".join(dict.fromkeys([machines[0]["date"], machines[-1]["date"]])),
    )
    commands = list(dict.fromkeys(r["command"] for r in journal.records if r.get("command")))
    info["tree"] = next((r["tree"] for r in journal.records if "tree" in r), "rounds")
    # a note added to a journal by hand (e.g. which commit measured it), shown with its table
    info["label"] = next((r["label"] for r in journal.records if "label" in r), None)
    return setting, info, [journal.result(t) for t in topologies if journal.meta(t)], commands


def write_section(path, section):
    """Replace this benchmark's section of `path` (up to the next `## ` heading), or append it."""
    common_write_section(path, SECTION, section)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--topologies", default=None, help=f"comma-separated specs (default {','.join(TOPOLOGIES)}; --quick: mesh4)"
    )
    parser.add_argument("--runs", type=int, default=None, help="timed rounds (default 3; --quick: 1)")
    parser.add_argument("--baseline-runs", type=int, default=1, help="rounds that also time serial and controller")
    parser.add_argument("--size-mb", type=int, default=None, help="model size (default 200; --quick: 20)")
    parser.add_argument("--tb-mbit", type=int, default=400, help="Thunderbolt rate of an 80 Gb/s cable")
    parser.add_argument("--lan-mbit", type=int, default=8, help="management network rate")
    parser.add_argument("--timeout", type=int, default=7200, help="bound of each run (s)")
    parser.add_argument(
        "--progress-interval",
        type=int,
        default=None,
        help="mlx_cluster_progress_interval of the playbook runs (default: the role's, 10 s; "
        "0 = no progress reads); recorded in the setting",
    )
    parser.add_argument("--quick", action="store_true", help="smoke: mesh4, 20 MB, one round")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, of {','.join(METHODS)} (default all): e.g. the quick ones "
        "first, the LAN-bound baselines in later runs with the same --journal",
    )
    parser.add_argument(
        "--journal",
        metavar="FILE",
        action="append",
        default=[],
        help="keep every measurement in FILE (JSON lines) and measure only what it lacks: "
        "an interrupted run is resumed by running the same command again; with "
        "--report, several FILEs (one setting each): one table per FILE",
    )
    parser.add_argument("--report", action="store_true", help="measure nothing: the tables from --journal")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE")
    parser.add_argument("--markdown", metavar="FILE", help="replace (or add) this benchmark's section of FILE")
    parser.add_argument("--state-root", metavar="DIR")
    args = parser.parse_args(argv)
    topologies = [t for t in (args.topologies or ("mesh4" if args.quick else ",".join(TOPOLOGIES))).split(",") if t]
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    args.size_mb = args.size_mb or (20 if args.quick else 200)
    if runs < 1 or args.baseline_runs < 0 or args.size_mb < 1:
        parser.error("--runs and --size-mb must be at least 1, --baseline-runs at least 0")
    args.methods = [m for m in args.methods.split(",") if m]
    if set(args.methods) - set(METHODS):
        parser.error(f"--methods: unknown {sorted(set(args.methods) - set(METHODS))}")
    if args.report and not args.journal:
        parser.error("--report needs --journal")
    if not args.report and len(args.journal) > 1:
        parser.error("a measuring run keeps one --journal (several are for --report)")
    journals = [Journal(path) for path in args.journal] or [Journal()]
    if args.report:
        empty = [path for path, j in zip(args.journal, journals) if not any("setting" in r for r in j.records)]
        if empty:
            parser.error(f"--journal {empty[0]} holds no measurement")
    else:
        journal = journals[0]
        setting = {"size_mb": args.size_mb, "tb_mbit": args.tb_mbit, "lan_mbit": args.lan_mbit}
        if args.progress_interval is not None:
            setting["progress_interval"] = args.progress_interval
        earlier = [r["setting"] for r in journal.records if "setting" in r]
        if any(e != setting for e in earlier):
            parser.error(f"--journal {args.journal[0]} holds measurements made with {earlier[0]}, not {setting}")
        info = machine(DISTS)
        journal.add(
            setting=setting,
            machine=dict(info, loadavg_end=info["loadavg_start"]),
            command=shlex.join(["python", "bench/model_sync.py", *argv]),
            tree=TREE_KIND,
        )

        def work(root):
            model = root / "model" / MODEL
            files = make_model(model, args.size_mb)
            return [
                bench_topology(spec, args, runs, args.baseline_runs, root, model, files, journal) for spec in topologies
            ]

        _results, status = measure(work, info, "mlxc-bench-sync-", args.state_root)
        if status is not None:
            return status
        journal.add(setting=setting, machine=info)
    tables = [journal_table(j, topologies) for j in journals]
    if args.markdown:
        command = shlex.join(
            [
                "python",
                "bench/model_sync.py",
                "--report",
                *(f"--journal={j}" for j in args.journal),
                "--topologies",
                ",".join(topologies),
                "--markdown",
                args.markdown,
            ]
        )
        write_section(Path(args.markdown), markdown_section(tables, command))
    emit(
        {
            "tables": [
                {
                    "setting": setting,
                    "machine": info,
                    "commands": commands,
                    "results": [{**r, "summary": summarize(r)} for r in results],
                }
                for setting, info, results, commands in tables
            ]
        },
        args.json,
        text_table(tables),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
