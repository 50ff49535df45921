"""The server program for real on this machine: two local ranks over the ring backend, each
started by its own detached supervisor (mlx_server_daemon.py) with the environment
plugins/module_utils/mlx_server.launch_env gives it (what mlx.launch would set), on the tiny
qwen2 model. Queried over HTTP like any OpenAI client; stopped by PID. The supervisors restart
nothing here (--max-restarts 0) except in the watchdog test, which is about that.

Every process started here is ended by its PID in a finally block (each is its own session)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_server as ms
from tests.tinymodel import make_tiny_model

# (two real MLX ranks per test: the full suite runs it, the quick tier does not)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "roles" / "mlx_server" / "files"
SERVER = FILES / "mlx_cluster_server.py"
DAEMON = FILES / "mlx_server_daemon.py"
PROMPT = "Write a story about a fast computer"


def free_ports(n):
    """n consecutive free ports on 127.0.0.1."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65000:
            continue
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # reaped by init here, but a zombie would be "gone" too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def http(url, body=None, timeout=60):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode() if body is not None else None, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class Cluster:
    """Two local ranks of the server."""

    def __init__(self, model, run_dir, mode):
        self.model, self.run_dir, self.mode = model, Path(run_dir), mode
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.pids = []
        self.keepers = []

    def start(self, stall_timeout=0, max_restarts=0):
        ring = free_ports(2)
        hostfile = {
            "backend": "ring",
            "hosts": [{"ssh": "a", "ips": ["127.0.0.1"]}, {"ssh": "b", "ips": ["127.0.0.1"]}],
        }
        argv = ms.server_argv(
            sys.executable,
            str(SERVER),
            model=str(self.model),
            run_dir=str(self.run_dir),
            mode=self.mode,
            world=2,
            backend="ring",
            host="127.0.0.1",
            port=self.port,
            model_id="tiny",
            max_tokens=64,
            poll_interval=0.2,
            request_timeout=120,
            init_timeout=60,
            queue_size=8,
            stall_timeout=stall_timeout,
            settings_hash_value="h" * 64,
        )
        for rank in (0, 1):
            env, files = ms.launch_env(hostfile, rank, str(self.run_dir), ring, ["HF_HUB_OFFLINE=1"])
            for name, content in files.items():
                (self.run_dir / name).write_text(content)
            env_file = self.run_dir / f"rank{rank}.env.json"
            env_file.write_text(json.dumps(env))
            keeper = ms.keeper_argv(
                sys.executable,
                str(DAEMON),
                run_dir=str(self.run_dir),
                rank=rank,
                supervisor="process",
                max_restarts=max_restarts,
            )
            out = subprocess.run(
                [*keeper, "--throttle", "1", "--", *argv, "--run-id", "localtest0123456789"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            said = json.loads(out.stdout)
            self.pids.append(said["pid"])
            self.keepers.append(said["supervisor"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if http(self.url + "/v1/models", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            if not all(alive(p) for p in self.pids):
                break
            time.sleep(0.3)
        pytest.fail("the server did not come up:\n" + self.logs())

    def logs(self):
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.run_dir.glob("rank*.log")))

    def state(self, rank):
        return json.loads((self.run_dir / f"rank{rank}.json").read_text())

    def rank_pids(self):
        """The ranks' PIDs now (a supervisor's restart gives new ones); None once stopped."""
        files = [self.run_dir / f"rank{r}.pid" for r in (0, 1)]
        return [int(f.read_text()) if f.exists() else None for f in files]

    def kill(self):
        for pid in [p for p in self.keepers + self.pids + self.rank_pids() if p]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        wait_gone(self.keepers + self.pids, 10)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture(scope="module")
def reference(tiny_model):
    """Greedy text of one process (no sharding) for the chat-templated PROMPT."""
    from mlx_lm import load
    from mlx_lm.generate import generate

    model, tok = load(str(tiny_model))
    text = tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True)
    prompt = tok.encode(text, add_special_tokens=False)
    return generate(model, tok, prompt, max_tokens=24)


@pytest.fixture(scope="module")
def tensor(tiny_model, tmp_path_factory):
    c = Cluster(tiny_model, tmp_path_factory.mktemp("run-tensor"), "tensor")
    try:
        yield c.start()
    finally:
        c.kill()


def chat(c, **extra):
    status, body = http(
        c.url + "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 24,
            "temperature": 0,
            **extra,
        },
    )
    return status, json.loads(body) if body.startswith("{") else body


def test_models_and_health(tensor):
    status, body = http(tensor.url + "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["tiny"]
    status, body = http(tensor.url + "/health")
    assert status == 200 and json.loads(body)["world_size"] == 2
    state = json.loads((tensor.run_dir / "state.json").read_text())
    assert [r["rank"] for r in state["ranks"]] == [0, 1]
    assert {r["pid"] for r in state["ranks"]} == set(tensor.pids)
    assert state["settings_hash"] == "h" * 64 and state["run_id"] == "localtest0123456789"
    assert [tensor.state(r)["phase"] for r in (0, 1)] == ["ready", "ready"]
    assert [int((tensor.run_dir / f"rank{r}.pid").read_text()) for r in (0, 1)] == tensor.pids


def test_chat_completion_matches_one_process(tensor, reference):
    status, body = chat(tensor)
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["model"] == "tiny"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == reference  # two tensor-parallel ranks == one process
    assert choice["finish_reason"] in ("length", "stop")
    assert body["usage"]["completion_tokens"] <= 24
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


def test_sampling_with_a_seed_is_reproducible(tensor):
    a = chat(tensor, temperature=1.0, seed=7)[1]["choices"][0]["message"]["content"]
    b = chat(tensor, temperature=1.0, seed=7)[1]["choices"][0]["message"]["content"]
    assert a == b


def test_stop_string_cuts_the_text(tensor, reference):
    cut = reference[5:8]
    assert cut and cut in reference
    status, body = chat(tensor, stop=[cut])
    assert status == 200
    assert body["choices"][0]["message"]["content"] == reference[: reference.index(cut)]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_streaming_gives_the_same_text(tensor, reference):
    status, body = http(
        tensor.url + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "stream": True},
    )
    assert status == 200
    events = [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == reference
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_completions_endpoint(tensor):
    status, body = http(tensor.url + "/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 5})
    assert status == 200, body
    body = json.loads(body)
    assert body["object"] == "text_completion" and isinstance(body["choices"][0]["text"], str)
    assert body["usage"]["completion_tokens"] <= 5


def test_concurrent_requests_are_served_in_turn(tensor, reference):
    results = []

    def one():
        results.append(chat(tensor))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r[0] for r in results] == [200, 200, 200]
    assert {r[1]["choices"][0]["message"]["content"] for r in results} == {reference}


@pytest.mark.parametrize(
    "body, status",
    [
        ({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}, 404),
        ({"messages": "x"}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "n": 3}, 400),
    ],
)
def test_bad_requests_get_openai_style_errors(tensor, body, status):
    got, text = http(tensor.url + "/v1/chat/completions", body)
    assert got == status
    assert set(json.loads(text)["error"]) >= {"message", "type", "param", "code"}


def raw(url, body, headers):
    """A POST with exactly these headers (urllib adds Host and Content-Length only)."""
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_what_a_web_page_or_a_bad_body_sends_is_refused_and_the_server_serves_on(tensor):
    """#33: the checks before anything reaches the ranks. A page's POST (text/plain, or with an
    Origin), a rebound name in Host, an id past the vocabulary (once: every rank raised and the
    group went down), NaN, and a body over 8 MiB are refused; the group then still answers."""
    url = tensor.url + "/v1/completions"
    json_type = {"Content-Type": "application/json"}
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}).encode()
    assert raw(url, body, {"Content-Type": "text/plain"})[0] == 415
    assert raw(url, body, {**json_type, "Origin": "https://evil.example"})[0] == 403
    assert raw(url, body, {**json_type, "Host": "rebound.evil.example"})[0] == 403
    status, text = raw(url, json.dumps({"prompt": [2**70], "max_tokens": 2}).encode(), json_type)
    assert status == 400 and "outside the model's vocabulary" in text, text
    assert raw(url, b'{"prompt": "x", "max_tokens": NaN}', json_type)[0] == 400
    assert raw(url, b'{"prompt": "x", "max_tokens": 1e999}', json_type)[0] == 400  # Infinity by another name
    host, port = tensor.url.split("//", 1)[1].split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    conn.sendall(
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {9 * 1024 * 1024}\r\n\r\n".encode()
    )
    assert conn.makefile("rb").readline().split()[1] == b"413"  # answered before any of the body is read
    conn.close()
    status, text = http(url, {"prompt": "The quick brown fox", "max_tokens": 2})
    assert status == 200, text


def test_unknown_route_is_404(tensor):
    assert http(tensor.url + "/v1/embeddings", {"input": "x"})[0] == 404
    assert http(tensor.url + "/nope")[0] == 404


def test_sigterm_to_any_rank_stops_every_rank(tiny_model, tmp_path, reference):
    """Pipeline mode this time; SIGTERM goes to rank 1 only: its stop vote ends both."""
    c = Cluster(tiny_model, tmp_path / "run", "pipeline")
    try:
        c.start()
        status, body = chat(c)
        assert status == 200 and body["choices"][0]["message"]["content"] == reference
        os.kill(c.pids[1], signal.SIGTERM)
        assert wait_gone(c.pids, 20) == [], c.logs()
        assert [c.state(r)["phase"] for r in (0, 1)] == ["stopped", "stopped"]
        assert not list(c.run_dir.glob("rank*.pid"))  # a clean exit removes its PID file
    finally:
        c.kill()


def test_a_lost_peer_ends_the_other_ranks(tiny_model, tmp_path):
    """SIGKILL (no goodbye) on rank 1: rank 0 notices at its next turn and exits too, so a
    supervisor (launchd KeepAlive) can start the whole group again."""
    c = Cluster(tiny_model, tmp_path / "run", "tensor")
    try:
        c.start()
        os.kill(c.pids[1], signal.SIGKILL)
        assert wait_gone(c.pids[:1], 30) == [], c.logs()
        assert c.state(0)["phase"] == "failed"
        assert "group broke" in c.state(0)["message"]
    finally:
        c.kill()


def test_a_stalled_rank_makes_the_supervisors_restart_every_rank(tiny_model, tmp_path, reference):
    """The watchdog for real: rank 1 is frozen (SIGSTOP: it cannot act on any signal) while a
    request is under way, so no token comes. After the stall bound (5 s) its supervisor kills it
    and rank 0 goes down too (its collective fails, or its own supervisor finds it stalled); both
    supervisors start their rank again and the group serves again, the same text as before."""
    c = Cluster(tiny_model, tmp_path / "run", "tensor")
    try:
        c.start(stall_timeout=5, max_restarts=2)
        before = c.rank_pids()
        os.kill(before[1], signal.SIGSTOP)
        stuck = {}
        asker = threading.Thread(target=lambda: stuck.update(r=_try(lambda: chat(c))), daemon=True)
        asker.start()
        # the request leaves the queue for rank 0's turn (at once, or later on a busy machine);
        # on a busy machine the stall bound can also pass first, and rank 0 is already down for
        # the restart: then the supervisors' reasons, below, say why each rank stalled
        health, down, wait_until = {}, None, time.monotonic() + 15
        while time.monotonic() < wait_until and not health.get("generating"):
            time.sleep(0.2)
            got = _try(lambda: http(c.url + "/health", timeout=5))
            if isinstance(got, Exception):
                down = got
                break
            health = json.loads(got[1])
        if down is None:
            assert (health["generating"], health["tokens"], health["queue_depth"]) == (True, 0, 0)  # in flight
        t0 = time.monotonic()
        deadline = t0 + 90
        back = False
        while time.monotonic() < deadline and not back:
            time.sleep(0.5)
            now = c.rank_pids()
            if all(now) and all(n != b for n, b in zip(now, before)) and all(alive(p) for p in now):
                back = _try(lambda: http(c.url + "/v1/models", timeout=2)[0]) == 200
        assert back, c.logs()
        took = time.monotonic() - t0
        assert wait_gone(before, 10) == [], c.logs()  # the frozen rank was killed, not left behind
        keepers = [json.loads((c.run_dir / f"keeper{r}.json").read_text()) for r in (0, 1)]
        assert [k["state"] for k in keepers] == ["running", "running"]
        assert all(len(k["restarts"]) == 1 for k in keepers)
        # rank 1 was frozen between requests: for it the loop stalled idle. Rank 0 took the
        # request when /health showed it in flight, so for it a generation stalled (or its
        # collective failed first: exit 7). When rank 0 was down before /health showed it, its
        # next turn after the freeze may have been an idle one, stuck waiting for rank 1: then
        # its loop stalled idle too
        assert keepers[1]["restarts"][0]["why"].startswith("serving loop stalled: no turn for")
        rank0_why = ("generation stalled: no token for", "exit code 7")
        if down is not None:
            rank0_why += ("serving loop stalled: no turn for",)
        assert keepers[0]["restarts"][0]["why"].startswith(rank0_why), (down, keepers[0])
        assert all(alive(k) for k in c.keepers)  # the same supervisors, new ranks
        status, body = chat(c)
        assert status == 200 and body["choices"][0]["message"]["content"] == reference
        asker.join(5)
        print(f"stall to serving again: {took:.1f}s; rank 0 ended by: {keepers[0]['restarts'][0]['why']}")
    finally:
        c.kill()


def _try(fn):
    try:
        return fn()
    except (OSError, ValueError) as exc:
        return exc
