#!/usr/bin/env python3
"""Benchmark: tokens/s of the benchmark through the playbook against the same script by hand.

    .venv/bin/python bench/overhead.py [--runs N] [--quick] [--modes tensor] [--max-tokens N]
                                       [--[no-]control] [--json [FILE]] [--markdown FILE]

On the simulated "pair" cluster (tests/simcluster; needs root), with the tiny model made on
the spot (tests/tinymodel.py, float32; nothing is downloaded):
- converge once: `ansible-playbook site.yml --tags network,hostfile,models,benchmark` (the model
  synced from the controller, the hostfile written to artifacts/hostfile.json, the script
  deployed, and an 8-token benchmark run that fills each Mac's MLX CPU kernel cache: the first
  MLX run on a machine compiles kernels for seconds, and no timed run may pay that alone);
- through the playbook: `ansible-playbook site.yml --tags benchmark` (one mode per run, a fixed
  prompt and --max-tokens); tokens/s read from the JSON the role saved on the controller
  (artifacts/bench/<run id>-<backend>-w<N>-<mode>.json next to the inventory);
- by hand: the script the role deployed (same path on every Mac) started from the controller
  with `mlx.launch --hostfile artifacts/hostfile.json` and exactly the argv the role's
  `mlx_launch` task used (launch_argv() of plugins/module_utils/mlx_launch.py: same launcher,
  interpreter, script, arguments, `--env HF_HUB_OFFLINE=1 --env TRANSFORMERS_OFFLINE=1`; only
  the run id differs), the Macs reached by name through the harness's ssh configuration (as a
  user's own ~/.ssh/config would), from the directory the role's launcher ran in (seen in /proc: the playbook's
  directory;
  mlx.launch's ranks `cd` to the launcher's directory when the Mac has it); tokens/s from the
  JSON line rank 0 prints.

- the control (default on; not with --quick): by hand again, with one process beside
  mlx.launch that sleeps 1 ms in a loop, as ansible-playbook's main process does while a task
  runs (its internal_poll_interval, 0.001 s). It does no work: if it alone makes the
  latency-bound ring ranks faster (a VM whose idle vCPUs halt and wake slowly, shared by the
  controller and both simulated Macs), a playbook faster than by hand is the machine, not the
  playbook.

The argv the role ran is read from the playbook's own output (-v prints the task's `cmd`) and
compared, every round, with the one started by hand (run id masked): a difference stops the
benchmark. The generated tokens' sha256 must be the same in every run both ways (same model,
greedy, same prompt). The ways run back to back, their order reversed every other round,
after one warm-up round (not with --quick) that is not counted.
Ratios are playbook / by hand, taken per round, then min/median/max. Wall times are reported
apart: the playbook's includes Ansible's own work (discovery, env check, deploy, clean-up,
saving the results), which is not tokens/s overhead; "launch" is the time the role's
`mlx_launch` task itself reported for mlx.launch. "Ansible CPU beside mlx.launch" is the CPU
the playbook's own processes used while mlx.launch ran under them (sampled from /proc; the
same sampler runs during the by-hand runs): here the controller and the simulated Macs share
the machine's CPUs, so that is the one way the playbook can take tokens/s from the ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "collections")]  # tests.*, and the toolkit as its collection

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_launch import launch_argv, read_result  # noqa: E402
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_run import PS_ALL, processes_with  # noqa: E402
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
    stats,
)
from tests.e2e.runner import existing_vars  # noqa: E402
from tests.simcluster import SimCluster  # noqa: E402
from tests.tinymodel import make_tiny_model  # noqa: E402

SPEC = "pair"
MODES = ("tensor", "pipeline")
BIN = Path(sys.executable).parent
# the role always passes --prompt-tokens; with a text prompt (PROMPT) the length is unused
PROMPT_TOKENS = 512
# About 210 tokens with the tiny model's tokenizer and chat template, so the prompt phase
# lasts long enough to time (a one-line prompt is processed in a few ms).
PROMPT = " ".join(
    [
        "Write a short story about a cluster of Macs joined by Thunderbolt cables: how each node "
        "takes one rank, how the ring passes the arrays around, and how rank zero prints the "
        "tokens per second."
    ]
    * 2
)
# 512 greedy tokens of the tiny model over the 2 simulated ranks: >= 2.1 s of generation on the
# 2-CPU reference machine at its fastest (~245 tok/s seen), 5-15 s under load: long enough to time.
MAX_TOKENS = 512
# --quick (CI smoke): the same path with few tokens; its tokens/s are not a measurement.
QUICK_TOKENS = 64
MIN_GENERATION_S = 2.0
# Converge once; the benchmark stage's short run deploys the script and warms the Macs.
CONVERGE_TAGS = "network,hostfile,models,benchmark"
WARM_TOKENS = 8
SAMPLE_S = 0.25
# The control: by hand with a process beside mlx.launch that wakes every millisecond, as
# ansible-playbook's main process does while a task runs (its result-queue poll sleeps
# DEFAULT_INTERNAL_POLL_INTERVAL, 0.001 s): does that alone change the ranks' speed here?
SLEEPER = "import time\nwhile True:\n    time.sleep(0.001)\n"
INIT_TIMEOUT = 60
TIMEOUT = 600
ENV = ["HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"]  # the role's, MLX_METAL_FAST_SYNCH off (default)
LAUNCH_TASK = "TASK [mlx.cluster.benchmark : Run the benchmark with mlx.launch (bounded in time)]"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
RUN_ID_CHARS = string.ascii_lowercase + string.digits
DISTS = ("ansible-core", "mlx", "mlx-lm")  # versions in the Machine section


def run_playbook(cluster, work, tag, tags, extravars, verbose=False):
    """One `ansible-playbook site.yml --tags ...`; (seconds, output). Fresh Ansible home and
    SSH control directory per run (no master connection from the previous run)."""
    base = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=work))
    env = playbook_env(cluster, base, BIN)
    (base / "extravars.json").write_text(json.dumps(extravars))
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(cluster.inventory_path),
        str(ROOT / "site.yml"),
        "--tags",
        tags,
        "-e",
        f"@{base / 'extravars.json'}",
    ] + (["-v"] if verbose else [])
    t = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    beside = CpuBeside(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT + 300)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    finally:
        beside.stop()
    seconds = time.perf_counter() - t
    close_masters(base / "cp")
    (base / "stdout.txt").write_text(stdout + stderr)
    recap = RECAP.findall(stdout)
    if proc.returncode != 0 or not recap or any(int(r[3]) or int(r[4]) for r in recap):
        raise BenchError(
            f"ansible-playbook --tags {tags} exited with {proc.returncode} (output in "
            f"{base / 'stdout.txt'}):\n" + (stdout + stderr)[-3000:]
        )
    return seconds, stdout, beside


def proc_table():
    """{pid: (ppid, cpu ticks, argv)} of every process now (from /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (int(f[1]), int(f[11]) + int(f[12]), [a.decode(errors="replace") for a in argv if a])
    return out


def subtree(table, roots):
    kids = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += kids.get(pid, [])
    return seen


class CpuBeside:
    """CPU the playbook's own processes (ansible-playbook, its workers, the mlx_launch module,
    SSH masters it started) use while mlx.launch runs under it, mlx.launch and its ssh sessions
    left out: on this machine the ranks share the CPUs with them. Sampled from /proc every
    SAMPLE_S; result() -> (CPU seconds, seconds mlx.launch was seen running). Also notes the
    directory mlx.launch ran in (launch_cwd): its ranks `cd` there when it exists on the Mac."""

    def __init__(self, root):
        self.root, self.base, self.last, self.active = root, {}, {}, 0.0
        self.launch_cwd = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        prev = None
        while not self.done.wait(SAMPLE_S):
            table = proc_table()
            tree = subtree(table, [self.root])
            launch = [p for p in tree if len(table[p][2]) > 1 and os.path.basename(table[p][2][1]) == "mlx.launch"]
            now = time.monotonic()
            if not launch:
                prev = None
                continue
            if self.launch_cwd is None:
                try:
                    self.launch_cwd = os.readlink(f"/proc/{launch[0]}/cwd")
                except OSError:
                    pass
            first = not self.base
            if prev is not None:
                self.active += now - prev
            prev = now
            for pid in tree - subtree(table, launch):
                ticks = table[pid][1]
                # present at the first sample of the launch: counted from there; born later: all of it
                self.base.setdefault(pid, ticks if first else 0)
                self.last[pid] = ticks

    def stop(self):
        self.done.set()
        self.thread.join()

    def result(self):
        ticks = sum(self.last[p] - self.base[p] for p in self.last)
        return ticks / os.sysconf("SC_CLK_TCK"), self.active


def launch_results(stdout):
    """{mode: result} of the role's mlx_launch task, from `ansible-playbook -v` output (the
    default callback, YAML result format: an indented YAML block after `=> `). The role runs
    the task once per mode (an include per mode): every TASK block of it counts, and the mode
    is the loop item when there is one, else the `--mode` of the command it ran."""
    lines = stdout.splitlines()
    out = {}
    i = 0
    while i < len(lines):
        if not lines[i].startswith(LAUNCH_TASK):
            i += 1
            continue
        i += 1
        while i < len(lines) and not lines[i].startswith(("TASK [", "PLAY [", "RUNNING HANDLER")):
            m = re.match(r"^(ok|changed): \[[^\]]+\](?: => \(item=(.+?)\))? =>\s*$", lines[i])
            i += 1
            if not m:
                continue
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
            result = yaml.safe_load("\n".join(block)) or {}
            cmd = result.get("cmd") or []
            mode = m.group(2) or (cmd[cmd.index("--mode") + 1] if "--mode" in cmd[:-1] else None)
            if mode:
                out[mode] = result
    return out


def mask_run_id(argv):
    argv = list(argv)
    for n, a in enumerate(argv[:-1]):
        if a == "--run-id":
            argv[n + 1] = "<run id>"
    return argv


def bench_args(model_dir, mode, max_tokens, world, run_id):
    """The script's arguments, in the order roles/benchmark/tasks/main.yml gives them."""
    return [
        "--model",
        model_dir,
        "--prompt-tokens",
        str(PROMPT_TOKENS),
        "--generation-tokens",
        str(max_tokens),
        "--num-trials",
        "1",
        "--prompt",
        PROMPT,
        "--mode",
        mode,
        "--expect-world",
        str(world),
        "--init-timeout",
        str(INIT_TIMEOUT),
        "--run-id",
        run_id,
    ]


def run_by_hand(cluster, argv, hosts, run_id, cwd, sleeper=False):
    """mlx.launch from the controller, in its own process group and bounded in time like the
    role's module, from the directory the role's launcher ran in (`cwd`); (seconds, result of
    rank 0). Nothing of the run may stay behind. `sleeper`: the control, a process waking every
    millisecond beside mlx.launch for the whole run."""
    env = cluster.harness_env()
    env["PATH"] = os.pathsep.join([str(cluster.bin_dir), str(BIN), env["PATH"]])
    nap = subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.DEVNULL) if sleeper else None
    t = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    beside = CpuBeside(proc.pid)  # finds nothing beside mlx.launch here; sampling costs the same both ways
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate()
        raise BenchError(f"by hand: mlx.launch timed out after {TIMEOUT} s:\n{err[-3000:]}") from None
    finally:
        beside.stop()
        if nap:
            nap.kill()  # ours, by its Popen
            nap.wait()
    seconds = time.perf_counter() - t
    parsed = read_result(out, err, hosts)
    left = {h: processes_with(cluster.exec(h, ["ps", *PS_ALL]).stdout, run_id) for h in hosts}
    for h, procs in left.items():
        for p in procs:  # ours, found by the run id of this run alone
            cluster.exec(h, ["kill", str(p["pid"])])
    if proc.returncode != 0 or parsed["result"] is None:
        raise BenchError(
            f"by hand: mlx.launch exited with {proc.returncode}, failed ranks {parsed['failed']}:\n"
            + (out + err)[-3000:]
        )
    if any(left.values()):
        raise BenchError(f"by hand: processes of the run were left behind (ended): {left}")
    return seconds, parsed["result"]


def check_result(r, who, mode, max_tokens, world):
    if (r.get("mode"), r.get("world_size"), r.get("generation_tokens"), r.get("backend")) != (
        mode,
        world,
        max_tokens,
        "ring",
    ):
        raise BenchError(
            f"{who}: not the run asked for: mode {r.get('mode')}, world {r.get('world_size')}, "
            f"{r.get('generation_tokens')} tokens, backend {r.get('backend')}"
        )
    if not (r.get("generation_tps", 0) > 0 and r.get("prompt_tps", 0) > 0):
        raise BenchError(f"{who}: no tokens/s in {r}")


def bench(runs, warmup, modes, max_tokens, state_root, log, control=False):
    cluster = SimCluster(SPEC, state_dir=state_root / SPEC)
    work = state_root / "runs"
    work.mkdir(parents=True, exist_ok=True)
    model = make_tiny_model(state_root / "model" / "tiny", dtype="float32")
    artifacts = cluster.inventory_path.parent / "artifacts"
    keep = work / "bench-results"
    keep.mkdir()
    t0 = time.monotonic()
    cluster.up()
    out = {"converge_s": None, "modes": {}}
    try:
        log(f"{SPEC}: {len(cluster.hosts)} Macs up in {time.monotonic() - t0:.1f} s")
        settings = {
            **existing_vars(),
            "mlx_cluster_backend": "ring",
            "model_sync_name": "tiny",
            "model_sync_source": "controller",
            "model_sync_source_path": str(model),
            "benchmark_prompt": PROMPT,
            "benchmark_prompt_tokens": PROMPT_TOKENS,
            "benchmark_generation_tokens": max_tokens,
            "benchmark_trials": 1,
            "benchmark_init_timeout": INIT_TIMEOUT,
            "benchmark_timeout": TIMEOUT,
            # no progress reads: a second SSH session every few seconds beside the
            # launch would be counted in the overhead measured here
            "mlx_cluster_progress_interval": 0,
        }
        # The benchmark stage in the converge deploys the script and, with a short run, fills
        # each Mac's MLX CPU kernel cache (<tmp>/mlx/<version>/cpu: kernels are compiled by the
        # first run on a machine, seconds of C++ compiling): no timed run starts cold.
        seconds, _, beside = run_playbook(
            cluster,
            work,
            "converge",
            CONVERGE_TAGS,
            {**settings, "benchmark_modes": modes, "benchmark_generation_tokens": WARM_TOKENS},
        )
        # The role's launcher runs in the playbook's directory (Ansible's choice for a local
        # module): by hand starts from there too (the ranks `cd` to it when the Mac has it).
        launch_cwd = beside.launch_cwd
        if not launch_cwd:
            raise BenchError("the converge's benchmark run: mlx.launch was not seen running (no directory to copy)")
        for p in (artifacts / "bench").glob("*.json"):
            shutil.move(str(p), keep / p.name)
        out["converge_s"] = seconds
        log(f"converged ({CONVERGE_TAGS}, {WARM_TOKENS}-token benchmark) in {seconds:.1f} s")

        hostfile = artifacts / "hostfile.json"
        hf = json.loads(hostfile.read_text())
        if hf.get("backend") != "ring":  # the role gives no --backend: mlx.launch takes the hostfile's
            raise BenchError(f"the hostfile's backend is {hf.get('backend')!r}, not 'ring'")
        hosts = [h["ssh"] for h in hf["hosts"]]
        remote = json.loads((artifacts / "plan.json").read_text())["remote_dir"]
        script, model_dir = f"{remote}/bench/mlx_cluster_bench.py", f"{remote}/models/tiny"
        world = len(hosts)

        for mode in modes:
            extravars = {**settings, "benchmark_modes": [mode]}
            s = {
                k: []
                for k in (
                    "pb_gen",
                    "hand_gen",
                    "pb_prompt",
                    "hand_prompt",
                    "gen_ratio",
                    "prompt_ratio",
                    "pb_wall",
                    "pb_launch",
                    "pb_ansible",
                    "hand_wall",
                    "pb_gen_s",
                    "hand_gen_s",
                    "beside_cpu",
                    "load1",
                )
                + (("ctl_gen", "ctl_prompt", "ctl_ratio", "ctl_hand_ratio") if control else ())
            }
            hashes = {"playbook": set(), "by_hand": set(), **({"control": set()} if control else {})}
            rounds = []

            def playbook(i, extravars=extravars, mode=mode):  # (this mode's)
                before = set(p.name for p in (artifacts / "bench").glob("*.json"))
                wall, stdout, beside = run_playbook(
                    cluster, work, f"r{i}-playbook", "benchmark", extravars, verbose=True
                )
                new = [p for p in (artifacts / "bench").glob("*.json") if p.name not in before]
                if len(new) != 1:
                    raise BenchError(f"playbook: {len(new)} new result file(s) in {artifacts / 'bench'}, expected 1")
                saved = json.loads(new[0].read_text())
                shutil.move(str(new[0]), keep / new[0].name)  # every run tabulates the same one file
                launched = launch_results(stdout).get(mode)
                if not launched or "cmd" not in launched:
                    raise BenchError("playbook: the mlx_launch task's result (cmd) is not in the -v output")
                if launched.get("result", {}).get("tokens_sha256") != saved.get("tokens_sha256"):
                    raise BenchError("playbook: the saved result is not the one the launch task returned")
                check_result(saved, "playbook", mode, max_tokens, world)
                if beside.launch_cwd != launch_cwd:
                    raise BenchError(f"playbook: mlx.launch ran in {beside.launch_cwd}, not {launch_cwd} as before")
                return wall, launched["elapsed"], launched["cmd"], saved, beside.result()

            def by_hand(i, sleeper=False, mode=mode):
                run_id = "".join(secrets.choice(RUN_ID_CHARS) for _ in range(24))
                argv = launch_argv(
                    str(BIN / "mlx.launch"),
                    str(hostfile),
                    None,
                    existing_vars()["python_env_interpreter"],
                    script,
                    bench_args(model_dir, mode, max_tokens, world, run_id),
                    ENV,
                )
                wall, result = run_by_hand(cluster, argv, hosts, run_id, launch_cwd, sleeper)
                check_result(result, "by hand + sleeper" if sleeper else "by hand", mode, max_tokens, world)
                return wall, argv, result

            ways = {"playbook": playbook, "by hand": by_hand, "control": lambda i: by_hand(i, sleeper=True)}
            names = ["playbook", "by hand"] + (["control"] if control else [])
            for i in range(-warmup, runs):
                load = os.getloadavg()[0]
                order = names if i % 2 == 0 else names[::-1]
                got = {w: ways[w](i) for w in order}
                pb_wall, pb_launch, pb_argv, pr, (beside_cpu, beside_s) = got["playbook"]
                hand_wall, hand_argv, hr = got["by hand"]
                cr = got["control"][2] if control else None
                if mask_run_id(pb_argv) != mask_run_id(hand_argv):
                    raise BenchError(
                        "the argv started by hand is not the role's:\n"
                        f"role:    {mask_run_id(pb_argv)}\nby hand: {mask_run_id(hand_argv)}"
                    )
                ctl = f" / control {cr['generation_tps']:.1f}" if cr else ""
                log(
                    f"{mode} {'warm-up' if i < 0 else f'run {i + 1}/{runs}'} ({', '.join(order)}): generation tok/s "
                    f"playbook {pr['generation_tps']:.1f} / by hand {hr['generation_tps']:.1f}{ctl}, prompt tok/s "
                    f"{pr['prompt_tps']:.1f} / {hr['prompt_tps']:.1f}; wall playbook {pb_wall:.1f} s "
                    f"(launch {pb_launch:.1f} s; Ansible beside it {beside_cpu:.2f} CPU s), by hand {hand_wall:.1f} s; "
                    f"load {load:.1f}"
                )
                if i < 0:
                    continue
                hashes["playbook"].add(pr["tokens_sha256"])
                hashes["by_hand"].add(hr["tokens_sha256"])
                if cr:
                    hashes["control"].add(cr["tokens_sha256"])
                    s["ctl_gen"].append(cr["generation_tps"])
                    s["ctl_prompt"].append(cr["prompt_tps"])
                    s["ctl_ratio"].append(pr["generation_tps"] / cr["generation_tps"])
                    s["ctl_hand_ratio"].append(cr["generation_tps"] / hr["generation_tps"])
                s["pb_gen"].append(pr["generation_tps"])
                s["hand_gen"].append(hr["generation_tps"])
                s["pb_prompt"].append(pr["prompt_tps"])
                s["hand_prompt"].append(hr["prompt_tps"])
                s["gen_ratio"].append(pr["generation_tps"] / hr["generation_tps"])
                s["prompt_ratio"].append(pr["prompt_tps"] / hr["prompt_tps"])
                s["pb_wall"].append(pb_wall)
                s["pb_launch"].append(pb_launch)
                s["pb_ansible"].append(pb_wall - pb_launch)
                s["hand_wall"].append(hand_wall)
                s["beside_cpu"].append(beside_cpu / beside_s * 100 if beside_s else 0.0)
                s["load1"].append(load)
                rounds.append(
                    {
                        "round": i + 1,
                        "order": list(order),
                        "pb_gen": pr["generation_tps"],
                        "hand_gen": hr["generation_tps"],
                        "gen_ratio": pr["generation_tps"] / hr["generation_tps"],
                        "ctl_gen": cr["generation_tps"] if cr else None,
                        "pb_prompt": pr["prompt_tps"],
                        "hand_prompt": hr["prompt_tps"],
                        "load1": load,
                    }
                )
                s["pb_gen_s"].append(pr["generation_tokens"] / pr["generation_tps"])
                s["hand_gen_s"].append(hr["generation_tokens"] / hr["generation_tps"])
            every = set().union(*hashes.values())
            out["modes"][mode] = {
                "samples": s,
                "world_size": world,
                "prompt_tokens": pr["prompt_tokens"],
                "generation_tokens": pr["generation_tokens"],
                "tokens_sha256": {k: sorted(v) for k, v in hashes.items()},
                "tokens_equal": len(every) == 1,
                "argv": mask_run_id(hand_argv),
                "launch_cwd": launch_cwd,
                "rounds": rounds,
            }
    finally:
        cluster.down()
    return out


def summarize(mode_result):
    return {k: stats(v) for k, v in mode_result["samples"].items()}


TPS_HEADER = (
    "mode",
    "gen tok/s playbook",
    "gen tok/s by hand",
    "gen playbook/by hand",
    "prompt tok/s playbook",
    "prompt tok/s by hand",
    "prompt playbook/by hand",
    "tokens sha256 equal",
)
CTL_HEADER = (
    "mode",
    "gen tok/s playbook",
    "gen tok/s by hand",
    "gen tok/s control (by hand + 1 ms sleeper)",
    "control/by hand",
    "playbook/control",
)
WALL_HEADER = (
    "mode",
    "playbook wall (s)",
    "of which mlx.launch (s)",
    "Ansible's own (s)",
    "by hand wall (s)",
    "generation (s) playbook",
    "generation (s) by hand",
    "Ansible CPU beside mlx.launch (% of a CPU)",
)


def table_rows(result):
    tps, wall, ctl = [], [], []
    for mode, r in result["modes"].items():
        x = summarize(r)
        tps.append(
            (
                mode,
                fmt(x["pb_gen"], 1),
                fmt(x["hand_gen"], 1),
                fmt(x["gen_ratio"], 3),
                fmt(x["pb_prompt"], 1),
                fmt(x["hand_prompt"], 1),
                fmt(x["prompt_ratio"], 3),
                "yes" if r["tokens_equal"] else "NO",
            )
        )
        wall.append(
            (
                mode,
                fmt(x["pb_wall"], 1),
                fmt(x["pb_launch"], 1),
                fmt(x["pb_ansible"], 1),
                fmt(x["hand_wall"], 1),
                fmt(x["pb_gen_s"]),
                fmt(x["hand_gen_s"]),
                fmt(x["beside_cpu"], 1),
            )
        )
        if "ctl_gen" in x:
            ctl.append(
                (
                    mode,
                    fmt(x["pb_gen"], 1),
                    fmt(x["hand_gen"], 1),
                    fmt(x["ctl_gen"], 1),
                    fmt(x["ctl_hand_ratio"], 3),
                    fmt(x["ctl_ratio"], 3),
                )
            )
    return tps, wall, ctl


def verdicts(result):
    """The 5 % question in words: within, not within, or not decidable on this machine (the
    rounds' ratios fall on both sides of 5 % around 1)."""
    out = []
    for mode, r in result["modes"].items():
        x = summarize(r)
        gen = x["gen_ratio"]
        lo, med, hi = gen["min"], gen["median"], gen["max"]
        if 0.95 <= lo and hi <= 1.05:
            verdict = "within 5 % in every round"
        elif lo > 1.05 or hi < 0.95:
            verdict = f"NOT within 5 %: every round {'faster' if lo > 1.05 else 'slower'} through the playbook"
        else:
            verdict = (
                f"not decidable here: the rounds' ratios span {lo:.2f}–{hi:.2f} (by hand alone, "
                f"{x['hand_gen']['min']:.0f}–{x['hand_gen']['max']:.0f} tok/s), far wider than ±5 %: "
                "this machine's noise hides a 5 % difference"
            )
        out.append(
            f"{mode}: generation tok/s playbook/by hand, median of the rounds {med:.3f} "
            f"({(med - 1) * 100:+.1f} %); {verdict}"
        )
        out.append(
            f"{mode}: "
            + (
                f"generated tokens identical in every run, every way (sha256 {r['tokens_sha256']['playbook'][0][:12]}…)"
                if r["tokens_equal"]
                else f"generated tokens DIFFERENT: sha256 {r['tokens_sha256']}"
            )
        )
        faster = sum(v > 1 for v in r["samples"]["gen_ratio"])
        out.append(f"{mode}: playbook faster than by hand in {faster} of {len(r['samples']['gen_ratio'])} rounds")
        if "ctl_gen" in x:
            c, pc = x["ctl_hand_ratio"], x["ctl_ratio"]
            out.append(
                f"{mode}: control (by hand + a 1 ms sleeper beside mlx.launch) / by hand: median {c['median']:.3f} "
                f"({c['min']:.2f}–{c['max']:.2f}), faster in {sum(v > 1 for v in r['samples']['ctl_hand_ratio'])} "
                f"of {len(r['samples']['ctl_hand_ratio'])} rounds; playbook / control: median {pc['median']:.3f} "
                f"({pc['min']:.2f}–{pc['max']:.2f})"
            )
        short = min(x["pb_gen_s"]["min"], x["hand_gen_s"]["min"])
        if short < MIN_GENERATION_S:
            out.append(
                f"{mode}: the shortest generation took {short:.2f} s (< {MIN_GENERATION_S:g} s): "
                "raise --max-tokens for steadier tokens/s"
            )
    return out


def notes(info):
    return [
        f"load average (1 min) at start {info['loadavg_start']}, at end {info['loadavg_end']} on "
        f"{info['cpus']} CPU(s) (the benchmark's own simulated Macs and ranks count in it)",
        "the controller (Ansible, mlx.launch) and both simulated Macs share these CPUs: Ansible's own "
        "CPU work during a run competes with the ranks here, not on real Macs (the controller is "
        "another machine)",
    ]


def text_table(result, runs, info):
    out = []
    tps, wall, ctl = table_rows(result)
    for header, rows, title in (
        (TPS_HEADER, tps, "tokens/s"),
        (WALL_HEADER, wall, "wall time"),
        (CTL_HEADER, ctl, "control"),
    ):
        if not rows:
            continue
        widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
        line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731, B023 - used at once, in this iteration
        out += [
            f"{title}: median (min–max) of {runs} interleaved round(s); ratios per round",
            line(header),
            "  ".join("-" * w for w in widths),
        ]
        out += [line(row) for row in rows] + [""]
    out += verdicts(result) + ["notes: " + "; ".join(notes(info))]
    if runs < 3:
        out.append(f"({runs} round(s): a smoke run, not a measurement)")
    return "\n".join(out)


def md_table(header, rows):
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


def markdown(result, runs, info, command, max_tokens, warmup):
    tps, wall, ctl = table_rows(result)
    r0 = next(iter(result["modes"].values()))
    ways = "three" if ctl else "two"
    out = [
        "# Benchmark overhead",
        "",
        "Generated by `bench/overhead.py` (do not edit by hand; re-run it with "
        "`--markdown docs/benchmark_overhead.md`).",
        "",
        "Does the benchmark lose tokens/s by running through the playbook? On the simulated `pair`",
        'cluster (tests/simcluster: two "Macs" as network namespaces with a real sshd, one cable, the',
        "`ring` backend), with the tiny model made on the spot (tests/tinymodel.py, float32), after one",
        f"`ansible-playbook site.yml --tags {CONVERGE_TAGS}` (model synced, script",
        f"deployed, and a short run, {WARM_TOKENS} tokens, that fills each Mac's MLX CPU kernel cache: the first",
        "MLX run on a machine compiles kernels for seconds, which would slow whichever way ran first):",
        "",
        "- **playbook**: `ansible-playbook site.yml --tags benchmark -v` (discovery, env check, deploy and",
        "  check the script, `mlx_launch`, clean-up by run id, results saved and tabulated); tokens/s read",
        "  from the JSON the role saved in `artifacts/bench/`;",
        "- **by hand**: the script the role deployed, started from the controller with `mlx.launch",
        "  --hostfile artifacts/hostfile.json` and the argv the role's task ran (same interpreter, script,",
        "  arguments and `--env HF_HUB_OFFLINE=1 --env TRANSFORMERS_OFFLINE=1`; only the run id differs;",
        "  checked every round against the `cmd` the task reported), PATH starting with the cluster's ssh",
        f"  wrappers, from the directory the role's launcher ran in (`{r0['launch_cwd']}`: `mlx.launch`'s",
        "  ranks `cd` to it when the Mac has it); tokens/s from the JSON line rank 0 prints.",
    ]
    if ctl:
        out += [
            "- **control**: by hand again, with one process beside `mlx.launch` that only sleeps 1 ms in a",
            "  loop, as `ansible-playbook`'s main process does while a task runs (it polls its workers'",
            "  results every `internal_poll_interval`, 0.001 s by default). It does no work; if it alone",
            "  makes the ranks faster, a playbook/by-hand ratio above 1 is this machine's response to a",
            "  process waking beside the ranks (here a VM whose idle vCPUs halt), not the playbook's work.",
        ]
    out += [
        "",
        "The role passes no `--backend`: `mlx.launch` takes `ring` from the hostfile (checked). Every way",
        f"generates exactly {max_tokens} greedy tokens from the same {r0['prompt_tokens']}-token prompt over "
        f"{r0['world_size']} ranks; the",
        f"tokens' sha256 is compared across every run. The {ways} ways run back to back, order reversed",
        f"every other round{', after one warm-up round not counted' if warmup else ''}. Ratios are taken per "
        "round, then min/median/max.",
        "Tokens/s are timed inside the script (prompt: prompt tokens over the time to the first token;",
        "generation: tokens over the time from the first token to the last), so the launch path adds to",
        "them only through what runs beside the ranks. What the ranks get is the same every way: the",
        "argv (checked), the environment (`mlx.launch` passes only its `--env` values and `MLX_*` to the",
        "ranks; the cluster's ssh wrapper uses its own `-F` config, so no `SendEnv` from the controller),",
        "no `MLX_METAL_FAST_SYNCH` (the role's default), the same warm kernel cache on each Mac.",
        "",
        f"Median (min–max) of {runs} interleaved round(s).",
        "",
    ]
    out += md_table(TPS_HEADER, tps)
    out += [
        "",
        "Wall time: the playbook's includes Ansible's own work (not a tokens/s overhead); \"of which",
        "mlx.launch\" is the `elapsed` the role's `mlx_launch` task reported; generation is",
        'tokens / generation tok/s. "Ansible CPU beside mlx.launch" is the CPU the playbook\'s own',
        "processes (ansible-playbook, its workers, the `mlx_launch` module, SSH masters) used while",
        "mlx.launch ran under them, mlx.launch and its ssh sessions left out (sampled from /proc every",
        f"{SAMPLE_S:g} s, the same sampler running during the by-hand runs): on this machine the controller",
        "and both simulated Macs share the CPUs, so this is what the playbook can take from the ranks;",
        "on real Macs the controller is another machine.",
        "",
    ]
    out += md_table(WALL_HEADER, wall)
    if ctl:
        out += ["", "Control (generation tok/s):", ""] + md_table(CTL_HEADER, ctl)
    out += [""] + [f"- {v}" for v in verdicts(result)]
    for mode, r in result["modes"].items():
        header = (
            ["round", "order", "gen tok/s playbook", "gen tok/s by hand"]
            + (["gen tok/s control"] if ctl else [])
            + ["playbook/by hand", "prompt tok/s playbook", "prompt tok/s by hand", "load"]
        )
        rows = [
            [str(x["round"]), ", ".join(x["order"]), f"{x['pb_gen']:.1f}", f"{x['hand_gen']:.1f}"]
            + ([f"{x['ctl_gen']:.1f}"] if ctl else [])
            + [f"{x['gen_ratio']:.3f}", f"{x['pb_prompt']:.1f}", f"{x['hand_prompt']:.1f}", f"{x['load1']:.2f}"]
            for x in r["rounds"]
        ]
        out += ["", f"Every round ({mode}; load: the 1-minute load average when the round began):", ""]
        out += md_table(header, rows)
    out += [
        "",
        "## Machine",
        "",
        *machine_lines(info, DISTS),
        "- the controller (Ansible, mlx.launch) and both simulated Macs share these CPUs: Ansible's own",
        "  CPU work during a run competes with the ranks here, not on real Macs",
        f"- converge (`--tags {CONVERGE_TAGS}`, {WARM_TOKENS}-token benchmark) took {result['converge_s']:.1f} s",
        f"- command: `{command}`",
        "",
    ]
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=None, help="timed rounds per mode (default 5; --quick: 2)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 2 rounds (or --runs), no warm-up round")
    parser.add_argument(
        "--modes", default="tensor", help="comma-separated benchmark modes (tensor, pipeline; default tensor)"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"tokens generated per run, both ways (default {MAX_TOKENS}; --quick: {QUICK_TOKENS})",
    )
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
        help="also write the tables and the machine as Markdown to FILE (docs/benchmark_overhead.md)",
    )
    parser.add_argument(
        "--control",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the control each round: by hand with a process beside mlx.launch that "
        "sleeps 1 ms in a loop, as ansible-playbook's main process does (default on; "
        "--quick: off)",
    )
    parser.add_argument(
        "--state-root",
        metavar="DIR",
        help="where the cluster's state goes (default: a new directory under /tmp, removed at the end)",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: one or more of {', '.join(MODES)}")
    runs = args.runs if args.runs is not None else (2 if args.quick else 5)
    if args.max_tokens is None:
        args.max_tokens = QUICK_TOKENS if args.quick else MAX_TOKENS
    if runs < 1 or args.max_tokens < 1:
        parser.error("--runs and --max-tokens must be at least 1")
    warmup = 0 if args.quick else 1
    control = (not args.quick) if args.control is None else args.control

    info = machine(DISTS)
    result, status = measure(
        lambda root: bench(runs, warmup, modes, args.max_tokens, root, log, control),
        info,
        "mlxc-overhead-",
        args.state_root,
    )
    if status is not None:
        return status
    if args.markdown:
        command = " ".join(
            [
                "python bench/overhead.py",
                "--modes",
                ",".join(modes),
                "--runs",
                str(runs),
                "--max-tokens",
                str(args.max_tokens),
            ]
            + (["--quick"] if args.quick else [])
            + (["--control" if control else "--no-control"] if control == args.quick else [])
            + ["--markdown", args.markdown]
        )
        Path(args.markdown).write_text(markdown(result, runs, info, command, args.max_tokens, warmup))
    emit(
        {
            "machine": info,
            "runs": runs,
            "warmup": warmup,
            "control": control,
            "max_tokens": args.max_tokens,
            "prompt": PROMPT,
            "converge_s": result["converge_s"],
            "results": [{"mode": m, **r, "summary": summarize(r)} for m, r in result["modes"].items()],
        },
        args.json,
        text_table(result, runs, info),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
