#!/usr/bin/env python3
"""mlx-cluster benchmark: tokens/s of a model split over the cluster, measured as mlx_lm.benchmark does.

Deployed to every Mac with mlx_cluster_startup.py beside it (stdlib + mlx + mlx_lm) and
started on all of them by `mlx.launch` (or run as one process with --expect-world 1):

    mlx_cluster_bench.py --model PATH [--prompt-tokens 512] [--generation-tokens 1024]
        [--num-trials 5] [--warmup 1] [--prompt TEXT] [--mode tensor|pipeline]
        [--expect-world N] [--init-timeout SECONDS] [--backend any|ring|jaccl|mpi|nccl]
        [--seed N] [--ignore-chat-template] [--json-out PATH]

Each rank joins the distributed group (a peer not listening yet is retried, spaced, a bounded
number of times within --init-timeout seconds, since nodes come up out of order; a failed RDMA
link is never retried: mlx_cluster_startup.py), loads its shard with mlx_lm.utils.sharded_load
(tensor parallel or pipeline group) and runs what mlx_lm.benchmark runs: a prompt of
--prompt-tokens random token ids (mx.random.seed(--seed), ids below the vocabulary size; or
--prompt TEXT through the chat template), then exactly --generation-tokens greedy tokens, EOS
ignored; --warmup runs first and is not counted (kernel compilation), then --num-trials timed
trials. mlx_lm.benchmark's defaults: 512 prompt tokens, 1024 generated, 5 trials.

prompt_tps and generation_tps follow mlx-lm's stream_generate: prompt tokens over the time to
the first token; generated tokens over the time from the first token to the last. Every trial
is kept; the headline numbers are the medians (mlx_lm.benchmark prints the means: both are in
"stats", with min, max and the standard deviation). Each rank logs each trial to stderr
("[rank R/N host] trial 2/5: ..."), which mlx.launch passes on.

After a final barrier rank 0 prints ONE JSON line on stdout:

    {"backend", "world_size", "mode", "model", "prompt_tokens", "generation_tokens",
     "prompt_source": "random"|"text", "warmup", "num_trials",
     "prompt_tps", "generation_tps" (medians), "trials": [{"prompt_tps", "generation_tps",
     "total_time"}], "stats": {key: {"median", "mean", "min", "max", "stdev"}},
     "peak_memory_gb": [per rank], "fast_synch": bool, "versions": {"mlx", "mlx_lm", "python"},
     "tokens_sha256", "tokens": [ids of the last trial], "hostname": [per rank]}

tokens_sha256 is the sha256 of the ids written as decimal numbers joined by "," (no spaces).
Other ranks print nothing on stdout. With one rank the whole model is loaded with
mlx_lm.load (nothing to shard).

Exit codes: 0 done; 2 bad arguments or model directory; 3 distributed init failed or gave a
world size other than --expect-world (a process killed by the init watchdog exits by
SIGTERM); 4 the ranks (or two trials) generated different tokens; 5 the mode cannot split
this model over the ranks (the message says why and what to run instead); 8 RDMA could not be
brought up (not retried; the message names the devices and the fix).
"""

import os

# Never reach for the Hugging Face Hub: the model is a local directory on every node.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import mlx.core as mx  # noqa: E402
from mlx_cluster_startup import EXIT_RDMA, InitError, backend_name, init_distributed  # noqa: E402  (deployed beside)

EXIT_INIT, EXIT_MISMATCH, EXIT_MODEL = 3, 4, 5  # 2: bad arguments (argparse)
HOSTNAME_BYTES = 256
_PREFIX = [f"[rank {os.environ.get('MLX_RANK', '?')} {socket.gethostname()}]"]


def log(msg):
    print(f"{_PREFIX[0]} {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--model", required=True, help="local model directory (never downloaded)")
    p.add_argument(
        "--prompt-tokens", "-p", type=int, default=512, help="length of the random prompt (mlx_lm.benchmark's default)"
    )
    p.add_argument(
        "--generation-tokens",
        "-g",
        "--max-tokens",
        dest="generation_tokens",
        type=int,
        default=1024,
        help="tokens to generate, exactly: EOS does not stop generation",
    )
    p.add_argument("--num-trials", "-n", type=int, default=5, help="timed trials")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (kernel compilation)")
    p.add_argument("--prompt", default="", help="a user message (chat template applied) instead of random token ids")
    p.add_argument(
        "--mode",
        choices=("tensor", "pipeline"),
        default="tensor",
        help="tensor parallel or pipeline sharding across the ranks",
    )
    p.add_argument(
        "--expect-world", type=int, default=1, help="number of ranks this run must have; anything else fails"
    )
    p.add_argument("--init-timeout", type=float, default=120.0, help="seconds to keep retrying distributed init")
    p.add_argument(
        "--backend",
        choices=("any", "ring", "jaccl", "mpi", "nccl"),
        default="any",
        help="mx.distributed.init backend (any: the first one the launcher set up)",
    )
    p.add_argument("--seed", type=int, default=0, help="mx.random seed")
    p.add_argument("--ignore-chat-template", action="store_true", help="tokenize the prompt as is")
    p.add_argument("--json-out", help="rank 0 also writes the JSON line to this file")
    p.add_argument(
        "--run-id", default="", help="unique id of this run, so its processes can be found (and only they) for clean-up"
    )
    args = p.parse_args(argv)
    if (
        min(args.generation_tokens, args.prompt_tokens, args.num_trials, args.expect_world) < 1
        or args.warmup < 0
        or args.init_timeout <= 0
    ):
        p.error(
            "--generation-tokens, --prompt-tokens, --num-trials and --expect-world must be >= 1, "
            "--warmup >= 0, --init-timeout > 0"
        )
    if not (Path(args.model) / "config.json").is_file():
        p.error(f"--model {args.model}: not a local model directory (no config.json)")
    return args


def mode_refusal(model_path, mode, size):
    """Why `model_path` cannot run in `mode` over `size` ranks, or None. mlx-lm gives each
    pipeline rank whole layers (it refuses a split with an empty rank, deep in the load) and
    splits every attention layer's heads and key/value heads, and its MLP, evenly between tensor
    ranks (an uneven split fails in the load or at the first token). The controller checks the
    same before the launch (plugins/plugin_utils/model_split.py, with quantization groups)."""
    if size <= 1:
        return None
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None  # mlx-lm's own loader says what is wrong with the directory
    cfg = config.get("text_config", config) if isinstance(config, dict) else {}
    if mode == "pipeline":
        if not (Path(model_path) / "model.safetensors.index.json").is_file():
            return (
                f"pipeline mode loads each rank's layers by the model's index, and {model_path} has no "
                "model.safetensors.index.json (a single-file model): run it in tensor mode "
                "(benchmark_modes: [tensor]), or use a copy of the model saved in several shards "
                "(mlx_lm.convert writes the index)"
            )
        layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
        if isinstance(layers, int) and layers < size:
            return (
                f"pipeline mode gives every rank at least one layer, and {model_path} has {layers} "
                f"layer(s) for {size} ranks: run it in tensor mode (benchmark_modes: [tensor]) or on "
                f"at most {layers} Macs"
            )
        return None
    heads = cfg.get("num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads", heads)
    mlp = cfg.get("intermediate_size")
    uneven = [
        f"{n} {what}"
        for n, what in ((heads, "attention heads"), (kv_heads, "key/value heads"))
        if isinstance(n, int) and n % size
    ]
    if isinstance(mlp, int) and mlp % size:
        uneven.append(f"an MLP width (intermediate_size) of {mlp}")
    if uneven:
        return (
            f"tensor mode splits every layer's heads evenly between the ranks, and {model_path} has "
            f"{' and '.join(uneven)} for {size} ranks: run it in pipeline mode (benchmark_modes: "
            f"[pipeline]) or on a number of Macs that divides them"
        )
    return None


def load_shard(model_path, mode, group):
    from mlx_lm import load
    from mlx_lm.utils import sharded_load

    if group.size() == 1:
        return load(str(model_path))
    if mode == "tensor":
        return sharded_load(str(model_path), pipeline_group=None, tensor_group=group)
    return sharded_load(str(model_path), pipeline_group=group, tensor_group=None)


def encode_prompt(tokenizer, text, ignore_chat_template):
    """Like mlx_lm.generate: the chat template if the tokenizer has one, then encode."""
    use_template = not ignore_chat_template and tokenizer.has_chat_template
    if use_template:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return tokenizer.encode(text, add_special_tokens=not use_template)


def random_prompt(model_path, length, seed):
    """mlx_lm.benchmark's prompt: `length` random token ids below the vocabulary size. Drawn
    from an explicit key, so every rank (and a one-process run) gets the same ids whatever
    loading the model did to the global random state."""
    config = json.loads((Path(model_path) / "config.json").read_text())
    vocab = config.get("vocab_size") or config["text_config"]["vocab_size"]
    return mx.random.randint(0, vocab, (length,), key=mx.random.key(seed)).tolist()


def generate_fixed(model, prompt, max_tokens):
    """Exactly max_tokens greedy tokens, and the timings. generate_step never looks at EOS
    (stream_generate does), and with no sampler it takes the argmax."""
    from mlx_lm.generate import generate_step, generation_stream, wired_limit

    tokens = []
    with wired_limit(model, [generation_stream]):
        tic = time.perf_counter()
        for token, _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
            if not tokens:
                first = time.perf_counter()
            tokens.append(int(token))
        last = time.perf_counter()
        # generate_step leaves the step after the last token in flight (async_eval), with its
        # collectives; wired_limit synchronizes only on Metal. A collective issued before it
        # ends interleaves with it on the wire and receives garbage.
        mx.synchronize(generation_stream)
    return tokens, {
        "prompt_tps": len(prompt) / (first - tic),
        "generation_tps": len(tokens) / max(last - first, 1e-9),
        "total_time": time.perf_counter() - tic,
    }


def summary(values):
    """median, mean, min, max and (sample) standard deviation of the trials' values."""
    return {
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def trials(model, prompt, args):
    """--warmup untimed runs, then --num-trials timed ones: ([timing per trial], tokens, fault).
    Greedy decoding makes every trial's tokens the same; `fault` names a trial that differs
    (reported after the ranks' last collectives, so no rank is left waiting)."""
    for i in range(args.warmup):
        log(f"warm-up {i + 1}/{args.warmup}: {args.generation_tokens} tokens from a {len(prompt)}-token prompt")
        generate_fixed(model, prompt, args.generation_tokens)
    timings, tokens, fault = [], None, None
    for i in range(args.num_trials):
        got, timing = generate_fixed(model, prompt, args.generation_tokens)
        if tokens is not None and got != tokens and fault is None:
            fault = f"trial {i + 1} generated other tokens than trial 1 (greedy decoding)"
        tokens = got
        timings.append(timing)
        log(
            f"trial {i + 1}/{args.num_trials}: prompt_tps={timing['prompt_tps']:.3f}, "
            f"generation_tps={timing['generation_tps']:.3f}, total_time={timing['total_time']:.3f}"
        )
    return timings, tokens, fault


def versions():
    import platform

    import mlx_lm

    return {
        "mlx": getattr(mx, "__version__", "unknown"),
        "mlx_lm": getattr(mlx_lm, "__version__", "unknown"),
        "python": platform.python_version(),
    }


def gather_hostnames(group):
    raw = socket.gethostname().encode()[:HOSTNAME_BYTES].ljust(HOSTNAME_BYTES, b"\0")
    rows = mx.distributed.all_gather(mx.array(list(raw), dtype=mx.uint8), group=group, stream=mx.cpu).reshape(
        group.size(), HOSTNAME_BYTES
    )
    return [bytes(r).rstrip(b"\0").decode(errors="replace") for r in rows.tolist()]


def run(args):
    try:
        group = init_distributed(args.backend, args.expect_world, args.init_timeout, log)
    except InitError as err:
        print(err, file=sys.stderr, flush=True)  # names rank and host itself
        return EXIT_RDMA if err.kind == "rdma" else EXIT_INIT
    rank, size = group.rank(), group.size()
    _PREFIX[0] = f"[rank {rank}/{size} {socket.gethostname()}]"
    mx.random.seed(args.seed)

    # stdout carries rank 0's JSON line only: mlx-lm's own prints (warnings) go to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        refusal = mode_refusal(args.model, args.mode, size)
        if refusal:
            log(refusal)
            return EXIT_MODEL
        log(f"loading {args.model} ({args.mode} over {size} rank(s))")
        model, tokenizer = load_shard(Path(args.model), args.mode, group)
        if args.prompt:
            prompt = encode_prompt(tokenizer, args.prompt, args.ignore_chat_template)
        else:
            prompt = random_prompt(args.model, args.prompt_tokens, args.seed)
        timings, tokens, fault = trials(model, prompt, args)

    peaks = mx.distributed.all_gather(
        mx.array([mx.get_peak_memory() / 1e9], dtype=mx.float32), group=group, stream=mx.cpu
    ).tolist()
    hosts = gather_hostnames(group)
    every = (
        mx.distributed.all_gather(mx.array(tokens, dtype=mx.int32), group=group, stream=mx.cpu)
        .reshape(size, len(tokens))
        .tolist()
    )
    mx.eval(mx.distributed.all_sum(mx.array(1), group=group, stream=mx.cpu))  # final barrier

    if fault:
        log(fault)
        return EXIT_MISMATCH
    differ = [r for r, row in enumerate(every) if row != every[0]]
    if differ:
        log(f"ranks {differ} generated other tokens than rank 0: the shards disagree")
        return EXIT_MISMATCH
    if rank != 0:
        return 0
    keys = ("prompt_tps", "generation_tps", "total_time")
    stats = {k: {name: round(v, 3) for name, v in summary([t[k] for t in timings]).items()} for k in keys}
    line = json.dumps(
        {
            "backend": backend_name(args.backend, size),
            "world_size": size,
            "mode": args.mode,
            "model": args.model,
            "prompt_tokens": len(prompt),
            "generation_tokens": len(tokens),
            "prompt_source": "text" if args.prompt else "random",
            "warmup": args.warmup,
            "num_trials": args.num_trials,
            "prompt_tps": stats["prompt_tps"]["median"],
            "generation_tps": stats["generation_tps"]["median"],
            "trials": [{k: round(t[k], 3) for k in keys} for t in timings],
            "stats": stats,
            "peak_memory_gb": [round(p, 6) for p in peaks],
            "fast_synch": os.environ.get("MLX_METAL_FAST_SYNCH") == "1",
            "versions": versions(),
            "tokens_sha256": hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest(),
            "tokens": tokens,
            "hostname": hosts,
        }
    )
    print(line, flush=True)
    if args.json_out:
        Path(args.json_out).write_text(line + "\n")
    return 0


def main(argv=None):
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
