#!/usr/bin/env python3
"""Benchmark: time to a configured cluster, ours against `mlx.distributed_config`.

    .venv/bin/python bench/configure.py [--topologies mesh4,mesh8,ring16] [--runs N] [--quick]
                                        [--json [FILE]] [--markdown FILE]

On each simulated cluster (tests/simcluster; needs root) it times, interleaved:
- ours, first run: `ansible-playbook site.yml --tags network,hostfile` on a fresh cluster
  (validate, discover and plan always run): addresses on every cable, persistent, pinged,
  hostfile on the controller and every Mac;
- ours, re-run: the same command again at once, nothing to change (must report changed=0);
- `mlx.distributed_config --over thunderbolt --hosts ... --auto-setup --output-hostfile F`,
  MLX's own tool, unmodified, on a fresh cluster: addresses on every cable, hostfile written.

"Fresh" is `cluster.reset()` plus removing the hostfiles left by the previous run (on the
controller and on the Macs), so every first run starts from factory state. Every run starts
without SSH master connections (its own ControlPath directory, masters closed after it),
as a user's run a few minutes after the previous one would. Each first run is checked: exit
status 0, the hostfile written, an IPv4 address on both ends of every cable. The runs of one
round alternate their order (ours first, then MLX first) so a load change on the machine
hits both.

SSH columns come from the Macs' sshd logs (LogLevel VERBOSE): connections are
"Accepted publickey" lines, commands are "Starting session" lines (one per remote command or
file transfer, also over a multiplexed connection), both per host (max over hosts) and run.
The ratio is ours (first run) / distributed_config, taken per round, then min/median/max.

The floor, in the same round on the configured cluster, without SSH masters: `ansible -m
ansible.builtin.ping` to every Mac (Ansible's start, one SSH connection and one module run per
Mac: the least that any run touching every Mac costs), and the discovery module alone, run the
same way with the arguments a configure re-run gives it (what a re-run must read to notice a
moved cable, a lost address or RDMA switched off). The issue's targets (TARGETS, RERUN_TARGET)
are shown in seconds beside them: a target below the floor cannot be met by a playbook run on
this machine, whatever the playbook does after discovery.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]  # tests.*, bench.*, and the toolkit as its collection

from ansible_collections.mlx.cluster.plugins.plugin_utils import planner as mlx_planner  # noqa: E402
from bench.common import (  # noqa: E402
    BenchError,
    close_masters,
    emit,
    fmt,
    log,
    machine,
    machine_lines,
    measure,
    playbook_env,
    read_section,
    stats,
    write_section,
)
from tests.e2e.runner import existing_vars  # noqa: E402
from tests.simcluster import SimCluster  # noqa: E402

TOPOLOGIES = ("mesh4", "mesh8", "ring16")
# Issue #15: ours at most this share of distributed_config's time (first run), per topology;
# a re-run at most RERUN_TARGET of our first run.
TARGETS = {"mesh4": 0.7, "mesh8": 0.5, "ring16": 0.5}
RERUN_TARGET = 0.35
# The stages of a configure run (`--tags`), and what the discovery module reads in one (the
# plan's own rule, planner.discovery_request): the links pinged and the hostfile.
CONFIGURE_TAGS = ("network", "hostfile")
DISCOVERY_ARGS = json.dumps(mlx_planner.discovery_request(CONFIGURE_TAGS), separators=(",", ":"))
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def ssh_counts(cluster):
    """{host: (connections, commands)} so far, from the Mac's sshd log."""
    out = {}
    for h in cluster.hosts:
        log = cluster.sshd_log(h)
        out[h] = (log.count("Accepted publickey"), log.count("Starting session"))
    return out


def ssh_delta(before, after):
    """(max connections, max commands) per host between two ssh_counts()."""
    return (max(after[h][0] - before[h][0] for h in after), max(after[h][1] - before[h][1] for h in after))


def fresh(cluster, mlx_hostfile):
    """Factory state: reset the Macs and drop every hostfile a previous run left."""
    cluster.reset()
    for h in cluster.hosts:
        shutil.rmtree(cluster.home(h) / "mlx-cluster", ignore_errors=True)
    shutil.rmtree(cluster.inventory_path.parent / "artifacts", ignore_errors=True)
    mlx_hostfile.unlink(missing_ok=True)


def check_configured(cluster, hostfile, who):
    """Both ends of every cable carry an IPv4 address and the hostfile exists."""
    if not hostfile.is_file():
        raise BenchError(f"{who}: no hostfile at {hostfile}")
    links = {h: cluster.links(h) for h in cluster.hosts}
    for cable in cluster.spec.cables:
        for end in (cable.a, cable.b):
            host, iface = end.host, end.iface
            addrs = [a for a in links[host].get(iface, {}).get("addr_info", []) if a.get("family") == "inet"]
            if not addrs:
                raise BenchError(f"{who}: no IPv4 address on {host}:{iface} (cable {cable.id})")


def run_ours(cluster, work, tag):
    """One `ansible-playbook site.yml --tags network,hostfile`; (seconds, changed, ssh)."""
    base = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=work))
    env = playbook_env(cluster, base, BIN)
    (base / "extravars.json").write_text(json.dumps(existing_vars()))
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(cluster.inventory_path),
        str(ROOT / "site.yml"),
        "--tags",
        ",".join(CONFIGURE_TAGS),
        "-e",
        f"@{base / 'extravars.json'}",
    ]
    before = ssh_counts(cluster)
    t = time.perf_counter()
    res = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False
    )
    seconds = time.perf_counter() - t
    ssh = ssh_delta(before, ssh_counts(cluster))
    close_masters(base / "cp")
    (base / "stdout.txt").write_text(res.stdout + res.stderr)
    recap = RECAP.findall(res.stdout)
    if res.returncode != 0 or not recap or any(int(r[3]) or int(r[4]) for r in recap):
        raise BenchError(
            f"ansible-playbook exited with {res.returncode} (output in {base / 'stdout.txt'}):\n"
            + (res.stdout + res.stderr)[-3000:]
        )
    return seconds, sum(int(r[2]) for r in recap), ssh


def run_adhoc(cluster, work, tag, module, args=""):
    """One `ansible mac_cluster -m MODULE -a ARGS` with fresh SSH connections; its seconds."""
    base = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=work))
    env = playbook_env(cluster, base, BIN)
    argv = [str(BIN / "ansible"), "-i", str(cluster.inventory_path), "mac_cluster", "-m", module]
    argv += ["-a", args] if args else []
    t = time.perf_counter()
    res = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False
    )
    seconds = time.perf_counter() - t
    close_masters(base / "cp")
    if res.returncode != 0:
        raise BenchError(f"ansible -m {module} exited with {res.returncode}:\n" + (res.stdout + res.stderr)[-3000:])
    return seconds


def run_mlx(cluster, hostfile):
    """One `mlx.distributed_config --over thunderbolt --auto-setup`; (seconds, ssh)."""
    argv = [
        str(BIN / "mlx.distributed_config"),
        "--over",
        "thunderbolt",
        "--hosts",
        ",".join(cluster.hosts),
        "--auto-setup",
        "--output-hostfile",
        str(hostfile),
    ]
    before = ssh_counts(cluster)
    t = time.perf_counter()
    res = subprocess.run(
        argv,
        env=cluster.harness_env(),
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    seconds = time.perf_counter() - t
    if res.returncode != 0:
        raise BenchError(f"mlx.distributed_config exited with {res.returncode}:\n{res.stderr[-3000:]}")
    return seconds, ssh_delta(before, ssh_counts(cluster))


def bench_topology(spec, runs, warmup, state_root, log):
    """Samples of one topology: {"first", "rerun", "mlx", "ratio", "rerun_ratio", "ssh_*", "changed_rerun"}."""
    cluster = SimCluster(spec, state_dir=state_root / spec)
    work = state_root / f"{spec}-runs"
    work.mkdir(parents=True, exist_ok=True)
    mlx_hostfile = work / "mlx_hostfile.json"
    ours_hostfile = cluster.inventory_path.parent / "artifacts" / "hostfile.json"
    s = {
        k: []
        for k in (
            "first",
            "rerun",
            "mlx",
            "ratio",
            "rerun_ratio",
            "changed_first",
            "changed_rerun",
            "ssh_first",
            "ssh_rerun",
            "ssh_mlx",
            "target_first",
            "target_rerun",
            "floor_ping",
            "floor_discovery",
        )
    }
    t0 = time.monotonic()
    cluster.up()
    log(f"{spec}: {len(cluster.hosts)} Macs, {len(cluster.spec.cables)} cables, up in {time.monotonic() - t0:.1f} s")
    try:
        for i in range(-warmup, runs):

            def ours(i=i):  # (this iteration's i)
                fresh(cluster, mlx_hostfile)
                first, changed_first, ssh_first = run_ours(cluster, work, f"r{i}-first")
                check_configured(cluster, ours_hostfile, "ours")
                rerun, changed_rerun, ssh_rerun = run_ours(cluster, work, f"r{i}-rerun")
                # the floor, on the same configured cluster
                ping = run_adhoc(cluster, work, f"r{i}-ping", "ansible.builtin.ping")
                discovery = run_adhoc(cluster, work, f"r{i}-discovery", "mlx.cluster.mlx_cluster_facts", DISCOVERY_ARGS)
                return first, changed_first, ssh_first, rerun, changed_rerun, ssh_rerun, ping, discovery

            def mlx():
                fresh(cluster, mlx_hostfile)
                seconds, ssh = run_mlx(cluster, mlx_hostfile)
                check_configured(cluster, mlx_hostfile, "mlx.distributed_config")
                return seconds, ssh

            if i % 2 == 0:
                o, m = ours(), mlx()
            else:
                m, o = mlx(), ours()
            first, changed_first, ssh_first, rerun, changed_rerun, ssh_rerun, ping, discovery = o
            log(
                f"{spec} {'warm-up' if i < 0 else f'run {i + 1}/{runs}'}: ours {first:.2f} s "
                f"(changed={changed_first}), re-run {rerun:.2f} s (changed={changed_rerun}), "
                f"distributed_config {m[0]:.2f} s; floor: ping {ping:.2f} s, discovery {discovery:.2f} s"
            )
            if i < 0:
                continue
            s["first"].append(first)
            s["rerun"].append(rerun)
            s["mlx"].append(m[0])
            s["ratio"].append(first / m[0])
            s["rerun_ratio"].append(rerun / first)
            s["changed_first"].append(changed_first)
            s["changed_rerun"].append(changed_rerun)
            s["ssh_first"].append(ssh_first)
            s["ssh_rerun"].append(ssh_rerun)
            s["ssh_mlx"].append(m[1])
            if spec in TARGETS:
                s["target_first"].append(TARGETS[spec] * m[0])
            s["target_rerun"].append(RERUN_TARGET * first)
            s["floor_ping"].append(ping)
            s["floor_discovery"].append(discovery)
    finally:
        cluster.down()
    return {"topology": spec, "hosts": len(cluster.hosts), "cables": len(cluster.spec.cables), "samples": s}


def summarize(result):
    s = result["samples"]
    out = {
        k: stats(s[k])
        for k in ("first", "rerun", "mlx", "ratio", "rerun_ratio", "target_rerun", "floor_ping", "floor_discovery")
    }
    out["target_first"] = stats(s["target_first"]) if s["target_first"] else None
    for k in ("ssh_first", "ssh_rerun", "ssh_mlx"):
        out[k] = {"connections": max(c for c, _ in s[k]), "commands": max(n for _, n in s[k])}
    out["changed_rerun"] = max(s["changed_rerun"])
    return out


HEADER = (
    "topology",
    "Macs",
    "cables",
    "ours first (s)",
    "ours re-run (s)",
    "distributed_config (s)",
    "ours/dc",
    "re-run/first",
    "target first (s)",
    "target re-run (s)",
    "floor: ansible ping (s)",
    "floor: discovery alone (s)",
    "SSH conn/cmds per Mac: ours first",
    "ours re-run",
    "dc",
)


def table_rows(results):
    rows = []
    for r in results:
        x = summarize(r)
        rows.append(
            (
                r["topology"],
                str(r["hosts"]),
                str(r["cables"]),
                fmt(x["first"]),
                fmt(x["rerun"]),
                fmt(x["mlx"]),
                fmt(x["ratio"]),
                fmt(x["rerun_ratio"]),
                fmt(x["target_first"]) if x["target_first"] else "-",
                fmt(x["target_rerun"]),
                fmt(x["floor_ping"]),
                fmt(x["floor_discovery"]),
                *(f"{x[k]['connections']} / {x[k]['commands']}" for k in ("ssh_first", "ssh_rerun", "ssh_mlx")),
            )
        )
    return rows


def text_table(results, runs):
    rows = table_rows(results)
    widths = [max(len(row[i]) for row in rows + [HEADER]) for i in range(len(HEADER))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    out = [
        f"median (min–max) of {runs} interleaved run(s) per topology; SSH: connections / remote commands",
        line(HEADER),
        "  ".join("-" * w for w in widths),
    ]
    out += [line(row) for row in rows]
    return "\n".join(out)


SECTION = "## Time to a configured cluster"


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_section(results, runs, info, command, old=()):
    """This benchmark's section of docs/benchmarks.md. `old`: the lines of the section there now;
    the rows (and run notes) of topologies this invocation did not measure are kept, so one
    topology per invocation (short holds of the simulated cluster) fills one table."""
    header = "| " + " | ".join(HEADER) + " |"
    rows = {}
    for line in old:
        # a row of an older layout of the table (other columns) is dropped, not kept misaligned
        if (
            line.startswith("| ")
            and line != header
            and _cells(line)[0] not in ("topology", "")
            and len(_cells(line)) == len(HEADER)
        ):
            rows[_cells(line)[0]] = line
    notes = {}
    for line in old:  # "- `<topology>`: date ..." or, annotated by hand, "- `<topology>` (...): date ..."
        if line.startswith("- `") and "`" in line[3:]:
            notes[line[3 : line.index("`", 3)]] = line
    stamp = (
        f"date: {info['date']}, {runs} interleaved run(s), load average (1 min) {info['loadavg_start']} at start, "
        f"{info['loadavg_end']} at end (the benchmark's own simulated Macs count in it)"
    )
    for r, row in zip(results, table_rows(results)):
        rows[r["topology"]] = "| " + " | ".join(row) + " |"
        notes[r["topology"]] = f"- `{r['topology']}`: {stamp}; `{command}`"
    order = [t for t in TOPOLOGIES if t in rows] + sorted(t for t in rows if t not in TOPOLOGIES)
    out = [
        SECTION,
        "",
        "Generated by `bench/configure.py` (re-run it with `--markdown docs/benchmarks.md`: it replaces the",
        "rows of the topologies it measures in this section, and nothing else in the file).",
        "",
        "Ours: `ansible-playbook site.yml --tags network,hostfile` (validate, discover and plan always run;",
        "addresses on every cable, persistent, pinged; hostfile on the controller and on every Mac).",
        "distributed_config: MLX's own `mlx.distributed_config --over thunderbolt --auto-setup",
        "--output-hostfile F`, unmodified. Both on the same simulated cluster (tests/simcluster: network",
        "namespaces, real sshd, macOS command shims), from factory state for every first run, no SSH",
        "master connection left from a previous run. The re-run follows the first run at once and",
        "changes nothing (changed=0). Ratios are taken per round (the two tools run back to back,",
        "order alternating), then min/median/max.",
        "",
        "Targets (issue #15): ours/dc at most "
        + ", ".join(f"{v} on {k}" for k, v in TARGETS.items())
        + f"; re-run/first at most {RERUN_TARGET}.",
        "The target columns give them in seconds (per round: that share of distributed_config's time,",
        "of our first run's). The floor, measured in the same round on the configured cluster with",
        "fresh SSH connections: `ansible -m ansible.builtin.ping` to every Mac, and the discovery",
        "module alone, what a re-run must read:",
        f"`ansible -m mlx.cluster.mlx_cluster_facts -a '{DISCOVERY_ARGS}'`.",
        "A target below the floor cannot be met by any playbook run on this machine.",
        "",
        "Median (min–max) of the interleaved runs per topology. SSH per Mac (max over the Macs):",
        "connections (`Accepted publickey` in its sshd log) / remote commands (`Starting session`).",
        "",
        header,
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    out += [rows[t] for t in order]
    out += ["", "Machine and runs:", "", *machine_lines(info)[:2], *[notes[t] for t in order if t in notes], ""]
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--topologies",
        default=None,
        help=f"comma-separated specs of tests/simcluster/specs (default {','.join(TOPOLOGIES)}; --quick: mesh4)",
    )
    parser.add_argument("--runs", type=int, default=None, help="timed rounds per topology (default 5; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: one round, no warm-up, mesh4 by default")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="JSON (machine, samples, summary): alone, printed instead of the table; "
        "with FILE, written there and the table printed as well",
    )
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the table and the machine into FILE's section "
        + repr(SECTION)
        + " (rows of other topologies and the rest of FILE are kept)",
    )
    parser.add_argument(
        "--state-root",
        metavar="DIR",
        help="where the clusters' state goes (default: a new directory under /tmp, removed at the end)",
    )
    args = parser.parse_args(argv)
    topologies = [t for t in (args.topologies or ("mesh4" if args.quick else ",".join(TOPOLOGIES))).split(",") if t]
    runs = args.runs if args.runs is not None else (1 if args.quick else 5)
    if runs < 1:
        parser.error("--runs must be at least 1")
    warmup = 0 if args.quick else 1

    info = machine()
    results, status = measure(
        lambda root: [bench_topology(spec, runs, warmup, root, log) for spec in topologies],
        info,
        "mlxc-bench-",
        args.state_root,
    )
    if status is not None:
        return status
    if args.markdown:
        command = " ".join(
            ["python bench/configure.py", "--topologies", ",".join(topologies), "--runs", str(runs)]
            + (["--quick"] if args.quick else [])
            + ["--markdown", args.markdown]
        )
        path = Path(args.markdown)
        write_section(path, SECTION, markdown_section(results, runs, info, command, read_section(path, SECTION)))
    emit(
        {"machine": info, "runs": runs, "results": [{**r, "summary": summarize(r)} for r in results]},
        args.json,
        text_table(results, runs),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
