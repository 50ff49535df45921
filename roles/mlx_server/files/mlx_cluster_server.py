#!/usr/bin/env python3
"""mlx-cluster OpenAI-compatible server: one rank per Mac, rank 0 answers HTTP.

Deployed to every Mac with mlx_cluster_startup.py beside it (stdlib + mlx + mlx_lm) and
started on every Mac at once (launchd job or detached process, with the environment
`mlx.launch` would give the rank):

    mlx_cluster_server.py --model PATH --run-dir DIR [--mode tensor|pipeline]
        [--expect-world N] [--init-timeout SECONDS] [--backend any|ring|jaccl|mpi|nccl]
        [--host ADDRESS] [--port N] [--model-id NAME] [--max-tokens N]
        [--poll-interval SECONDS] [--request-timeout SECONDS] [--queue-size N]
        [--stall-timeout SECONDS] [--settings-hash HEX] [--run-id TOKEN]

Every rank joins the distributed group (retried for --init-timeout seconds: the Macs start
out of order), loads its shard with mlx_lm.utils.sharded_load and enters the serving loop.
Rank 0 also runs a small HTTP server (ThreadingHTTPServer) on --host:--port:

    GET  /v1/models, /v1/models/<id>, /health, /metrics (Prometheus's text format)
    POST /v1/chat/completions, /v1/completions   ("stream": true gives server-sent events)

Every rank must take part in every generation (each forward pass has collectives), so rank 0
does not generate alone: each turn of the serving loop is a broadcast that all ranks enter.

    header  int32[4 + world size] all_sum: [kind, payload bytes, stop votes, sequence,
            peak memory of rank 0 in KiB, of rank 1, ...]
            kind and payload length come from rank 0 (0 elsewhere); every rank adds 1 to
            "stop votes" when it was asked to stop (SIGTERM/SIGINT), so a signal to ANY
            rank stops ALL ranks at the next turn; each rank fills its own memory slot
            (0 elsewhere), so rank 0 knows every rank's peak memory as of the last turn.
    payload uint8[n] all_sum (only for kind GENERATE): rank 0's request as UTF-8 JSON
            {"tokens", "max_tokens", "temperature", "top_p", "seed", "stop"}; 0 elsewhere.

With no request, rank 0 sends an IDLE turn every --poll-interval seconds; after an idle turn
the other ranks sleep 90% of that interval before entering the next one (the ring backend
spins while it waits), so a request waits at most one interval. Then every rank generates the
same tokens: same prompt, same seed, same sampler (greedy at temperature 0), the same stop
decisions (EOS, max_tokens, stop strings).

Requests reach the ranks one at a time, in order: the serving loop takes the next one only
when the last one is generated. At most --queue-size requests wait behind it; beyond that
rank 0 answers 503 (OpenAI-style error body, code "server_busy") with a Retry-After header.
A request whose client gave up waiting (--request-timeout) leaves the queue.

Progress: every rank keeps a heartbeat of its serving loop in rank<N>.json ("progress": last
turn, last token, tokens of the request under way, requests done, rank 0's queue depth),
written at most once a second and at every request's start and end. Every turn (an idle
turn comes every --poll-interval) and every generated token is progress; the loop is
"stalled" when a ready rank made none for --stall-timeout seconds. /health returns the
heartbeat and answers 503 when stalled; the supervisor (mlx_server_daemon.py) restarts the
ranks on it.

Files in --run-dir (created if missing), with N the rank:
    rank<N>.pid   this process's PID (removed on a clean exit)
    rank<N>.json  {"rank", "pid", "host", "phase", "message", "started", "updated",
                   "settings_hash", "run_id", "world_size", "progress"}; phase is starting,
                   init, loading, ready, stopping, stopped or failed; progress (once ready):
                   {"last_turn_at", "last_token_at", "progress_mono", "turns", "generating",
                   "tokens", "requests_done", "queue_depth", "stall_timeout"} (times: wall
                   clock; progress_mono: time.monotonic() of the last progress, for the
                   supervisor and the status module on the same Mac)
    state.json    rank 0 only, once serving: {"settings_hash", "run_id", "started",
                   "ready_at", "model", "model_id", "mode", "backend", "endpoint",
                   "ranks": [{"rank", "host", "pid", "restarts", "stall_restarts"}]}
Logs go to stderr (the supervisor sends them to rank<N>.log) as "[time rank R/N host] ...".

Exit codes: 0 stopped on request; 2 bad arguments or model directory; 3 distributed init
failed or gave another world size than --expect-world; 5 loading the model failed; 6 the HTTP
port could not be bound; 7 a peer was lost or a collective failed while serving; 8 RDMA could not
be brought up (its supervisor does not restart it).
"""

import os

# Never reach for the Hugging Face Hub: the model is a local directory on every node.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse  # noqa: E402
import collections  # noqa: E402
import contextlib  # noqa: E402
import hmac  # noqa: E402
import ipaddress  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import queue  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from pathlib import Path  # noqa: E402

import mlx.core as mx  # noqa: E402
from mlx_cluster_startup import EXIT_RDMA, InitError, backend_name, init_distributed, stall_verdict  # noqa: E402  (deployed beside)
from prometheus_client import (  # noqa: E402  (in the venv: python_env's pins)
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)

EXIT_INIT, EXIT_LOAD, EXIT_BIND, EXIT_PEER = 3, 5, 6, 7  # 2: bad arguments (argparse)
HOSTNAME_BYTES = 256
_PREFIX = [f"rank {os.environ.get('MLX_RANK', '?')} {socket.gethostname()}"]


def log(msg):
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} {_PREFIX[0]}] {msg}", file=sys.stderr, flush=True)


# --- the request broadcast (pure: encoding and decoding, no collectives) ---

KIND_IDLE, KIND_GENERATE = 0, 1
HEADER_LEN = 4
MAX_PAYLOAD = 64 * 1024 * 1024  # a request between the ranks (rank 0 checks the HTTP body's size: MAX_BODY)
REQUEST_KEYS = ("tokens", "max_tokens", "temperature", "top_p", "seed", "stop")


def encode_request(request):
    """Rank 0's request -> the UTF-8 JSON payload every rank receives (keys sorted, compact)."""
    missing = [k for k in REQUEST_KEYS if k not in request]
    if missing:
        raise ValueError(f"request lacks {', '.join(missing)}")
    if not request["tokens"] or not all(isinstance(t, int) and t >= 0 for t in request["tokens"]):
        raise ValueError("tokens must be a non-empty list of token ids")
    data = json.dumps({k: request[k] for k in REQUEST_KEYS}, sort_keys=True, separators=(",", ":")).encode()
    if len(data) > MAX_PAYLOAD:
        raise ValueError(f"request of {len(data)} bytes exceeds {MAX_PAYLOAD}")
    return data


def decode_request(data):
    return json.loads(bytes(data).decode())


def header_row(is_root, kind=KIND_IDLE, payload_len=0, stop=False, seq=0, memory=None):
    """What one rank contributes to the header all_sum: kind, length and sequence come from
    rank 0 only; every rank adds its stop vote; with `memory` = (rank, world size, peak KiB),
    one slot per rank, this rank's filled."""
    row = [int(kind), int(payload_len), int(bool(stop)), int(seq)] if is_root else [0, 0, int(bool(stop)), 0]
    if memory is not None:
        rank, size, kib = memory
        row += [int(kib) if r == rank else 0 for r in range(size)]
    return row


def read_header(summed):
    kind, length, votes, seq = (int(x) for x in summed[:HEADER_LEN])
    memory = [int(x) for x in summed[HEADER_LEN:]]
    if kind not in (KIND_IDLE, KIND_GENERATE) or not 0 <= length <= MAX_PAYLOAD or min(memory, default=0) < 0:
        raise RuntimeError(f"corrupt broadcast header {list(summed)}: the ranks are out of step")
    header = {"kind": kind, "length": length, "stop_votes": votes, "seq": seq}
    if memory:
        header["peak_memory_kib"] = memory
    return header


def payload_row(is_root, data, length):
    """What one rank contributes to the payload all_sum: the bytes on rank 0, zeros elsewhere."""
    if is_root:
        if len(data) != length:
            raise ValueError("payload length differs from the header")
        return list(data)
    return [0] * length


def broadcast(group, request_bytes, stop, seq):
    """One turn: every rank calls this; returns (header, request dict or None)."""
    root = group.rank() == 0
    kind = KIND_GENERATE if (root and request_bytes is not None) else KIND_IDLE
    length = len(request_bytes) if kind == KIND_GENERATE else 0
    memory = (group.rank(), group.size(), min(mx.get_peak_memory() >> 10, 2**31 - 1))
    hdr = mx.distributed.all_sum(
        mx.array(header_row(root, kind, length, stop, seq, memory), dtype=mx.int32), group=group, stream=mx.cpu
    )
    header = read_header(hdr.tolist())
    if header["kind"] != KIND_GENERATE or header["length"] == 0:
        return header, None
    buf = mx.array(payload_row(root, request_bytes or b"", header["length"]), dtype=mx.uint8)
    summed = mx.distributed.all_sum(buf, group=group, stream=mx.cpu)
    return header, decode_request(bytes(summed.tolist()))


# --- end of the request broadcast ---


def write_json_atomic(path, data):
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class RankState:
    """rank<N>.json and rank<N>.pid in the run directory."""

    def __init__(self, run_dir, rank, settings_hash, run_id):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank = rank
        self.data = {
            "rank": rank,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "phase": "starting",
            "message": "",
            "started": time.time(),
            "updated": time.time(),
            "settings_hash": settings_hash,
            "run_id": run_id,
            "world_size": None,
        }
        self.pidfile = self.dir / f"rank{rank}.pid"
        tmp = Path(f"{self.pidfile}.tmp{os.getpid()}")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, self.pidfile)
        self.save()

    def save(self):
        write_json_atomic(self.dir / f"rank{self.rank}.json", self.data)

    def phase(self, phase, message="", **extra):
        self.data.update(phase=phase, message=message, updated=time.time(), **extra)
        self.save()
        log(f"{phase}{': ' + message if message else ''}")

    def set_rank(self, rank):
        """MLX_RANK was unset or wrong (mpirun): the files follow the rank init gave."""
        self.clear_pid()
        with contextlib.suppress(OSError):
            (self.dir / f"rank{self.rank}.json").unlink()
        self.rank = self.data["rank"] = rank
        self.pidfile = self.dir / f"rank{rank}.pid"
        self.pidfile.write_text(f"{os.getpid()}\n")
        self.save()

    def clear_pid(self):
        with contextlib.suppress(OSError):
            if self.pidfile.read_text().strip() == str(os.getpid()):
                self.pidfile.unlink()


def parse_args(argv):
    """The command line, checked. What argparse cannot check alone (bounds, the stall timeout
    against the poll interval, the model directory, the API key file) ends as its usage error
    too (exit 2). Options are added by concern, in the order --help lists them."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    _add_group_options(p)
    _add_serving_options(p)
    _add_access_options(p)
    p.add_argument("--settings-hash", default="", help="recorded in the state files")
    p.add_argument(
        "--run-id", default="", help="unique id of this start, so its processes can be found (and only they)"
    )
    args = p.parse_args(argv)
    _check_args(p, args)
    args.model_id = args.model_id or Path(args.model).name
    args.api_key = _read_api_key(p, args.api_key_file)
    return args


def _add_group_options(p):
    """The model, the run directory, and the distributed group this rank joins."""
    p.add_argument("--model", required=True, help="local model directory (never downloaded)")
    p.add_argument("--run-dir", required=True, help="directory for pid, state and rank files")
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


def _add_serving_options(p):
    """Rank 0's HTTP server, the requests' limits and the serving loop's pace and stall bound."""
    p.add_argument("--host", default="127.0.0.1", help="address rank 0's HTTP server binds")
    p.add_argument("--port", type=int, default=8080, help="port rank 0's HTTP server binds")
    p.add_argument("--model-id", default="", help="model name in the API (default: the directory name)")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=2048,
        help="tokens a request gets when it names none, and the most it may ask for",
    )
    p.add_argument("--poll-interval", type=float, default=0.5, help="seconds between idle turns of the serving loop")
    p.add_argument(
        "--request-timeout", type=float, default=600.0, help="seconds an HTTP request waits for its generation"
    )
    p.add_argument(
        "--queue-size", type=int, default=8, help="requests that may wait while one is generated; more get HTTP 503"
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="seconds without a turn or a token after which the loop counts as stalled (0: never)",
    )


def _add_access_options(p):
    """Who may use rank 0's API: the names it may be reached by, and the key it asks for."""
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="a name clients may reach rank 0's API by, besides addresses, localhost and "
        "this Mac's own names (repeatable)",
    )
    p.add_argument(
        "--api-key-file",
        default="",
        help="a file (the user's alone) holding the key clients send as `Authorization: Bearer KEY`; "
        "without it no key is asked for",
    )


def _check_args(p, args):
    """What argparse's types do not check: the bounds, the stall timeout against the poll
    interval, and that --model is a local model directory. A breach is a usage error (exit 2)."""
    if (
        args.expect_world < 1
        or args.init_timeout <= 0
        or args.max_tokens < 1
        or args.poll_interval <= 0
        or not 0 < args.port < 65536
        or args.queue_size < 0
    ):
        p.error(
            "--expect-world and --max-tokens must be >= 1, --init-timeout and "
            "--poll-interval > 0, --port in 1..65535, --queue-size >= 0"
        )
    if args.stall_timeout and args.stall_timeout < min_stall_timeout(args.poll_interval):
        p.error(
            f"--stall-timeout {args.stall_timeout:g} is too short: 0 (off) or at least "
            f"{min_stall_timeout(args.poll_interval):g}s (5s and 4 poll intervals)"
        )
    if not (Path(args.model) / "config.json").is_file():
        p.error(f"--model {args.model}: not a local model directory (no config.json)")


def _read_api_key(p, path):
    """The API key (bytes) from --api-key-file, or None when no key is asked for; a file that
    cannot be read or is empty is a usage error (exit 2)."""
    if not path:
        return None
    try:
        key = Path(path).read_bytes().strip() or None
    except OSError as exc:
        p.error(f"--api-key-file {path}: {exc.strerror}")
    if key is None:
        p.error(f"--api-key-file {path} is empty")
    return key


def authorized(headers, key):
    """True when no key is asked for, or the request carries it (`Authorization: Bearer KEY`,
    compared in constant time)."""
    if key is None:
        return True
    scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)


def unauthorized():
    return ApiError(
        401,
        "this server asks for its API key: send `Authorization: Bearer <key>` (mlx_server_api_key)",
        kind="authentication_error",
        headers={"WWW-Authenticate": 'Bearer realm="mlx-cluster"'},
    )


def min_stall_timeout(poll_interval):
    """The shortest stall bound that idle turns (one per poll interval) and the heartbeat
    (written once a second) cannot trip on their own."""
    return max(5.0, 4 * poll_interval)


def load_shard(model_path, mode, group):
    from mlx_lm import load
    from mlx_lm.utils import sharded_load

    if group.size() == 1:
        return load(str(model_path))
    if mode == "tensor":
        return sharded_load(str(model_path), pipeline_group=None, tensor_group=group)
    return sharded_load(str(model_path), pipeline_group=group, tensor_group=None)


# --- generation (every rank, the same decisions) ---


def generate(model, tokenizer, req, on_text=None, on_token=None):
    """Generate for one broadcast request. Every rank runs this with the same request and
    reaches the same stop decision (EOS, max_tokens, a stop string), so every rank runs the
    same number of forward passes. on_token() is called for every token (the heartbeat).
    Returns {"text", "tokens", "finish_reason"}."""
    from mlx_lm.generate import generation_stream, stream_generate
    from mlx_lm.sample_utils import make_sampler

    mx.random.seed(int(req["seed"]))
    sampler = make_sampler(temp=float(req["temperature"]), top_p=float(req["top_p"]))
    stops = [s for s in req["stop"] if s]
    text, tokens, finish, sent = "", [], "length", 0
    # Hold back what could be the start of a stop string before handing text out.
    hold = max((len(s) for s in stops), default=1) - 1
    try:
        for resp in stream_generate(
            model, tokenizer, mx.array(req["tokens"]), max_tokens=int(req["max_tokens"]), sampler=sampler
        ):
            if on_token is not None:
                on_token()
            if resp.finish_reason is None or resp.token not in tokenizer.eos_token_ids:
                tokens.append(int(resp.token))
            text += resp.text
            if resp.finish_reason is not None:
                finish = resp.finish_reason
            hit = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if hit >= 0:
                text, finish = text[:hit], "stop"
            if on_text is not None:
                upto = len(text) if (hit >= 0 or resp.finish_reason is not None) else max(sent, len(text) - hold)
                if upto > sent:
                    on_text(text[sent:upto])
                    sent = upto
            if hit >= 0:
                break
    finally:
        # generate_step leaves the step after the last token in flight (async_eval), with its
        # collectives; a collective issued before it ends interleaves with it on the wire.
        mx.synchronize(generation_stream)
    if on_text is not None and len(text) > sent:
        on_text(text[sent:])
    return {"text": text, "tokens": tokens, "finish_reason": finish}


# --- HTTP (rank 0 only) ---


class ApiError(Exception):
    def __init__(self, status, message, param=None, kind="invalid_request_error", code=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code
        self.headers = headers or {}

    def body(self):
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _number(body, key, default, lo, hi, kind=float):
    value = body.get(key, default)
    if value is None:
        value = default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or (kind is int and int(value) != value)
    ):
        raise ApiError(400, f"'{key}' must be a{'n integer' if kind is int else ' finite number'}", key)
    if not lo <= value <= hi:
        raise ApiError(400, f"'{key}' must be between {lo} and {hi}", key)
    return kind(value)


def message_text(content):
    """OpenAI message content: a string or a list of {"type": "text", "text"} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") not in ("text", "input_text") for p in content):
            raise ApiError(400, "only text content parts are supported", "messages")
        return "".join(str(p.get("text", "")) for p in content)
    raise ApiError(400, "message content must be a string or a list of text parts", "messages")


def sampling_params(body, max_tokens_limit):
    """The request fields every rank needs, checked. max_completion_tokens is the newer name."""
    if body.get("n", 1) not in (1, None):
        raise ApiError(400, "only n=1 is supported", "n")
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": limit}, "max_tokens", max_tokens_limit, 1, max_tokens_limit, int)
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise ApiError(400, "'stop' must be a string or a list of up to 4 strings", "stop")
    seed = body.get("seed")
    if seed is None:
        seed = secrets.randbits(31)
    seed = _number({"seed": seed}, "seed", 0, -(2**63), 2**63 - 1, int) % (2**31)
    return {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0),
        "seed": seed,
        "stop": stop,
    }


def chat_prompt(tokenizer, messages):
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", "messages")
    msgs = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, "every message needs a 'role'", "messages")
        msgs.append({"role": m["role"], "content": message_text(m.get("content"))})
    if getattr(tokenizer, "has_chat_template", False) or getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return list(tokenizer.encode(text, add_special_tokens=False))
    text = "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant: "
    return list(tokenizer.encode(text))


def completion_prompt(tokenizer, prompt, vocab_size=None):
    """The prompt's token ids: a string encoded, or ids given, each within the model's
    vocabulary (an id past it would read outside the embedding table on every rank)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return list(tokenizer.encode(prompt))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        limit = vocab_size or 2**31
        bad = [t for t in prompt if not 0 <= t < limit]
        if bad:
            raise ApiError(400, f"token id {bad[0]} is outside the model's vocabulary (0 to {limit - 1})", "prompt")
        return prompt
    raise ApiError(400, "'prompt' must be a non-empty string or a list of token ids (one prompt)", "prompt")


def vocab_size(model_dir, tokenizer):
    """How many token ids the model has: config.json's vocab_size (its text_config's for a
    multimodal config), else the tokenizer's length; None when neither says."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        cfg = {}
    for c in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}):
        if isinstance(c.get("vocab_size"), int) and c["vocab_size"] > 0:
            return c["vocab_size"]
    try:
        return len(tokenizer) or None
    except TypeError:
        return None


# What an HTTP request may be: a JSON body of at most MAX_BODY bytes (Content-Type
# application/json), from a client that is not a web page (no Origin header: browsers send one
# with every cross-site POST, and a page could otherwise use the user's own reach to the
# server), naming the server by an address, localhost, this Mac's own names, or a name the
# user allowed (--allowed-host): a Host of any other name is what DNS rebinding sends.
MAX_BODY = 8 * 1024 * 1024


def refuse_constant(name):
    raise ApiError(400, f"the body holds {name}, which is not JSON")


def check_request_headers(headers, allowed_hosts):
    """None when an HTTP request's headers are acceptable, else the ApiError to answer."""
    origin = headers.get("Origin")
    if origin:
        return ApiError(
            403,
            f"requests from web pages are refused (Origin: {origin}); API clients send no Origin",
            kind="permission_error",
        )
    refused = check_host(headers, allowed_hosts)
    if refused is not None:
        return refused
    ctype = (headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        return ApiError(415, f"Content-Type must be application/json, not {ctype or '(none)'}")
    return None


def check_host(headers, allowed_hosts):
    """None when the Host header names this server (an address, or a name it answers to), else
    the 403 to answer: what a page that rebound its own name to this address would send."""
    host = (headers.get("Host") or "").strip().lower()
    if host.startswith("[") and "]" in host:
        name = host[1 : host.index("]")]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name_allowed(name, allowed_hosts):
        return None
    return ApiError(
        403,
        f"Host {host or '(none)'} is not a name of this server: use its address, or add the "
        "name to mlx_server_allowed_hosts",
        kind="permission_error",
    )


def name_allowed(name, allowed_hosts):
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name.rstrip(".") in {n.lower().rstrip(".") for n in allowed_hosts}


def own_names(host):
    """The names this Mac answers to without the user saying so: localhost, its host name (with
    and without its domain, and as Bonjour's .local), and the bind address when it is a name."""
    names = {"localhost"}
    for n in (socket.gethostname(), host):
        n = (n or "").lower().rstrip(".")
        if n and not n.replace(".", "").isdigit() and ":" not in n:
            short = n.split(".", 1)[0]
            names |= {n, short, short + ".local"}
    return names


# Connections rank 0's HTTP server serves at once; more are closed at once (each is a thread).
MAX_CONNECTIONS = 64
# Seconds a connection may go without sending or taking data (headers, body, a reply).
SOCKET_TIMEOUT = 60


class BoundedHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most MAX_CONNECTIONS connections at once."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address):
        """A client that went away or stopped sending is one line in the log, not socketserver's
        traceback between dashes (the server runs for days); anything else keeps its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log(f"http {client_address[0]}: the connection ended early ({type(exc).__name__}: {exc})")
            return
        log(f"http {client_address[0]}: the request failed:\n{traceback.format_exc().rstrip()}")


class Job:
    def __init__(self, request, stream):
        self.request = request
        self.done = threading.Event()
        self.result = None
        self.error = None
        self.abandoned = False  # its client stopped waiting while it was queued
        self.chunks = queue.Queue() if stream else None

    def fail(self, error):
        self.error = error
        self.done.set()
        if self.chunks is not None:
            self.chunks.put(None)


class Progress:
    """The serving loop's heartbeat, kept by the loop itself (so it stops when the loop does)
    and written into rank<N>.json ("progress") at most every WRITE_EVERY seconds, and at once
    when a request starts or ends. Times: wall clock for people, progress_mono for the
    supervisor and the status view (time.monotonic() is the Mac's, not the process's)."""

    WRITE_EVERY = 1.0

    def __init__(self, state, stall_timeout, depth=None, clock=time.monotonic, wall=time.time):
        self.state, self.depth, self.clock, self.wall = state, depth, clock, wall
        self.data = {
            "last_turn_at": None,
            "last_token_at": None,
            "progress_mono": clock(),
            "turns": 0,
            "generating": False,
            "tokens": 0,
            "requests_done": 0,
            "queue_depth": 0,
            "stall_timeout": stall_timeout,
        }
        self.written = None

    def snapshot(self):
        snap = dict(self.data)
        if self.depth is not None:
            snap["queue_depth"] = self.depth()
        return snap

    def _moved(self, key):
        self.data[key] = self.wall()
        self.data["progress_mono"] = self.clock()

    def turn(self):
        self.data["turns"] += 1
        self._moved("last_turn_at")
        self.write()

    def start_request(self):
        """A request is in flight: taken from the queue (rank 0), or received (the others)."""
        self.data.update(generating=True, tokens=0)
        self.data["progress_mono"] = self.clock()
        self.write(force=True)

    def token(self):
        self.data["tokens"] += 1
        self._moved("last_token_at")
        self.write()

    def end_request(self, completed=True):
        self.data["generating"] = False
        self.data["requests_done"] += int(completed)
        self._moved("last_turn_at")
        self.write(force=True)

    def write(self, force=False):
        now = self.clock()
        if not force and self.written is not None and now - self.written < self.WRITE_EVERY:
            return
        self.written = now
        if self.state is not None:
            self.state.data.update(progress=self.snapshot(), updated=self.wall())
            self.state.save()


class Metrics:
    """Rank 0's numbers for Prometheus, GET /metrics, in a registry of its own (prometheus_client):
    requests by outcome, prompt and generated tokens, generation time, queue depth, the serving
    loop's heartbeat age, every rank's peak memory (carried by each turn's header),
    the restarts each rank's supervisor made (and
    how many for a stall: read from every rank's supervisor state file at the group's start,
    gather_ranks), and an info metric with model, backend, world size and versions."""

    OUTCOMES = ("ok", "queue_full", "refused", "error")

    def __init__(self, server):
        disable_created_metrics()  # no *_created series: a restart shows as the counters' reset
        reg = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "mlx_cluster_server_requests",
            "Completion requests answered, by outcome: ok, queue_full (503, the queue was full), refused "
            "(any other 4xx: a bad request, no key, no such model), error (5xx: a failed or timed-out generation).",
            ["outcome"],
            registry=reg,
        )
        for outcome in self.OUTCOMES:
            self.requests.labels(outcome)
        self.prompt_tokens = Counter(
            "mlx_cluster_server_prompt_tokens", "Prompt tokens of generated requests.", registry=reg
        )
        self.generated_tokens = Counter(
            "mlx_cluster_server_generated_tokens", "Tokens generated for requests.", registry=reg
        )
        self.generation = Histogram(
            "mlx_cluster_server_generation_seconds",
            "Seconds each request's generation took on the ranks (tokens/s: the tokens' rate over this sum's).",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=reg,
        )
        Gauge(
            "mlx_cluster_server_queue_depth", "Requests waiting behind the one being generated.", registry=reg
        ).set_function(server.depth)
        Gauge(
            "mlx_cluster_server_heartbeat_age_seconds",
            "Seconds since rank 0's serving loop last made progress (a turn or a token).",
            registry=reg,
        ).set_function(lambda: max(0.0, server.clock() - server.progress.snapshot()["progress_mono"]))
        # every rank's peak memory: rank 0's as of the scrape, the others' as of the serving loop's
        # last turn (each rank adds its own to the turn's header); a stalled rank stalls the turn,
        # and the heartbeat above with it: rank 0's heartbeat is the group's
        self.server = server
        self.rank_memory = Gauge(
            "mlx_cluster_server_rank_peak_memory_bytes",
            "Each rank's peak memory (MLX): rank 0's now, the others' as of the serving loop's last turn.",
            ["rank", "host"],
            registry=reg,
        )
        # as of the group's last start: any rank's restart restarts every rank, so it is current
        restarts = Gauge(
            "mlx_cluster_server_supervisor_restarts",
            "Restarts each rank's supervisor made of it (as of the group's last start).",
            ["rank", "host"],
            registry=reg,
        )
        stalls = Gauge(
            "mlx_cluster_server_stall_restarts",
            "Of those, restarts because the rank's serving loop stalled.",
            ["rank", "host"],
            registry=reg,
        )
        for r in server.world.get("ranks") or []:
            labels = (str(r.get("rank")), str(r.get("host")))
            restarts.labels(*labels).set(r.get("restarts", 0))
            stalls.labels(*labels).set(r.get("stall_restarts", 0))
        Info(
            "mlx_cluster_server", "The model served, the backend, the world size and the versions.", registry=reg
        ).info(
            {
                "model": str(server.args.model_id),
                "backend": str(server.world.get("backend") or ""),
                "world_size": str(server.world["size"]),
                "mlx": _version("mlx"),
                "mlx_lm": _version("mlx-lm"),
            }
        )

    def answered(self, status, code=None):
        """Count one completion request's answer by its HTTP status (and error code: a 503 is
        queue_full only when the queue was full, code server_busy; a stopping server's is an error)."""
        if status < 400:
            outcome = "ok"
        elif status == 503 and code == "server_busy":
            outcome = "queue_full"
        else:
            outcome = "refused" if status < 500 else "error"
        self.requests.labels(outcome).inc()

    def generated(self, prompt_tokens, tokens, seconds):
        self.prompt_tokens.inc(prompt_tokens)
        self.generated_tokens.inc(tokens)
        self.generation.observe(seconds)

    def text(self):
        hosts = {r.get("rank"): str(r.get("host")) for r in self.server.world.get("ranks") or []}
        for rank, kib in enumerate(list(self.server.ranks_memory) or [0]):
            self.rank_memory.labels(str(rank), hosts.get(rank, "")).set(
                mx.get_peak_memory() if rank == 0 else kib << 10
            )
        return generate_latest(self.registry)


def _restarts(path):
    """The restarts a supervisor's state file lists ([] when it cannot be read)."""
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return []
    restarts = state.get("restarts") if isinstance(state, dict) else None
    return [r for r in restarts if isinstance(r, dict)] if isinstance(restarts, list) else []


def _version(dist):
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # pylint: disable=broad-except  # a version unknown is shown as such
        return ""


class Server:
    """Rank 0's side: the HTTP front and the bounded queue the serving loop takes requests
    from, one at a time."""

    RECENT = 8  # requests whose durations estimate Retry-After

    def __init__(self, args, tokenizer, world, clock=time.monotonic):
        self.args = args
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size(args.model, tokenizer)
        self.allowed_hosts = own_names(args.host) | set(getattr(args, "allowed_host", None) or [])
        self.api_key = getattr(args, "api_key", None)  # bytes, or None: no key asked for
        self.world = world
        self.clock = clock
        self.cond = threading.Condition()
        self.jobs = collections.deque()
        self.durations = collections.deque(maxlen=self.RECENT)
        self.current = None  # the job the serving loop took last (in flight until done)
        self.created = int(time.time())
        self.progress = Progress(None, args.stall_timeout, self.depth, clock)
        self.stopping = False
        self.httpd = None
        self.ranks_memory = []  # every rank's peak memory in KiB, as of the serving loop's last turn
        self.metrics = Metrics(self)

    # -- the serving loop's side
    def next_job(self, timeout):
        """The oldest waiting request, or None after `timeout` seconds without one."""
        deadline = self.clock() + timeout
        with self.cond:
            while True:
                while self.jobs and self.jobs[0].abandoned:
                    self.jobs.popleft()
                if self.jobs:
                    self.current = self.jobs.popleft()
                    return self.current
                left = deadline - self.clock()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def finished(self, seconds, prompt_tokens=0, tokens=0):
        with self.cond:
            self.durations.append(seconds)
        self.metrics.generated(prompt_tokens, tokens, seconds)

    def fail_pending(self, message):
        with self.cond:
            jobs, self.jobs = list(self.jobs), collections.deque()
        for job in jobs:
            job.fail(ApiError(503, message, kind="server_error"))

    def depth(self):
        """Requests waiting (not the one being generated)."""
        with self.cond:
            return sum(1 for j in self.jobs if not j.abandoned)

    def abandon(self, job):
        with self.cond:
            job.abandoned = True

    # -- the HTTP side
    def models(self):
        return {"object": "list", "data": [self.model_card()]}

    def model_card(self):
        return {"id": self.args.model_id, "object": "model", "created": self.created, "owned_by": "mlx-cluster"}

    def health(self, detail=True):
        """(HTTP status, body): the serving loop's heartbeat; 503 when stalled or stopping.
        Without `detail` (a client without the API key, when one is asked for) only the status
        and why: no host, rank or request figures."""
        snap = self.progress.snapshot()
        stalled = stall_verdict(snap, self.clock())
        status = "stopping" if self.stopping else ("stalled" if stalled else "ok")
        if not detail:
            return (200 if status == "ok" else 503), {"status": status, "message": stalled}
        return (200 if status == "ok" else 503), {
            "status": status,
            "message": stalled,
            "world_size": self.world["size"],
            "ranks": self.world["ranks"],
            "model": self.args.model_id,
            "generating": snap["generating"],
            "tokens": snap["tokens"],
            "requests_done": snap["requests_done"],
            "queue_depth": snap["queue_depth"],
            "queue_size": self.args.queue_size,
            "turns": snap["turns"],
            "last_turn_at": snap["last_turn_at"],
            "last_token_at": snap["last_token_at"],
            "seconds_since_progress": round(self.clock() - snap["progress_mono"], 3),
            "stall_timeout": snap["stall_timeout"],
        }

    def check_model(self, body):
        name = body.get("model")
        if name not in (None, "", self.args.model_id, self.args.model):
            raise ApiError(
                404,
                f"model '{name}' is not served here; this server serves '{self.args.model_id}'",
                "model",
                code="model_not_found",
            )

    def retry_after(self):
        """Seconds until a place in the queue is likely free: the mean of the last requests'
        durations (1 before any), rounded up."""
        with self.cond:
            mean = sum(self.durations) / len(self.durations) if self.durations else 1.0
        return max(1, math.ceil(mean))

    def _refusal(self):
        """The 503 a request gets now (stopping, or the queue full), or None; under self.cond."""
        if self.stopping:
            return ApiError(503, "the server is stopping", kind="server_error")
        waiting = sum(1 for j in self.jobs if not j.abandoned)
        generating = self.current is not None and not self.current.done.is_set()
        if waiting + generating > self.args.queue_size:
            return ApiError(
                503,
                f"the server is busy: one request is being generated and {waiting} "
                f"wait (queue size {self.args.queue_size}); retry later",
                kind="server_error",
                code="server_busy",
                headers={"Retry-After": str(self.retry_after())},
            )
        return None

    def check_room(self):
        """Refuse at once (before the prompt is tokenized) when the request could not be queued."""
        with self.cond:
            refusal = self._refusal()
        if refusal is not None:
            raise refusal

    def submit(self, params, tokens, stream):
        with self.cond:
            refusal = self._refusal()
            if refusal is not None:
                raise refusal
            job = Job(dict(params, tokens=tokens), stream)
            self.jobs.append(job)
            self.cond.notify()
        return job


def make_handler(server):
    """The request handler class of rank 0's HTTP server, answering for `server`. http.server
    makes one handler per request from the class alone, so the class carries it (`api`)."""
    return type("Handler", (ApiHandler,), {"api": server})


class ApiHandler(BaseHTTPRequestHandler):
    """One HTTP request to rank 0: the checks every request passes (Host, Origin, Content-Type,
    the API key), the GET routes, and a completion queued then answered whole or streamed.
    `api` is the Server (make_handler sets it); `self.server` is http.server's own."""

    protocol_version = "HTTP/1.1"
    server_version = "mlx-cluster"
    timeout = SOCKET_TIMEOUT  # a client that stops sending or reading is dropped, its thread freed
    api = None

    def log_message(self, fmt, *a):
        log(f"http {self.address_string()} {fmt % a}")

    def send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0:
            raise ApiError(400, "missing or bad Content-Length")
        if n > MAX_BODY:
            self.close_connection = True  # the body is not read
            raise ApiError(413, f"the body is {n} bytes: at most {MAX_BODY}")
        try:
            body = json.loads(self.rfile.read(n) or b"null", parse_constant=refuse_constant)
        except ValueError as exc:
            raise ApiError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def do_GET(self):  # noqa: N802 - http.server's name
        server = self.api
        path = self.path.split("?", 1)[0].rstrip("/")
        refused = check_host(self.headers, server.allowed_hosts)  # a page's DNS rebinding reads no reply
        if refused is not None:
            self.send_json(refused.status, refused.body())
            return
        allowed = authorized(self.headers, server.api_key)
        if path == "/health":
            self.send_json(*server.health(detail=allowed))
        elif not allowed:
            err = unauthorized()
            self.send_json(err.status, err.body(), err.headers)
        elif path == "/metrics":
            data = server.metrics.text()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_json(*models_answer(server, path))

    def do_POST(self):  # noqa: N802
        server = self.api
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            job, chat, stream = self.queue_completion(path)
        except ApiError as err:
            server.metrics.answered(err.status, err.code)
            self.send_json(err.status, err.body(), err.headers)
            return
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        if stream:
            self.stream(job, rid, chat)
            server.metrics.answered(200 if job.error is None and job.result is not None else 500)
            return
        status, body = wait_for_completion(server, job, rid, chat)
        server.metrics.answered(status, ((body.get("error") or {}) if isinstance(body, dict) else {}).get("code"))
        self.send_json(status, body)

    def queue_completion(self, path):
        """Check a completion request and queue it: (job, chat?, stream?). Raises the ApiError to
        answer instead."""
        server = self.api
        refused = check_request_headers(self.headers, server.allowed_hosts)
        if refused is None and not authorized(self.headers, server.api_key):
            refused = unauthorized()
        if refused is not None:
            self.close_connection = True  # its body is not read
            raise refused
        if path not in ("/v1/chat/completions", "/v1/completions"):
            raise ApiError(404, f"no route {path}")
        body = self.read_body()
        server.check_model(body)
        params = sampling_params(body, server.args.max_tokens)
        chat = path == "/v1/chat/completions"
        server.check_room()  # a full queue answers 503 before the prompt is tokenized
        tokens = (
            chat_prompt(server.tokenizer, body.get("messages"))
            if chat
            else completion_prompt(server.tokenizer, body.get("prompt"), server.vocab_size)
        )
        stream = bool(body.get("stream"))
        return server.submit(params, tokens, stream), chat, stream

    def stream(self, job, rid, chat):
        """Server-sent events as the text comes; a client that goes away leaves the generation
        to run to its end (every rank is in it)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for body in stream_events(self.api, job, rid, chat, int(time.time())):
                self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log("http client went away during a stream (the generation still runs to its end)")


def models_answer(server, path):
    """(HTTP status, body) of GET /v1/models and /v1/models/<id>; 404 for any other path."""
    if path == "/v1/models":
        return 200, server.models()
    if path.startswith("/v1/models/"):
        if path[len("/v1/models/") :] == server.args.model_id:
            return 200, server.model_card()
        return 404, ApiError(404, "no such model", code="model_not_found").body()
    return 404, ApiError(404, f"no route {path}").body()


def wait_for_completion(server, job, rid, chat):
    """(HTTP status, body) of a completion answered whole: the text, the generation's error, or
    504 when it did not finish within --request-timeout."""
    if not job.done.wait(server.args.request_timeout):
        server.abandon(job)  # still queued: it leaves the queue; under way: it runs to its end
        return 504, ApiError(504, "generation did not finish in time", kind="server_error").body()
    if job.error is not None:
        return job.error.status, job.error.body()
    return 200, completion_body(server, job, rid, chat)


def completion_body(server, job, rid, chat):
    """The OpenAI body of a finished completion: chat.completion or text_completion."""
    res = job.result
    usage = {
        "prompt_tokens": len(job.request["tokens"]),
        "completion_tokens": len(res["tokens"]),
        "total_tokens": len(job.request["tokens"]) + len(res["tokens"]),
    }
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": res["text"]},
            "finish_reason": res["finish_reason"],
            "logprobs": None,
        }
    else:
        choice = {"index": 0, "text": res["text"], "finish_reason": res["finish_reason"], "logprobs": None}
    return {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": server.args.model_id,
        "choices": [choice],
        "usage": usage,
    }


def stream_events(server, job, rid, chat, created):
    """The bodies of a streamed completion's events, each as the generation hands its text out:
    the assistant's role first (chat), each piece of text, then the finish reason, or else the
    error (the generation's, or 504 when no text came within --request-timeout: the job then
    leaves the queue, or runs to its end when under way)."""
    if chat:
        yield stream_chunk(server, rid, chat, created, {"role": "assistant", "content": ""})
    deadline = time.monotonic() + server.args.request_timeout
    while True:
        try:
            piece = job.chunks.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            server.abandon(job)
            break
        if piece is None:
            break
        yield stream_chunk(server, rid, chat, created, {"content": piece})
    if job.error is None and job.result is not None:
        yield stream_chunk(server, rid, chat, created, finish=job.result["finish_reason"])
    else:
        yield (job.error or ApiError(504, "generation did not finish in time", kind="server_error")).body()


def stream_chunk(server, rid, chat, created, delta=None, finish=None):
    """One event's body: a chat.completion.chunk (a delta) or a text_completion (its text)."""
    if chat:
        choice = {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
    else:
        choice = {"index": 0, "text": (delta or {}).get("content", ""), "finish_reason": finish, "logprobs": None}
    return {
        "id": rid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": server.args.model_id,
        "choices": [choice],
    }


# --- the serving loop (every rank) ---


class Stop:
    """Set by SIGTERM/SIGINT; read at every turn of the serving loop."""

    def __init__(self):
        self.requested = False
        self.signal = None

    def __call__(self, signum, _frame):
        self.requested = True
        self.signal = signum


def serve(group, model, tokenizer, server, stop, poll, progress):
    """Turns of the loop until a stop vote. Raises RuntimeError when a collective fails.
    One request at a time: the next is taken only when the last one is generated."""
    root = group.rank() == 0
    seq, idle = 0, False
    while True:
        if not root and idle:
            time.sleep(0.9 * poll)  # rank 0 comes back no sooner than `poll` after an idle turn
        job = server.next_job(poll) if (root and not stop.requested) else None
        data = None
        if job is not None:
            try:
                data = encode_request(job.request)
            except ValueError as err:
                job.fail(ApiError(400, str(err)))
                job = None
        if job is not None:
            progress.start_request()  # in flight from here: a broadcast that hangs is a stall too
        seq += 1
        header, req = broadcast(group, data, stop.requested, seq)
        progress.turn()
        if root:
            server.ranks_memory = header.get("peak_memory_kib") or server.ranks_memory
        if header["stop_votes"] > 0:
            if job is not None:
                job.fail(ApiError(503, "the server is stopping", kind="server_error"))
                progress.end_request(completed=False)
            return header["stop_votes"]
        idle = req is None
        if req is None:
            continue
        t0 = time.perf_counter()
        if job is None:
            progress.start_request()
        completed = False
        try:
            on_text = job.chunks.put if (root and job.chunks is not None) else None
            result = generate(model, tokenizer, req, on_text, progress.token)
            completed = True
        finally:
            progress.end_request(completed)
        took = time.perf_counter() - t0
        log(
            f"request {header['seq']}: {len(req['tokens'])} prompt tokens, {len(result['tokens'])} "
            f"generated ({result['finish_reason']}) in {took:.2f}s"
        )
        if root:
            server.finished(took, len(req["tokens"]), len(result["tokens"]))
            job.result = result
            job.done.set()
            if job.chunks is not None:
                job.chunks.put(None)


def gather_ranks(group, keeper_state=""):
    """[{"rank", "host", "pid", "restarts", "stall_restarts"}] of every rank (all_gather of a
    fixed-size row); the restarts are those this rank's supervisor lists in `keeper_state`
    (its keeper<N>.json; none when there is no such file, e.g. under mlx.launch)."""
    raw = socket.gethostname().encode()[:HOSTNAME_BYTES].ljust(HOSTNAME_BYTES, b"\0")
    made = _restarts(keeper_state) if keeper_state else []
    stalled = sum(1 for r in made if "stall" in str(r.get("why", "")))
    row = mx.array([os.getpid() % (2**31), len(made), stalled] + list(raw), dtype=mx.int32)
    rows = mx.distributed.all_gather(row, group=group, stream=mx.cpu).reshape(group.size(), -1).tolist()
    return [
        {
            "rank": r,
            "host": bytes(x[3:]).rstrip(b"\0").decode(errors="replace"),
            "pid": x[0],
            "restarts": x[1],
            "stall_restarts": x[2],
        }
        for r, x in enumerate(rows)
    ]


def run(args):
    rank_guess = int(os.environ.get("MLX_RANK", "0") or 0)
    state = RankState(args.run_dir, rank_guess, args.settings_hash, args.run_id)
    try:
        return _run(args, state)
    except BaseException as err:  # noqa: BLE001 - recorded, then re-raised
        if state.data["phase"] not in ("stopped", "failed"):
            state.phase("failed", f"{type(err).__name__}: {err}")
        raise
    finally:
        state.clear_pid()


def _run(args, state):
    state.phase("init", f"joining {args.expect_world} rank(s) over {args.backend}")
    try:
        group = init_distributed(args.backend, args.expect_world, args.init_timeout, log)
    except InitError as err:
        state.phase("failed", str(err))
        return EXIT_RDMA if err.kind == "rdma" else EXIT_INIT
    rank, size = group.rank(), group.size()
    _PREFIX[0] = f"rank {rank}/{size} {socket.gethostname()}"
    if rank != state.rank:
        state.set_rank(rank)
    state.phase("loading", f"{args.model} ({args.mode} over {size} rank(s))", world_size=size)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            model, tokenizer = load_shard(Path(args.model), args.mode, group)
    except Exception as err:  # noqa: BLE001 - any loader error ends this rank, named
        state.phase("failed", f"loading {args.model} failed: {type(err).__name__}: {err}")
        return EXIT_LOAD
    # Everyone loaded; who is who (for state.json and the status view).
    ranks = gather_ranks(group, os.path.join(args.run_dir, f"keeper{rank}.json"))
    stop = Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server = Server(args, tokenizer, {"size": size, "ranks": ranks, "backend": backend_name(args.backend, size)})
    # The heartbeat starts before "ready": the supervisor watches a ready rank's progress.
    server.progress = progress = Progress(state, args.stall_timeout, server.depth if rank == 0 else None)
    progress.write(force=True)
    if rank == 0:
        try:
            server_class = BoundedHTTPServer
            if ":" in args.host:  # an IPv6 address
                server_class = type("BoundedHTTPServer6", (BoundedHTTPServer,), {"address_family": socket.AF_INET6})
            server.httpd = server_class((args.host, args.port), make_handler(server))
        except OSError as err:
            state.phase("failed", f"cannot serve HTTP on {args.host}:{args.port}: {err}")
            stop.requested = True  # the other ranks leave at the first turn
        else:
            threading.Thread(
                target=server.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True
            ).start()
            write_json_atomic(
                Path(args.run_dir) / "state.json",
                {
                    "settings_hash": args.settings_hash,
                    "run_id": args.run_id,
                    "started": state.data["started"],
                    "ready_at": time.time(),
                    "model": args.model,
                    "model_id": args.model_id,
                    "mode": args.mode,
                    "backend": backend_name(args.backend, size),
                    "endpoint": f"http://{args.host}:{args.port}/v1",
                    "ranks": ranks,
                },
            )
    if not stop.requested:
        state.phase(
            "ready", f"serving {args.model_id}" + (f" on http://{args.host}:{args.port}/v1" if rank == 0 else "")
        )
    code = 0
    try:
        with contextlib.redirect_stdout(sys.stderr):
            votes = serve(group, model, tokenizer, server, stop, args.poll_interval, progress)
        if state.data["phase"] == "failed":
            code = EXIT_BIND
        else:
            why = f"signal {stop.signal}" if stop.requested else f"a stop vote from {votes} other rank(s)"
            state.phase("stopped", f"stopped on {why}")
    except RuntimeError as err:
        state.phase("failed", f"the group broke while serving (a peer stopped or was lost): {err}")
        code = EXIT_PEER
    finally:
        if server.httpd is not None:
            server.stopping = True
            server.fail_pending("the server is stopping")
            server.httpd.shutdown()
            server.httpd.server_close()
    return code


def main(argv=None):
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
