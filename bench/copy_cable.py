#!/usr/bin/env python3
"""Benchmark: a model over one cable, the toolkit's own transport (plugins/module_utils/
mlx_copy.py, what model_receive and model_send run) against raw TCP and rsync, on the simulated
Mac cluster `pair` (tests/simcluster; needs root): one cable, an unshaped veth.

    .venv/bin/python bench/copy_cable.py [--size-mb 512] [--rounds 3] [--warmup 1] [--streams 1,2,4]
        [--methods raw,raw_sha256,ours,rsync_daemon,rsync_ssh] [--json [FILE]]
        [--markdown [FILE]] [--state-root DIR]
    .venv/bin/python bench/copy_cable.py --report JSON [--markdown [FILE]]

Run it alone (`flock /tmp/mlxsim-cpu.lock ...` where other simulated clusters may run): both
Macs share this machine's CPUs, and anything else running shows in the numbers.

The pair is configured once by the product (`site.yml --tags network,hostfile`, backend ring);
the copies go from m1 to m2 over the cable's /30 addresses from artifacts/plan.json. A model of
--size-mb made of four files of random bytes (shard-N.bin) is timed, per method:
- raw: the ceiling, raw TCP: a Python receiver on m2 (bound to its cable address) writing each
  file to disk, a sender on m1 using socket.sendfile, one connection per file in turn;
- raw_sha256: the same receiver also hashing what it writes (hashlib.sha256): the ceiling of
  any verified copy;
- ours_sK (K from --streams): mlx_copy's Receiver on m2 and Sender on m1 with K streams, run by
  the Macs' python3 from the module's own source put on each Mac;
- rsync_daemon: GNU rsync's daemon mode on m2 (no ssh), started once before the rounds and
  ended by its PID after them; the client `rsync -rlt --whole-file` on m1 with a password;
- rsync_ssh: rsync over ssh with the toolkit's own options (mlx_rsync.rsync_argv, ssh_command),
  the host key checked against m2's own (StrictHostKeyChecking=yes).
After --warmup untimed copies by every method, in ONE run, the methods rotating their order
from round to round (--rounds); each copy starts
with its destination emptied and the disk cache written back (sync), and ends checked: the
files' sizes, for raw_sha256 their sha256, for ours the receiver's own verification. Reported:
MB/s (MB = 2^20 bytes) median (min-max), ratios of medians to raw and to rsync_ssh, and the
machine's CPU seconds (all cores, /proc/stat user+nice+system+irq+softirq) per GB (2^30 bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]  # tests.*, and the toolkit as its collection

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_copy  # noqa: E402
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_rsync import rsync_argv, ssh_command  # noqa: E402
from bench.common import BenchError, emit, fmt, log, machine, machine_lines, measure, stats  # noqa: E402
from bench.common import write_section as common_write_section  # noqa: E402

SPEC = "pair"
BASE_METHODS = ("raw", "raw_sha256", "ours", "rsync_daemon", "rsync_ssh")
SHARDS = 4
MB, GB = 1 << 20, 1 << 30
DISTS = ("ansible-core",)
SECTION = "## Model copy: one cable (bench/copy_cable.py)"
HEADER = ("method", "MB/s median (min–max)", "x raw", "x rsync over ssh", "CPU s/GB")
# the bars for ours: of raw TCP's speed, and of rsync over ssh's
BAR_RAW, BAR_SSH = 0.8, 3.0
BENCH_DIR = "mlxc-copy-bench"  # under each Mac's home
RSYNCD_PORT, RSYNCD_MODULE, RSYNCD_USER = 8873, "model", "mlx"
TIMEOUT = 900  # seconds, any one copy

# The raw receiver (on m2): its settings on stdin; the port it listens on in the `ready` file;
# one connection per file, in `names` order, each read to its end into the file (and hashed).
RAW_RECEIVER = r"""
import hashlib, json, os, socket, sys
cfg = json.load(sys.stdin)
srv = socket.socket()
srv.bind((cfg["address"], 0))
srv.listen(8)
srv.settimeout(cfg["timeout"])
os.makedirs(cfg["dest"], exist_ok=True)
with open(cfg["ready"] + ".tmp", "w") as fh:
    json.dump({"port": srv.getsockname()[1]}, fh)
os.replace(cfg["ready"] + ".tmp", cfg["ready"])
buf = memoryview(bytearray(4 << 20))
out = {}
for name in cfg["names"]:
    conn, _ = srv.accept()
    conn.settimeout(cfg["timeout"])
    digest = hashlib.sha256() if cfg["hash"] else None
    fd = os.open(os.path.join(cfg["dest"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    size = 0
    while True:
        n = conn.recv_into(buf)
        if not n:
            break
        view = buf[:n]
        while view:
            view = view[os.write(fd, view):]
        if digest:
            digest.update(buf[:n])
        size += n
    os.close(fd)
    conn.close()
    out[name] = {"size": size, "sha256": digest.hexdigest() if digest else None}
print(json.dumps(out))
"""
RAW_SENDER = r"""
import json, os, socket, sys
cfg = json.load(sys.stdin)
for name in cfg["names"]:
    with socket.create_connection((cfg["address"], cfg["port"])) as sock:
        with open(os.path.join(cfg["src"], name), "rb") as fh:
            sock.sendfile(fh)
"""
# mlx_copy from its source on the Mac (cfg["lib"]), as model_receive/model_send run it there.
OURS_RECEIVER = r"""
import json, os, sys
cfg = json.load(sys.stdin)
sys.path.insert(0, cfg["lib"])
import mlx_copy
rx = mlx_copy.Receiver(cfg["dest"], cfg["files"], cfg["token"], [cfg["address"]], stall=60, idle=60)
rx.prepare()
port = rx.bind()
with open(cfg["ready"] + ".tmp", "w") as fh:
    json.dump({"port": port}, fh)
os.replace(cfg["ready"] + ".tmp", cfg["ready"])
print(json.dumps(rx.serve()))
"""
OURS_SENDER = r"""
import json, sys
cfg = json.load(sys.stdin)
sys.path.insert(0, cfg["lib"])
import mlx_copy
out = mlx_copy.Sender(cfg["src"], cfg["files"], cfg["token"], cfg["address"], cfg["port"],
                      streams=cfg["streams"], stall=60).run()
print(json.dumps(out))
"""


# ---- the pure parts: schedule, CPU time, summary, tables ------------------------------------
def method_names(streams, only=BASE_METHODS):
    """The methods measured, in table order: `ours` is one method per --streams value."""
    out = []
    for m in BASE_METHODS:
        if m == "ours":
            out += [f"ours_s{k}" for k in streams if "ours" in only or f"ours_s{k}" in only]
        elif m in only:
            out.append(m)
    return out


def schedule(methods, rounds):
    """[(round, method)] in the order measured: each round every method, the order rotating by
    one from round to round (a load that comes and goes hits every method alike)."""
    out = []
    for r in range(rounds):
        k = r % len(methods) if methods else 0
        out += [(r, m) for m in methods[k:] + methods[:k]]
    return out


def busy_ticks(stat_text):
    """The machine's busy clock ticks (all CPUs) from /proc/stat's first line: user + nice +
    system + irq + softirq (guest time is inside user; idle, iowait and steal are not busy)."""
    fields = stat_text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat's cpu line: {fields[:1]}")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return user + nice + system + irq + softirq


def cpu_seconds(before, after, hz):
    """CPU seconds between two busy_ticks readings, at `hz` ticks a second (USER_HZ)."""
    return (after - before) / hz


def summarize(samples, total_bytes):
    """samples {method: [{"seconds", "cpu_seconds"}]} -> {method: {mb_s, cpu_s_per_gb, seconds
    (min/median/max each), runs, x_raw, x_rsync_ssh}}: the ratios are of median speeds."""
    out = {}
    for m, runs in samples.items():
        if not runs:
            continue
        out[m] = {
            "mb_s": stats([total_bytes / MB / r["seconds"] for r in runs]),
            "cpu_s_per_gb": stats([r["cpu_seconds"] / (total_bytes / GB) for r in runs]),
            "seconds": stats([r["seconds"] for r in runs]),
            "runs": len(runs),
        }
    for x in out.values():
        for key, anchor in (("x_raw", "raw"), ("x_rsync_ssh", "rsync_ssh")):
            if anchor in out:
                x[key] = x["mb_s"]["median"] / out[anchor]["mb_s"]["median"]
    return out


def table_rows(summary, methods):
    rows = []
    for m in methods:
        x = summary.get(m)
        if x is None:
            continue
        ratio = lambda key: f"{x[key]:.2f}x" if key in x else "-"  # noqa: E731, B023 - used at once, in this iteration
        rows.append((m, fmt(x["mb_s"], 0), ratio("x_raw"), ratio("x_rsync_ssh"), f"{x['cpu_s_per_gb']['median']:.2f}"))
    return rows


def text_table(summary, methods):
    rows = table_rows(summary, methods)
    widths = [max(len(row[i]) for row in rows + [HEADER]) for i in range(len(HEADER))]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([line(HEADER), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def verdict(summary):
    """The lines that say what the numbers mean: the bars, hashing's cost, the shared CPUs."""
    out = []
    ours = [m for m in summary if m.startswith("ours_s")]
    if ours:
        best = max(ours, key=lambda m: summary[m]["mb_s"]["median"])
        x = summary[best]
        parts = [f"ours at its best ({best}) copies at {x['mb_s']['median']:.0f} MB/s"]
        if "x_raw" in x:
            parts.append(
                f"{x['x_raw']:.2f}x raw ({'meets' if x['x_raw'] >= BAR_RAW else 'misses'} the issue's "
                f"bar of {BAR_RAW}x)"
            )
        if "x_rsync_ssh" in x:
            meets = "meets" if x["x_rsync_ssh"] >= BAR_SSH else "misses"
            parts.append(f"{x['x_rsync_ssh']:.2f}x rsync over ssh ({meets} the bar of {BAR_SSH:.0f}x)")
        out.append("- " + ", ".join(parts) + ".")
        if "raw_sha256" in summary:
            floor = summary["raw_sha256"]
            vs = x["mb_s"]["median"] / floor["mb_s"]["median"]
            out.append(
                f"- raw does not hash; raw_sha256 (hashing as it writes, {floor['mb_s']['median']:.0f} MB/s"
                + (f", {floor['x_raw']:.2f}x raw" if "x_raw" in floor else "")
                + ") is the floor of any verified copy's time over one connection: ours at its best copies "
                f"at {vs:.2f}x its speed"
                + (" (more: several streams hash on both CPUs at once, raw_sha256 on one)." if vs > 1 else ".")
            )
    out.append(
        "- On this 2-core machine both Macs, sender and receiver, share the same CPUs and the veth "
        "costs no wire time: a method's speed is set by its CPU per byte, so the ratios are ratios of "
        "CPU per byte (the CPU s/GB column, the whole machine's). On real Macs each end has its "
        "own cores and the cable's own limit comes in."
    )
    return out


def markdown_section(doc, command):
    """This benchmark's section of docs/benchmarks.md, from the JSON document main() makes."""
    summary, methods, setting = doc["summary"], doc["methods"], doc["setting"]
    rows = table_rows(summary, methods)
    times = "once" if setting["rounds"] == 1 else f"{setting['rounds']} times"
    warm = setting.get("warmup", 0)
    times += f" after {'one untimed copy' if warm == 1 else f'{warm} untimed copies'} by each" if warm else ""
    lead = (
        f"Generated by `bench/copy_cable.py` (it rewrites this section only). A model of {setting['size_mb']} MB "
        f"({SHARDS} files of random bytes) from m1 to m2 of the simulated `pair` over its one cable (a veth, "
        f"not shaped), by the cable's /30 addresses; every method {times} in one interleaved run (the order "
        "rotating each round). MB/s (MB = 2^20 bytes) median (min–max), the ratios of median speeds, and "
        "the whole machine's CPU seconds (/proc/stat) per GB (2^30 bytes) copied, median."
    )
    out = [
        SECTION,
        "",
        *textwrap.wrap(lead, 100),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += [""] + [w for line in verdict(summary) for w in textwrap.wrap(line, 100, subsequent_indent="  ")]
    out += [
        "",
        "The methods:",
        "",
        "- raw: the ceiling, raw TCP: a Python receiver on m2 bound to its cable address, writing each",
        "  file to disk; a sender on m1 with `socket.sendfile`, one connection per file in turn.",
        "- raw_sha256: the same receiver hashing what it writes (`hashlib.sha256`).",
        "- ours_sK: the toolkit's own transport (`plugins/module_utils/mlx_copy.py`, what model_receive",
        "  and model_send run): its Receiver on m2, its Sender on m1 with K streams, on the Macs' python3.",
        "- rsync_daemon: rsync's daemon mode, no ssh: GNU rsync `--daemon` on m2 (a module with a user",
        "  and secret, `hosts allow` m1's cable address), `rsync -rlt --whole-file src/ rsync://...` on m1.",
        "  The simulated Macs' rsync is GNU rsync under an openrsync shim (tests/simcluster/shims/",
        "  openrsync.py: openrsync's options, protocol 29). macOS's openrsync has a daemon mode too",
        "  (Apple's source, apple-oss-distributions/rsync, `openrsync/daemon.c` at tags rsync-146 =",
        "  macOS 15.4 and rsync-170); its speed stays unmeasured. The client here is the Mac's `rsync`",
        "  (the shim: GNU rsync at protocol 29), the daemon GNU rsync itself.",
        "- rsync_ssh: rsync over ssh with the toolkit's own options (`mlx_rsync.rsync_argv`,",
        "  `ssh_command`), m2's host key checked (`StrictHostKeyChecking=yes`).",
        "",
        "Every destination is emptied (and the disk cache written back) before each copy and checked",
        "after it: the files' sizes, for raw_sha256 their sha256, for ours the receiver's verification.",
        "",
        *machine_lines(doc["machine"], DISTS),
        f"- on the Macs: {doc['cable']['python']}; {doc['cable']['rsync']}; {doc['cable']['ssh']}",
        *([mlx_copy_line(doc["cable"]["mlx_copy"])] if "mlx_copy" in doc["cable"] else []),
        f"- this section: `{command}`",
        "",
    ]
    return "\n".join(out)


def mlx_copy_line(v):
    state = "with changes not committed yet" if v["modified"] else "as committed"
    return f"- mlx_copy.py measured: at {v['commit']}, {state} (sha256 of the source {v['sha256']}...)"


def write_section(path, section):
    common_write_section(path, SECTION, section)


# ---- on the simulated pair -----------------------------------------------------------------
class OnMac(threading.Thread):
    """`cluster.exec` in a thread of its own: a process on a Mac that runs while the harness
    does something else (a receiver, the rsync daemon)."""

    def __init__(self, cluster, host, argv, input=None, timeout=TIMEOUT):
        super().__init__(daemon=True)
        self.cluster, self.host, self.argv, self.input, self.timeout = cluster, host, argv, input, timeout
        self.result, self.error = None, None
        self.start()

    def run(self):
        try:
            self.result = self.cluster.exec(self.host, self.argv, input=self.input, timeout=self.timeout)
        except (subprocess.SubprocessError, OSError) as exc:
            self.error = exc

    def stdout(self, who, wait=TIMEOUT):
        """Its stdout once it has ended well, else BenchError naming `who`."""
        self.join(wait)
        if self.is_alive():
            raise BenchError(f"{who}: still running after {wait} s")
        if self.error is not None:
            raise BenchError(f"{who}: {self.error}")
        if self.result.returncode != 0:
            raise BenchError(f"{who} exited {self.result.returncode}: {self.result.stderr.strip()[-2000:]}")
        return self.result.stdout


class Span:
    """Wall-clock seconds and the machine's CPU seconds of what runs inside `with Span() as s`."""

    HZ = os.sysconf("SC_CLK_TCK")

    def __enter__(self):
        self.ticks, self.t = busy_ticks(Path("/proc/stat").read_text()), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t
        self.cpu_seconds = cpu_seconds(self.ticks, busy_ticks(Path("/proc/stat").read_text()), self.HZ)
        return False


def mac_exec(cluster, host, argv, who, input=None, env=None):
    res = cluster.exec(host, argv, input=input, env=env, timeout=TIMEOUT)
    if res.returncode != 0:
        raise BenchError(f"{who} exited {res.returncode}: {res.stderr.strip()[-2000:]}")
    return res.stdout


def source_version(source):
    """Which mlx_copy.py was measured: the checkout's commit, whether the file differed from it,
    the sha256 of the source sent to the Macs."""
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)  # noqa: E731
    head = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
    changed = git("diff", "--quiet", "HEAD", "--", "plugins/module_utils/mlx_copy.py").returncode != 0
    return {"commit": head, "modified": changed, "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]}


class Pair:
    """The configured pair and what every method needs on its two Macs (under BENCH_DIR in
    each Mac's home: on m1 the model, mlx_copy's source, an ssh key and known_hosts; on m2 the
    destinations, mlx_copy's source and the rsync daemon's files)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.src_host, self.dst_host = cluster.hosts[0], cluster.hosts[1]
        self.token = secrets.token_hex(16)
        self.password = secrets.token_hex(16)
        self.daemon = None
        self.files, self.names = {}, []

    def disk(self, host, *parts):
        """A path under BENCH_DIR on the Mac, as this machine sees it."""
        return self.cluster.home(host).joinpath(BENCH_DIR, *parts)

    def mac(self, host, *parts):
        """The same path as the Mac sees it."""
        return "/".join([self.cluster.session_home(host), BENCH_DIR, *parts])

    def setup(self, size_mb):
        """Configure the network with the product, read the cable's addresses, lay the files."""
        from tests.e2e.runner import run_site

        run = run_site(self.cluster, tags=["network", "hostfile"], extravars={"mlx_cluster_backend": "ring"})
        if run.rc != 0:
            raise BenchError(f"the network stage failed: {run.failures()}")
        plan = json.loads((self.cluster.inventory_path.parent / "artifacts" / "plan.json").read_text())
        end = next((e for e in plan["ip_plan"]["hosts"][self.src_host] if e["peer_host"] == self.dst_host), None)
        if end is None:
            raise BenchError(f"plan.json has no cable from {self.src_host} to {self.dst_host}")
        self.src_addr, self.dst_addr, self.cable = end["address"], end["peer_address"], end["cable"]
        source = mlx_copy.own_source()
        for host in (self.src_host, self.dst_host):
            shutil.rmtree(self.disk(host), ignore_errors=True)
            self.disk(host, "lib").mkdir(parents=True)
            self.disk(host, "lib", "mlx_copy.py").write_text(source)
        self.disk(self.dst_host, "dst").mkdir()
        self.disk(self.dst_host, "run").mkdir()
        self.make_model(size_mb)
        self.ssh_trust()
        return {
            "cable": self.cable,
            "m1": self.src_addr,
            "m2": self.dst_addr,
            "iface": end["iface"],
            "mlx_copy": source_version(source),
            "python": mac_exec(self.cluster, self.src_host, ["python3", "--version"], "python3").strip(),
            "rsync": " ".join(
                mac_exec(self.cluster, self.dst_host, ["/usr/bin/rsync", "--version"], "rsync").splitlines()[0].split()
            ),
            "ssh": self.cluster.exec(self.src_host, ["ssh", "-V"]).stderr.strip(),
        }

    def make_model(self, size_mb):
        """SHARDS files of random bytes on m1, size_mb MB in all; their sizes, sha256 and times."""
        src = self.disk(self.src_host, "src")
        src.mkdir()
        per = size_mb * MB // SHARDS
        for k in range(1, SHARDS + 1):
            name, digest, left = f"shard-{k}.bin", hashlib.sha256(), per
            with open(src / name, "wb") as fh:
                while left:
                    chunk = os.urandom(min(left, 4 * MB))
                    fh.write(chunk)
                    digest.update(chunk)
                    left -= len(chunk)
            self.files[name] = {"size": per, "sha256": digest.hexdigest(), "mtime": int((src / name).stat().st_mtime)}
        self.names = sorted(self.files)

    def ssh_trust(self):
        """For rsync_ssh: a key m2 accepts and m2's host key, by its cable address, on m1.
        The key is the harness's own (cluster.key_path, in every Mac's authorized_keys), copied
        to m1 with mode 600: acceptable for a benchmark, not what the product does (ssh_trust
        makes a cluster key of its own)."""
        ssh_dir = self.disk(self.src_host, "ssh")
        ssh_dir.mkdir(mode=0o700)
        shutil.copyfile(self.cluster.key_path, ssh_dir / "id_ed25519")
        os.chmod(ssh_dir / "id_ed25519", 0o600)
        # m2's host key as m2 has it (macOS keeps it in /etc/ssh; the simulated Mac too)
        key = mac_exec(
            self.cluster, self.dst_host, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], "m2's host key"
        ).split()
        (ssh_dir / "known_hosts").write_text(f"{self.dst_addr} {key[0]} {key[1]}\n")

    # -- each copy
    def copy(self, method):
        """One timed copy by `method` into its emptied destination, checked; its Span."""
        dest = self.disk(self.dst_host, "dst", method)
        shutil.rmtree(dest, ignore_errors=True)
        if method == "rsync_daemon":
            dest.mkdir()  # the daemon's module path
        os.sync()  # the last copy's dirty pages written back now, not during this one
        if method.startswith("raw"):
            span = self.raw(method)
        elif method.startswith("ours_s"):
            span = self.ours(method, int(method[len("ours_s") :]))
        elif method == "rsync_daemon":
            span = self.rsync_daemon(method)
        else:
            span = self.rsync_ssh(method)
        got = (
            sorted((p.name, p.stat().st_size) for p in dest.iterdir() if not p.name.startswith(mlx_copy.OWN_PREFIX))
            if dest.is_dir()
            else []
        )
        want = sorted((n, f["size"]) for n, f in self.files.items())
        if got != want:
            raise BenchError(f"{method}: {self.dst_host} has {got}, expected {want}")
        return span

    def wait_ready(self, rx, path, who):
        """The receiver's `ready` file ({"port"}) once it is written."""
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if path.exists():
                return json.loads(path.read_text())
            if not rx.is_alive():
                rx.stdout(who)
                raise BenchError(f"{who} ended before it listened")
            time.sleep(0.02)
        raise BenchError(f"{who}: not listening after 60 s")

    def start_receiver(self, method, script, cfg):
        ready = self.disk(self.dst_host, "run", f"{method}.ready")
        ready.unlink(missing_ok=True)
        cfg = dict(
            cfg,
            address=self.dst_addr,
            dest=self.mac(self.dst_host, "dst", method),
            ready=self.mac(self.dst_host, "run", f"{method}.ready"),
        )
        rx = OnMac(self.cluster, self.dst_host, ["python3", "-c", script], input=json.dumps(cfg))
        return rx, self.wait_ready(rx, ready, f"{method} receiver")["port"]

    def raw(self, method):
        hashing = method == "raw_sha256"
        rx, port = self.start_receiver(method, RAW_RECEIVER, {"names": self.names, "hash": hashing, "timeout": 120})
        cfg = {"names": self.names, "address": self.dst_addr, "port": port, "src": self.mac(self.src_host, "src")}
        with Span() as span:
            mac_exec(
                self.cluster, self.src_host, ["python3", "-c", RAW_SENDER], f"{method} sender", input=json.dumps(cfg)
            )
            out = json.loads(rx.stdout(f"{method} receiver"))
        for name, want in self.files.items():
            if out[name]["size"] != want["size"] or (hashing and out[name]["sha256"] != want["sha256"]):
                raise BenchError(f"{method}: {name} arrived as {out[name]}, sent {want}")
        return span

    def ours(self, method, streams):
        lib = {"files": self.files, "token": self.token}
        rx, port = self.start_receiver(method, OURS_RECEIVER, dict(lib, lib=self.mac(self.dst_host, "lib")))
        cfg = dict(
            lib,
            lib=self.mac(self.src_host, "lib"),
            src=self.mac(self.src_host, "src"),
            address=self.dst_addr,
            port=port,
            streams=streams,
        )
        with Span() as span:
            sent = json.loads(
                mac_exec(
                    self.cluster,
                    self.src_host,
                    ["python3", "-c", OURS_SENDER],
                    f"{method} sender",
                    input=json.dumps(cfg),
                )
            )
            got = json.loads(rx.stdout(f"{method} receiver"))
        if sent["errors"] or got["problems"] or got["missing"] or got["strangers"] or got["copied"] != self.names:
            raise BenchError(
                f"{method}: sender {sent['errors']}, receiver problems {got['problems']}, "
                f"missing {got['missing']}, strangers {got['strangers']}, copied {got['copied']}"
            )
        return span

    def rsync_daemon(self, method):
        url = f"rsync://{RSYNCD_USER}@{self.dst_addr}:{RSYNCD_PORT}/{RSYNCD_MODULE}/"
        argv = ["rsync", "-rlt", "--whole-file", self.mac(self.src_host, "src") + "/", url]
        with Span() as span:
            mac_exec(self.cluster, self.src_host, argv, method, env={"RSYNC_PASSWORD": self.password})
        return span

    def rsync_ssh(self, method):
        ssh = self.mac(self.src_host, "ssh")
        rsh = ssh_command(
            "ssh",
            [
                "-i",
                f"{ssh}/id_ed25519",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                f"UserKnownHostsFile={ssh}/known_hosts",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-l",
                self.cluster.user,
            ],
        )
        argv = rsync_argv(
            "rsync",
            self.mac(self.src_host, "src"),
            f"{self.dst_addr}:{self.mac(self.dst_host, 'dst', method)}",
            ssh_command=rsh,
        )
        with Span() as span:
            mac_exec(self.cluster, self.src_host, argv, method)
        return span

    # -- the rsync daemon, once for every round
    def start_daemon(self):
        """GNU rsync's daemon on m2, on its cable address only, for m1's address only."""
        d = self.disk(self.dst_host, "rsyncd")
        d.mkdir()
        secrets_file = d / "secrets"
        secrets_file.write_text(f"{RSYNCD_USER}:{self.password}\n")
        os.chmod(secrets_file, 0o600)
        m = lambda name: self.mac(self.dst_host, "rsyncd", name)  # noqa: E731
        # uid/gid 0: the Mac's admin user is uid 0 on this machine (a root daemon would be nobody)
        (d / "rsyncd.conf").write_text(
            f"pid file = {m('rsyncd.pid')}\nlog file = {m('rsyncd.log')}\nuse chroot = false\nuid = 0\ngid = 0\n"
            f"[{RSYNCD_MODULE}]\npath = {self.mac(self.dst_host, 'dst', 'rsync_daemon')}\nread only = false\n"
            f"auth users = {RSYNCD_USER}\nsecrets file = {m('secrets')}\nhosts allow = {self.src_addr}\n"
        )
        self.daemon = OnMac(
            self.cluster,
            self.dst_host,
            [
                "/usr/bin/rsync",
                "--daemon",
                "--no-detach",
                "--address",
                self.dst_addr,
                "--port",
                str(RSYNCD_PORT),
                "--config",
                m("rsyncd.conf"),
            ],
            timeout=24 * 3600,
        )
        # listening: its pid file is written just before it binds, so ask from m1 until it answers
        probe = (
            "import socket, sys, time\nfor _ in range(200):\n    try:\n"
            "        socket.create_connection((sys.argv[1], int(sys.argv[2])), 1).close(); sys.exit(0)\n"
            "    except OSError:\n        time.sleep(0.05)\nsys.exit(1)\n"
        )
        res = self.cluster.exec(self.src_host, ["python3", "-c", probe, self.dst_addr, str(RSYNCD_PORT)], timeout=30)
        if res.returncode != 0 or not self.daemon.is_alive():
            raise BenchError(
                f"the rsync daemon does not answer on {self.dst_addr}:{RSYNCD_PORT}: "
                f"{(d / 'rsyncd.log').read_text() if (d / 'rsyncd.log').exists() else ''}"
            )

    def stop_daemon(self):
        """End the daemon by its PID (from its pid file), and wait for it."""
        if self.daemon is None:
            return
        pid_file = self.disk(self.dst_host, "rsyncd", "rsyncd.pid")
        if pid_file.exists() and self.daemon.is_alive():
            self.cluster.exec(self.dst_host, ["kill", pid_file.read_text().strip()])
        self.daemon.join(10)
        self.daemon = None


def run_pair(state_root, args, methods):
    """The pair up and configured, every copy of the schedule; (samples, cable info)."""
    from tests.simcluster import SimCluster

    cluster = SimCluster(SPEC, state_dir=state_root / SPEC)
    t0 = time.monotonic()
    cluster.up()
    pair = Pair(cluster)
    try:
        cable = pair.setup(args.size_mb)
        if "rsync_daemon" in methods:
            pair.start_daemon()
        log(
            f"{SPEC}: up and configured in {time.monotonic() - t0:.1f} s; cable {cable['cable']} "
            f"{cable['m1']} -> {cable['m2']}; {len(methods)} methods x {args.rounds} rounds"
        )
        # untimed: the first use of each method (bytecode compiled on the Macs, programs and
        # keys read from disk, the first ssh connection) is not what the rounds compare
        for method in methods * args.warmup:
            pair.copy(method)
        samples = {m: [] for m in methods}
        for r, method in schedule(methods, args.rounds):
            span = pair.copy(method)
            samples[method].append({"round": r, "seconds": span.seconds, "cpu_seconds": span.cpu_seconds})
            log(
                f"round {r + 1}/{args.rounds}: {method} {span.seconds:.2f} s, "
                f"{args.size_mb / span.seconds:.0f} MB/s, CPU {span.cpu_seconds:.2f} s"
            )
    finally:
        pair.stop_daemon()
        cluster.down()
    return samples, cable


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=512, help="model size, MB (2^20 bytes), in 4 files")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed copies of every method first (default 1)")
    parser.add_argument("--streams", default="1,2,4", help="ours: the stream counts, comma-separated (default 1,2,4)")
    parser.add_argument(
        "--methods",
        default=",".join(BASE_METHODS),
        help=f"comma-separated, of {','.join(BASE_METHODS)} (ours: every --streams; or ours_sK)",
    )
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE")
    parser.add_argument(
        "--markdown",
        nargs="?",
        const=str(ROOT / "docs" / "benchmarks.md"),
        metavar="FILE",
        help="replace (or add) this benchmark's section of FILE (default docs/benchmarks.md)",
    )
    parser.add_argument("--state-root", metavar="DIR")
    parser.add_argument(
        "--report", metavar="JSON", help="measure nothing: the table (and --markdown) from a --json file"
    )
    args = parser.parse_args(argv)
    if args.report:
        doc = json.loads(Path(args.report).read_text())
        if args.markdown:
            write_section(Path(args.markdown), markdown_section(doc, doc["command"]))
        print(text_table(doc["summary"], doc["methods"]))
        return 0
    try:
        streams = [int(k) for k in args.streams.split(",") if k]
    except ValueError:
        parser.error("--streams: comma-separated whole numbers")
    only = [m for m in args.methods.split(",") if m]
    methods = method_names(streams, only)
    unknown = set(only) - set(BASE_METHODS) - set(methods)
    if unknown or not methods:
        parser.error(f"--methods: unknown {sorted(unknown)}" if unknown else "--methods: none")
    if args.rounds < 1 or args.warmup < 0 or args.size_mb < SHARDS or any(k < 1 for k in streams):
        parser.error(f"--rounds and --streams at least 1, --warmup at least 0, --size-mb at least {SHARDS}")
    info = machine(DISTS)
    outcome, status = measure(lambda root: run_pair(root, args, methods), info, "mlxc-bench-cable-", args.state_root)
    if status is not None:
        return status
    samples, cable = outcome
    total = args.size_mb * MB // SHARDS * SHARDS
    command = shlex.join(["python", "bench/copy_cable.py", *argv])
    doc = {
        "setting": {
            "size_mb": args.size_mb,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "streams": streams,
            "spec": SPEC,
        },
        "machine": info,
        "command": command,
        "cable": cable,
        "methods": methods,
        "samples": samples,
        "summary": summarize(samples, total),
    }
    if args.markdown:
        write_section(Path(args.markdown), markdown_section(doc, command))
    emit(doc, args.json, text_table(doc["summary"], methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
