"""The benchmark and the network check, run for real on this machine: one rank, then two local
ranks over the ring backend (mlx.launch), on the tiny qwen2 model from tests/tinymodel.py.

The two-rank generations must give the very tokens of the one-process run, in tensor and in
pipeline mode; init must refuse a silent 1-rank fallback and give up on a missing peer, naming
rank and host. Every distributed run has a timeout and is started in its own session, so a
hung rank is killed with its launcher and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.programs import load_program
from tests.tinymodel import make_tiny_model

# (real MLX ranks (mlx.launch) per test: the full suite runs it, the quick tier does not)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "roles" / "benchmark" / "files" / "mlx_cluster_bench.py"
NETCHECK = ROOT / "roles" / "net_check" / "files" / "mlx_cluster_netcheck.py"
PROMPT = "Write a story about a fast computer"
MAX_TOKENS = 32
JSON_KEYS = {
    "backend",
    "world_size",
    "mode",
    "model",
    "prompt_tokens",
    "generation_tokens",
    "prompt_source",
    "warmup",
    "num_trials",
    "prompt_tps",
    "generation_tps",
    "trials",
    "stats",
    "peak_memory_gb",
    "fast_synch",
    "versions",
    "tokens_sha256",
    "tokens",
    "hostname",
}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
for _var in (
    "MLX_RANK",
    "MLX_HOSTFILE",
    "MLX_IBV_DEVICES",
    "MLX_JACCL_COORDINATOR",
    "MLX_WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
):
    ENV.pop(_var, None)


def _mlx_launch():
    beside = Path(sys.executable).parent / "mlx.launch"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mlx.launch")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"]


def _free_port_pair():
    """A port p with p and p + 1 free (the ring listens on one port per rank)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise RuntimeError("no two consecutive free ports")


def _run(argv, timeout=180, env=None):
    """Run argv in its own session; on timeout kill that session and fail."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or ENV,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv} did not finish in {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _launch2(script, *args):
    """`script args` on two local ranks over the ring backend."""
    argv = [
        *_mlx_launch(),
        "--backend",
        "ring",
        "--hosts",
        "127.0.0.1,127.0.0.1",
        "--starting-port",
        str(_free_port_pair()),
        "--",
        sys.executable,
        str(script),
        *args,
    ]
    return _run(argv)


def _one_json_line(result):
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got {result.stdout!r}"
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2-fp32", dtype="float32")


@pytest.fixture(scope="module")
def single_run(tiny_model):
    result = _run(
        [
            sys.executable,
            str(BENCH),
            "--model",
            str(tiny_model),
            "--prompt",
            PROMPT,
            "--max-tokens",
            str(MAX_TOKENS),
            "--expect-world",
            "1",
            "--num-trials",
            "2",
        ]
    )
    return _one_json_line(result)


# --- the tiny model ---


def test_tiny_model_is_deterministic_and_sharded(tmp_path):
    def digest(path):
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in path.iterdir()}

    a = make_tiny_model(tmp_path / "a", seed=3)
    b = make_tiny_model(tmp_path / "b", seed=3)
    c = make_tiny_model(tmp_path / "c", seed=4)
    assert digest(a) == digest(b)
    assert digest(a) != digest(c)

    cfg = json.loads((a / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["tie_word_embeddings"] is False
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        assert cfg[key] % 2 == 0, key
    assert cfg["num_hidden_layers"] >= 2

    weight_map = json.loads((a / "model.safetensors.index.json").read_text())["weight_map"]
    shards = sorted(a.glob("model-*.safetensors"))
    assert len(shards) >= 2 and sorted(set(weight_map.values())) == [s.name for s in shards]
    assert "lm_head.weight" in weight_map
    import mlx.core as mx

    stored = {k: f.name for f in shards for k in mx.load(str(f))}
    assert stored == weight_map


def test_tiny_model_float16_loads_and_chats(tmp_path):
    from mlx_lm import load

    model, tokenizer = load(str(make_tiny_model(tmp_path / "fp16", dtype="float16")))
    assert model.lm_head.weight.dtype.size == 2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token_ids == {tokenizer.convert_tokens_to_ids("<|im_end|>")}


def test_tiny_model_cli(tmp_path):
    result = _run([sys.executable, str(ROOT / "tests" / "tinymodel.py"), str(tmp_path / "m"), "--dtype", "float16"])
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "m" / "config.json").read_text())["torch_dtype"] == "float16"


# --- the benchmark ---


def test_single_process_generates_a_fixed_number_of_tokens(single_run, tiny_model):
    assert set(single_run) == JSON_KEYS
    assert single_run["world_size"] == 1 and single_run["backend"] == "none"
    assert single_run["model"] == str(tiny_model)
    assert single_run["generation_tokens"] == len(single_run["tokens"]) == MAX_TOKENS
    assert single_run["prompt_tokens"] > len(PROMPT.split())  # the chat template was applied
    assert single_run["tokens_sha256"] == hashlib.sha256(",".join(map(str, single_run["tokens"])).encode()).hexdigest()
    # Varied tokens, or the comparison with the distributed runs would prove little.
    assert len(set(single_run["tokens"])) > MAX_TOKENS // 4
    assert len(single_run["peak_memory_gb"]) == len(single_run["hostname"]) == 1
    assert single_run["prompt_tps"] > 0 and single_run["generation_tps"] > 0


@pytest.mark.parametrize("mode", ["tensor", "pipeline"])
def test_two_ranks_generate_the_single_process_tokens(mode, single_run, tiny_model, tmp_path):
    json_out = tmp_path / "bench.json"
    result = _launch2(
        BENCH,
        "--model",
        str(tiny_model),
        "--prompt",
        PROMPT,
        "--max-tokens",
        str(MAX_TOKENS),
        "--mode",
        mode,
        "--expect-world",
        "2",
        "--num-trials",
        "2",
        "--init-timeout",
        "60",
        "--json-out",
        str(json_out),
    )
    report = _one_json_line(result)
    assert set(report) == JSON_KEYS
    assert (report["world_size"], report["backend"], report["mode"]) == (2, "ring", mode)
    assert report["tokens"] == single_run["tokens"]
    assert report["tokens_sha256"] == single_run["tokens_sha256"]
    assert report["prompt_tokens"] == single_run["prompt_tokens"]
    assert len(report["peak_memory_gb"]) == 2 and all(p > 0 for p in report["peak_memory_gb"])
    assert report["hostname"] == [socket.gethostname()] * 2
    # one warm-up, then two timed trials; the headline numbers are their medians
    assert (report["warmup"], report["num_trials"], len(report["trials"])) == (1, 2, 2)
    for key in ("prompt_tps", "generation_tps", "total_time"):
        st = report["stats"][key]
        assert st["min"] <= st["median"] <= st["max"] and st["stdev"] >= 0
        assert sorted(t[key] for t in report["trials"]) == [st["min"], st["max"]]
    assert report["generation_tps"] == report["stats"]["generation_tps"]["median"]
    assert report["fast_synch"] is False and report["versions"]["mlx"] and report["versions"]["mlx_lm"]
    assert "trial 2/2: prompt_tps=" in result.stderr and "warm-up 1/1" in result.stderr
    assert json.loads(json_out.read_text()) == report
    for rank in (0, 1):
        assert f"[rank {rank}/2 " in result.stderr


def test_expect_world_two_without_a_launcher_fails_fast(tiny_model):
    tic = time.monotonic()
    result = _run(
        [
            sys.executable,
            str(BENCH),
            "--model",
            str(tiny_model),
            "--prompt",
            PROMPT,
            "--max-tokens",
            "4",
            "--expect-world",
            "2",
        ],
        timeout=60,
    )
    assert time.monotonic() - tic < 20
    assert result.returncode == 3
    assert result.stdout == ""
    assert "--expect-world 2" in result.stderr and "mlx.launch" in result.stderr
    assert socket.gethostname() in result.stderr


def test_bench_refuses_a_model_that_is_not_a_local_directory(tmp_path):
    result = _run(
        [sys.executable, str(BENCH), "--model", "Qwen/Qwen2-0.5B", "--prompt", "x", "--max-tokens", "1"], timeout=60
    )
    assert result.returncode == 2 and "not a local model directory" in result.stderr


@pytest.mark.parametrize("rank", ["0", "1"])  # rank 0 blocks in accept(), rank 1 in connect()
def test_missing_peer_gives_up_at_the_init_timeout_naming_rank_and_host(rank, tmp_path):
    port = _free_port_pair()
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"], [f"127.0.0.1:{port + 1}"]]))
    tic = time.monotonic()
    result = _run(
        [sys.executable, str(NETCHECK), "--expect-world", "2", "--init-timeout", "3"],
        timeout=60,
        env={**ENV, "MLX_RANK": rank, "MLX_HOSTFILE": str(hostfile)},
    )
    elapsed = time.monotonic() - tic
    assert result.returncode != 0 and result.stdout == ""
    assert f"rank {rank} on {socket.gethostname()}" in result.stderr
    assert "did not complete in 3s" in result.stderr
    assert 3 <= elapsed < 20


def test_rdma_that_cannot_come_up_ends_init_at_once_with_the_rdma_exit_code(tmp_path):
    """As mlx.launch starts a jaccl rank (MLX_IBV_DEVICES, MLX_JACCL_COORDINATOR): this machine's
    mlx has no JACCL, so init fails as on a Mac whose RDMA cannot come up. Not retried: exit 8 in
    a few seconds, well before --init-timeout, naming rank, host and the device file's devices."""
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps([[None, "rdma_en2"], ["rdma_en2", None]]))
    tic = time.monotonic()
    result = _run(
        [sys.executable, str(NETCHECK), "--expect-world", "2", "--init-timeout", "60"],
        timeout=60,
        env={
            **ENV,
            "MLX_RANK": "1",
            "MLX_IBV_DEVICES": str(devices),
            "MLX_JACCL_COORDINATOR": f"127.0.0.1:{_free_port_pair()}",
        },
    )
    assert time.monotonic() - tic < 20
    assert result.returncode == 8 and result.stdout == ""
    assert f"rank 1 on {socket.gethostname()}: RDMA could not be brought up (backend jaccl)" in result.stderr
    assert "Cannot initialize jaccl distributed backend" in result.stderr
    assert "retrying" not in result.stderr and "attempt 2" not in result.stderr


# --- the network check ---


def test_netcheck_two_ranks_all_sizes_ok():
    report = _one_json_line(_launch2(NETCHECK, "--expect-world", "2", "--init-timeout", "60"))
    assert (report["world_size"], report["backend"]) == (2, "ring")
    assert [r["bytes"] for r in report["results"]] == [4096 * 4**i for i in range(8)]
    for row in report["results"]:
        assert set(row) == {"bytes", "latency_us_median", "bus_bandwidth_gbps", "ok"}
        assert row["ok"] is True
        assert row["latency_us_median"] > 0 and row["bus_bandwidth_gbps"] > 0


def test_netcheck_ranks_started_out_of_order(tmp_path):
    """The last rank (which connects) starts first, rank 0 two seconds later."""
    port = _free_port_pair()
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"], [f"127.0.0.1:{port + 1}"]]))
    argv = [sys.executable, str(NETCHECK), "--expect-world", "2", "--init-timeout", "60", "--max-bytes", "16384"]
    late = subprocess.Popen(
        argv,
        env={**ENV, "MLX_RANK": "1", "MLX_HOSTFILE": str(hostfile)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(2)
        first = _run(argv, timeout=90, env={**ENV, "MLX_RANK": "0", "MLX_HOSTFILE": str(hostfile)})
        out, err = late.communicate(timeout=60)
    finally:
        if late.poll() is None:
            os.killpg(late.pid, signal.SIGKILL)
            late.wait()
    assert late.returncode == 0 and out == "", err
    report = _one_json_line(first)
    assert report["world_size"] == 2 and all(r["ok"] for r in report["results"])


def _load_script(path):
    return load_program(path.parent.parent.name, path.name)


def test_netcheck_wrong_sum_fails_naming_the_rank(monkeypatch, capsys):
    netcheck = _load_script(NETCHECK)
    real_all_sum = netcheck.mx.distributed.all_sum

    def broken_all_sum(x, **kwargs):  # corrupts the float32 payloads, not the int flags
        y = real_all_sum(x, **kwargs)
        return y + 1 if y.dtype == netcheck.mx.float32 else y

    monkeypatch.setattr(netcheck.mx.distributed, "all_sum", broken_all_sum)
    assert netcheck.main(["--max-bytes", "16384", "--iters", "2"]) == 4
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [r["ok"] for r in report["results"]] == [False, False]
    assert "wrong all_sum result on rank(s) [0]" in captured.err


def test_a_mode_the_model_cannot_split_over_the_ranks_is_refused_with_the_fix(tmp_path):
    """mlx-lm would fail deep in the load ("split [1, 1, 0, 0] must be positive") or at the first
    token ("Cannot infer the shape of an empty array"): the script names the model, what does
    not split over how many ranks, and what to run instead."""
    bench = _load_script(BENCH)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
    )
    # a single-file model (no index): pipeline mode cannot find each rank's layers
    msg = bench.mode_refusal(model, "pipeline", 2)
    assert msg and "model.safetensors.index.json" in msg and "benchmark_modes: [tensor]" in msg
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    msg = bench.mode_refusal(model, "pipeline", 4)
    assert msg and "2 layer(s) for 4 ranks" in msg and "benchmark_modes: [tensor]" in msg
    msg = bench.mode_refusal(model, "tensor", 4)
    assert msg and "2 key/value heads for 4 ranks" in msg and "attention heads" not in msg
    assert "benchmark_modes: [pipeline]" in msg
    (model / "config.json").write_text(
        json.dumps(
            {"num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 3, "intermediate_size": 128}
        )
    )
    msg = bench.mode_refusal(model, "tensor", 3)
    assert msg and "an MLP width (intermediate_size) of 128 for 3 ranks" in msg
    assert "attention heads" not in msg and "key/value heads" not in msg
    (model / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})
    )
    assert bench.mode_refusal(model, "pipeline", 2) is None
    assert bench.mode_refusal(model, "tensor", 2) is None
    assert bench.mode_refusal(model, "tensor", 1) is None
    (model / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 3}}))
    assert "3 layer(s) for 4 ranks" in bench.mode_refusal(model, "pipeline", 4)
    (model / "config.json").write_text("not json")
    assert bench.mode_refusal(model, "pipeline", 4) is None
