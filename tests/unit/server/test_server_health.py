"""roles/mlx_server/files/mlx_cluster_server.py without MLX distributed: rank 0's HTTP front and
its serving loop `serve()` with a one-rank stand-in group, the broadcast reduced to its pure
rows (what a one-rank all_sum gives) and a fake `generate` that blocks until released, so the
queue can be filled at will. Checks: requests reach the ranks one at a time and in order, at
most --queue-size wait, the next gets 503 with an OpenAI-style body and Retry-After, a request
whose client gave up leaves the queue; the heartbeat (progress) and /health on a fake clock.

The stall rule exists three times (the server's /health, the supervisor that acts on it, the
status module): one table holds all three to the same verdicts."""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.programs import load_program


@pytest.fixture(scope="module")
def srv():
    return load_program("mlx_server", "mlx_cluster_server.py")


class OneRank:
    def rank(self):
        return 0

    def size(self):
        return 1


class FakeGenerate:
    """Counts how many generations run at once and in which order; each waits for `gate`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = self.most = 0
        self.order = []
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, model, tokenizer, req, on_text=None, on_token=None):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.order.append(req["tokens"][0])
        self.entered.set()
        try:
            assert self.gate.wait(30)
            for _ in range(3):
                on_token()
                time.sleep(0.01)
            if on_text is not None:
                on_text("abc")
            return {"text": "abc", "tokens": [5, 6, 7], "finish_reason": "length"}
        finally:
            with self.lock:
                self.active -= 1


def args(**kw):
    base = dict(
        model="/models/tiny",
        model_id="tiny",
        host="127.0.0.1",
        max_tokens=64,
        request_timeout=30.0,
        queue_size=2,
        stall_timeout=0.0,
        poll_interval=0.05,
    )
    return argparse.Namespace(**{**base, **kw})


class Rig:
    """serve() in a thread, rank 0's HTTP server on a free loopback port."""

    def __init__(self, srv, monkeypatch, **kw):
        self.srv = srv
        self.gen = FakeGenerate()
        monkeypatch.setattr(srv, "generate", self.gen)

        def broadcast(group, data, stop, seq):  # what a one-rank all_sum returns
            kind = srv.KIND_GENERATE if data is not None else srv.KIND_IDLE
            header = srv.read_header(srv.header_row(True, kind, len(data or b""), stop, seq))
            return header, (srv.decode_request(data) if data is not None else None)

        monkeypatch.setattr(srv, "broadcast", broadcast)
        self.server = srv.Server(args(**kw), None, {"size": 1, "ranks": [{"rank": 0, "host": "m1", "pid": 1}]})
        self.stop = srv.Stop()
        # the product's server class (daemon handler threads, at most MAX_CONNECTIONS, its errors)
        self.httpd = srv.BoundedHTTPServer(("127.0.0.1", 0), srv.make_handler(self.server))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.threads = [
            threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True),
            threading.Thread(target=self.loop, daemon=True),
        ]
        self.votes = None
        for t in self.threads:
            t.start()

    def loop(self):
        self.votes = srv_serve(self.srv, self.server, self.stop)

    def close(self):
        self.gen.gate.set()
        self.stop.requested = True
        self.threads[1].join(10)
        self.httpd.shutdown()
        # the handler threads are daemon threads, which server_close does not wait for: each
        # holds a slot until it returns, so taking every slot waits for them (bounded), and no
        # handler of this test outlives it into the next one's monkeypatched module
        deadline = time.monotonic() + 10
        taken = 0
        while taken < self.srv.MAX_CONNECTIONS and self.httpd.slots.acquire(
            timeout=max(0.0, deadline - time.monotonic())
        ):
            taken += 1
        for _ in range(taken):
            self.httpd.slots.release()
        self.httpd.server_close()

    def ask(self, token, results=None, **extra):
        """POST one completion whose prompt is [token]; with `results`, in a thread."""

        def one():
            got = http(self.url + "/v1/completions", {"prompt": [token], "max_tokens": 3, **extra})
            if results is not None:
                results[token] = got
            return got

        if results is None:
            return one()
        t = threading.Thread(target=one, daemon=True)
        t.start()
        return t


def srv_serve(srv, server, stop):
    return srv.serve(OneRank(), None, None, server, stop, server.args.poll_interval, server.progress)


def http(url, body=None, timeout=30, headers=None):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def wait_for(cond, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def rig(srv, monkeypatch, request):
    r = Rig(srv, monkeypatch, **getattr(request, "param", {}))
    yield r
    r.close()


def test_one_request_at_a_time_a_bounded_queue_then_503_with_retry_after(rig):
    results = {}
    first = rig.ask(1, results)
    assert rig.gen.entered.wait(10)
    waiting = []
    for n, t in enumerate((2, 3), 1):  # one after the other: the order of arrival is known
        waiting.append(rig.ask(t, results))
        assert wait_for(lambda: rig.server.depth() == n)  # noqa: B023 - called in this iteration

    status, headers, body = rig.ask(4)  # one generating, two waiting: the queue (2) is full
    assert status == 503
    assert body["error"]["type"] == "server_error" and body["error"]["code"] == "server_busy"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "2 wait (queue size 2)" in body["error"]["message"]
    assert headers["Retry-After"] == "1"  # no request finished yet: 1 s

    health = http(rig.url + "/health")[2]
    assert (health["generating"], health["queue_depth"], health["queue_size"]) == (True, 2, 2)

    rig.gen.gate.set()
    for t in [first, *waiting]:
        t.join(20)
    assert [results[t][0] for t in (1, 2, 3)] == [200, 200, 200]
    assert rig.gen.order == [1, 2, 3]  # in order of arrival
    assert rig.gen.most == 1  # never two generations at once
    assert 4 not in rig.gen.order  # the refused one never reached the ranks
    health = http(rig.url + "/health")[2]
    assert (health["requests_done"], health["queue_depth"], health["generating"]) == (3, 0, False)


def test_many_concurrent_clients_are_served_one_at_a_time(rig):
    rig.gen.gate.set()
    results = {}
    threads = [rig.ask(t, results) for t in range(1, 13)]
    for t in threads:
        t.join(30)
    codes = [results[t][0] for t in range(1, 13)]
    assert set(codes) <= {200, 503} and codes.count(200) >= 3
    assert rig.gen.most == 1
    assert sorted(rig.gen.order) == [t for t in range(1, 13) if results[t][0] == 200]
    busy = [results[t] for t in range(1, 13) if results[t][0] == 503]
    assert all(b[2]["error"]["code"] == "server_busy" and int(b[1]["Retry-After"]) >= 1 for b in busy)


@pytest.mark.parametrize("rig", [{"queue_size": 0}], indirect=True)
def test_queue_size_zero_serves_only_the_one_under_way(rig):
    results = {}
    first = rig.ask(1, results)
    assert rig.gen.entered.wait(10)
    assert rig.ask(2)[0] == 503
    rig.gen.gate.set()
    first.join(20)
    assert results[1][0] == 200 and rig.gen.order == [1]


@pytest.mark.parametrize("rig", [{"request_timeout": 0.5}], indirect=True)
def test_a_request_whose_client_gave_up_leaves_the_queue(rig):
    results = {}
    first = rig.ask(1, results)
    assert rig.gen.entered.wait(10)
    second = rig.ask(2, results)
    second.join(10)
    assert results[2][0] == 504
    assert rig.server.depth() == 0  # no longer counted against the queue
    rig.gen.gate.set()
    first.join(10)
    rig.ask(3)
    assert rig.gen.order == [1, 3]  # 2 was never generated for nobody


def test_retry_after_follows_the_last_requests(srv):
    server = srv.Server(args(), None, {"size": 1, "ranks": []})
    assert server.retry_after() == 1
    for seconds in (2.0, 4.0, 6.5):
        server.finished(seconds)
    assert server.retry_after() == 5  # ceil(mean 4.17)


def test_streaming_client_gets_the_text(rig):
    rig.gen.gate.set()
    req = urllib.request.Request(
        rig.url + "/v1/completions",
        data=json.dumps({"prompt": [9], "max_tokens": 3, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[0])["choices"][0]["text"] == "abc"


# (path, POST body or None for a GET, status, words in the answer)
ROUTES = [
    pytest.param("/v1/models", None, 200, '"id": "tiny"', id="models"),
    pytest.param("/v1/models/tiny/?x=1", None, 200, '"object": "model"', id="model-card"),
    pytest.param("/v1/models/other", None, 404, "model_not_found", id="no-such-model"),
    pytest.param("/v1/embeddings", None, 404, "no route /v1/embeddings", id="get-no-route"),
    pytest.param("/v1/embeddings", {"input": "x"}, 404, "no route /v1/embeddings", id="post-no-route"),
    pytest.param("/v1/completions", {"prompt": [1], "model": "gpt-4"}, 404, "model_not_found", id="other-model"),
    pytest.param("/v1/completions", [1, 2], 400, "the body must be a JSON object", id="not-an-object"),
    pytest.param("/v1/chat/completions", {"messages": "x"}, 400, "'messages' must be", id="bad-messages"),
    # a prompt the ranks refuse (encode_request): the serving loop hands its error back
    pytest.param(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "EMPTY"}]}, 400, "token ids", id="no-tokens"
    ),
]


@pytest.mark.parametrize("path, body, status, words", ROUTES)
def test_each_route_answers_with_its_status(rig, path, body, status, words):
    rig.server.tokenizer = FakeTokenizer()
    rig.gen.gate.set()
    got, _, answer = http(rig.url + path, body)
    assert got == status and words in json.dumps(answer), answer
    assert rig.gen.order == []


class FakeTokenizer:
    has_chat_template = False

    def encode(self, text, add_special_tokens=True):
        return [] if "EMPTY" in text else [len(text)]


def test_a_chat_completion_answers_whole_and_streamed(rig):
    rig.server.tokenizer = FakeTokenizer()
    rig.gen.gate.set()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    status, _, body = http(rig.url + "/v1/chat/completions", chat)
    assert status == 200 and body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "abc"}, "finish_reason": "length", "logprobs": None}
    ]
    assert body["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    req = urllib.request.Request(
        rig.url + "/v1/chat/completions",
        data=json.dumps(dict(chat, stream=True)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        events = [line[6:] for line in resp.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    deltas = [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks]
    assert deltas == [({"role": "assistant", "content": ""}, None), ({"content": "abc"}, None), ({}, "length")]


@pytest.mark.parametrize("length, status", [("abc", 400), (str(9 * 1024 * 1024), 413)], ids=["bad", "too-large"])
def test_a_bad_or_too_large_content_length_is_refused_before_the_body_is_read(rig, length, status):
    host, port = rig.url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        assert conn.makefile("rb").readline().split()[1] == str(status).encode()


# ---- the heartbeat and the stall rule, on a fake clock ------------------------------------


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class FakeState:
    def __init__(self):
        self.data, self.saves = {}, []

    def save(self):
        self.saves.append(json.loads(json.dumps(self.data)))


def test_progress_is_written_at_most_once_a_second_and_at_each_request_edge(srv):
    clock, state = Clock(), FakeState()
    p = srv.Progress(state, 60.0, depth=lambda: 4, clock=clock, wall=lambda: 1.7e9 + clock.t)
    p.write(force=True)
    for _ in range(5):
        clock.t += 0.1
        p.turn()
    assert len(state.saves) == 1  # the five turns fell within a second of the first write
    clock.t += 1.0
    p.turn()
    assert len(state.saves) == 2 and state.saves[-1]["progress"]["turns"] == 6
    p.start_request()
    assert len(state.saves) == 3 and state.saves[-1]["progress"]["generating"] is True
    for _ in range(7):
        clock.t += 0.2
        p.token()
    p.end_request()
    last = state.saves[-1]["progress"]
    assert (last["generating"], last["tokens"], last["requests_done"], last["queue_depth"]) == (False, 7, 1, 4)
    assert last["progress_mono"] == clock.t and last["last_token_at"] == pytest.approx(1.7e9 + clock.t - 0.0, abs=0.5)
    assert last["stall_timeout"] == 60.0 and state.saves[-1]["updated"] == 1.7e9 + clock.t


def test_health_reports_progress_and_turns_503_when_the_loop_stalls(srv):
    clock = Clock()
    server = srv.Server(args(stall_timeout=30.0), None, {"size": 2, "ranks": []}, clock=clock)
    server.progress = srv.Progress(None, 30.0, server.depth, clock=clock)
    server.progress.turn()
    clock.t += 29
    code, body = server.health()
    assert (code, body["status"], body["message"]) == (200, "ok", "")
    assert body["seconds_since_progress"] == 29 and body["world_size"] == 2
    clock.t += 2
    code, body = server.health()
    assert (code, body["status"]) == (503, "stalled")
    assert body["message"].startswith("serving loop stalled: no turn for 31s (bound 30s) while idle")
    server.progress.start_request()
    server.progress.token()
    assert server.health()[0] == 200
    clock.t += 45
    code, body = server.health()
    assert code == 503 and "generation stalled: no token for 45s" in body["message"]
    assert "1 token(s) so far" in body["message"] and body["generating"] is True
    server.stopping = True
    assert server.health()[1]["status"] == "stopping"


def test_no_stall_bound_means_never_stalled(srv):
    clock = Clock()
    server = srv.Server(args(stall_timeout=0.0), None, {"size": 1, "ranks": []}, clock=clock)
    server.progress = srv.Progress(None, 0.0, server.depth, clock=clock)
    clock.t += 1e6
    assert server.health()[0] == 200


@pytest.mark.parametrize(
    "argv, ok",
    [
        (["--stall-timeout", "0"], True),
        (["--stall-timeout", "5"], True),
        (["--stall-timeout", "4.9"], False),
        (["--stall-timeout", "8", "--poll-interval", "2.5"], False),
        (["--queue-size", "-1"], False),
        (["--queue-size", "0"], True),
    ],
    ids=["off", "5s", "too-short", "shorter-than-4-polls", "negative-queue", "no-queue"],
)
def test_arguments_bound_the_stall_timeout_and_queue(srv, tmp_path, argv, ok):
    (tmp_path / "config.json").write_text("{}")
    base = ["--model", str(tmp_path), "--run-dir", str(tmp_path / "run")]
    if ok:
        srv.parse_args(base + argv)
    else:
        with pytest.raises(SystemExit):
            srv.parse_args(base + argv)


def test_a_bare_command_line_gets_the_defaults(srv, tmp_path):
    model = tmp_path / "qwen"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert vars(srv.parse_args(["--model", str(model), "--run-dir", "r"])) == {
        "model": str(model),
        "run_dir": "r",
        "mode": "tensor",
        "expect_world": 1,
        "init_timeout": 120.0,
        "backend": "any",
        "host": "127.0.0.1",
        "port": 8080,
        "model_id": "qwen",  # the directory's name
        "max_tokens": 2048,
        "poll_interval": 0.5,
        "request_timeout": 600.0,
        "queue_size": 8,
        "stall_timeout": 120.0,
        "allowed_host": [],
        "api_key_file": "",
        "api_key": None,
        "settings_hash": "",
        "run_id": "",
    }


BOUNDS = "--expect-world and --max-tokens must be >= 1, --init-timeout and --poll-interval > 0, --port in 1..65535"


@pytest.mark.parametrize(
    "argv, words",
    [
        pytest.param(["--expect-world", "0"], BOUNDS, id="no-ranks"),
        pytest.param(["--init-timeout", "0"], BOUNDS, id="no-init-time"),
        pytest.param(["--max-tokens", "0"], BOUNDS, id="no-tokens"),
        pytest.param(["--poll-interval", "0"], BOUNDS, id="no-poll-interval"),
        pytest.param(["--port", "0"], BOUNDS, id="port-0"),
        pytest.param(["--port", "65536"], BOUNDS, id="port-65536"),
        pytest.param(["--mode", "data"], "argument --mode: invalid choice: 'data'", id="mode"),
        pytest.param(["--backend", "tcp"], "argument --backend: invalid choice: 'tcp'", id="backend"),
        pytest.param(["--model", "/nonexistent"], "--model /nonexistent: not a local model directory", id="model"),
    ],
)
def test_other_bad_arguments_are_usage_errors(srv, tmp_path, capsys, argv, words):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        srv.parse_args(["--model", str(tmp_path), "--run-dir", "r"] + argv)
    assert exc.value.code == 2 and words in capsys.readouterr().err


# (progress, seconds since its last progress) -> stalled?  The same for every copy of the rule.
STALL_TABLE = [
    ({"stall_timeout": 60, "generating": True, "tokens": 3}, 59.0, False),
    ({"stall_timeout": 60, "generating": True, "tokens": 3}, 61.0, True),
    ({"stall_timeout": 60, "generating": False}, 61.0, True),
    ({"stall_timeout": 0, "generating": True}, 1e6, False),
    ({"stall_timeout": None, "generating": True}, 1e6, False),
]


@pytest.fixture(scope="module")
def stall_rules(srv):
    """The three copies of the rule: rank 0's /health, the supervisor that acts on it, the
    status module (the first two stand alone on the Macs and cannot import the third)."""
    from ansible_collections.mlx.cluster.plugins.module_utils import mlx_server as ms

    dmn = load_program("mlx_server", "mlx_server_daemon.py")
    return {"server": srv.stall_verdict, "supervisor": dmn.stall_verdict, "status": ms.stall_verdict}


@pytest.mark.parametrize("progress, idle, stalled", STALL_TABLE)
def test_every_copy_of_the_stall_rule_agrees(stall_rules, progress, idle, stalled):
    verdicts = {name: rule({**progress, "progress_mono": 100.0}, 100.0 + idle) for name, rule in stall_rules.items()}
    assert {name: bool(v) for name, v in verdicts.items()} == dict.fromkeys(stall_rules, stalled)
    assert len(set(verdicts.values())) == 1, verdicts  # and they say it in the same words


@pytest.mark.parametrize("rig", [{"api_key": b"s3cret-key"}], indirect=True)
def test_with_an_api_key_only_clients_that_send_it_are_served(rig):
    """Without the key: 401 on every route but /health, which says only whether it is healthy;
    with it, the same as a server without a key."""
    status, headers, body = http(rig.url + "/v1/completions", {"prompt": [1], "max_tokens": 3})
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer") and rig.gen.order == []
    assert body["error"]["type"] == "authentication_error"
    assert http(rig.url + "/v1/models")[0] == 401
    status, _, body = http(rig.url + "/health")
    assert status == 200 and body == {"status": "ok", "message": ""}  # no hosts, ranks or figures
    keyed = {"Authorization": "Bearer s3cret-key"}
    rig.gen.gate.set()
    status, _, body = http(rig.url + "/v1/completions", {"prompt": [1], "max_tokens": 3}, headers=keyed)
    assert status == 200 and body["choices"][0]["text"] == "abc"
    status, _, body = http(rig.url + "/health", headers=keyed)
    assert status == 200 and body["ranks"] == [{"rank": 0, "host": "m1", "pid": 1}]


def test_metrics_show_every_ranks_restarts_gathered_at_the_start_and_name_the_model(srv, tmp_path):
    """Each rank reads its supervisor's restarts (and those for a stall) from its state file at
    the group's start (gather_ranks, here a group of one); rank 0 exports every rank's, labelled
    with rank and host; the info metric names the model, backend and world size."""
    import mlx.core as mx
    from prometheus_client.parser import text_string_to_metric_families

    keeper = tmp_path / "keeper0.json"
    keeper.write_text(
        json.dumps(
            {"restarts": [{"at": 1, "why": "serving loop stalled: no turn for 12s"}, {"at": 2, "why": "exit 7"}]}
        )
    )
    (me,) = srv.gather_ranks(mx.distributed.init(), str(keeper))
    assert (me["rank"], me["restarts"], me["stall_restarts"], me["pid"]) == (0, 2, 1, os.getpid())
    assert srv.gather_ranks(mx.distributed.init(), str(tmp_path / "none.json"))[0]["restarts"] == 0
    other = {"rank": 1, "host": "m2", "pid": 9, "restarts": 1, "stall_restarts": 1}
    server = srv.Server(args(), None, {"size": 2, "ranks": [me, other], "backend": "ring"})
    before = [  # no turn yet: rank 0's alone
        s.labels
        for f in text_string_to_metric_families(server.metrics.text().decode())
        for s in f.samples
        if s.name == "mlx_cluster_server_rank_peak_memory_bytes"
    ]
    assert before == [{"rank": "0", "host": me["host"]}]
    # the serving loop's last turn: every rank's peak memory, from the header (KiB)
    server.ranks_memory = srv.read_header([0, 0, 0, 3, 1500, 2700])["peak_memory_kib"]
    text = server.metrics.text().decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert got[("mlx_cluster_server_supervisor_restarts", (("host", me["host"]), ("rank", "0")))] == 2
    assert got[("mlx_cluster_server_stall_restarts", (("host", me["host"]), ("rank", "0")))] == 1
    assert got[("mlx_cluster_server_stall_restarts", (("host", "m2"), ("rank", "1")))] == 1
    assert got[("mlx_cluster_server_rank_peak_memory_bytes", (("host", "m2"), ("rank", "1")))] == 2700 * 2**10
    # rank 0's own, read at the scrape (not the header's, a turn old)
    assert (
        got[("mlx_cluster_server_rank_peak_memory_bytes", (("host", me["host"]), ("rank", "0")))]
        == mx.get_peak_memory()
    )
    (info,) = [dict(k[1]) for k in got if k[0] == "mlx_cluster_server_info"]
    assert (info["model"], info["backend"], info["world_size"]) == ("tiny", "ring", "2") and info["mlx"]


@pytest.mark.parametrize("rig", [{"queue_size": 0}], indirect=True)
def test_the_outcomes_a_running_server_counts(rig):
    from prometheus_client.parser import text_string_to_metric_families

    results = {}
    first = rig.ask(1, results)
    assert rig.gen.entered.wait(10)
    assert rig.ask(2)[0] == 503
    assert http(rig.url + "/v1/completions", {"prompt": [1], "max_tokens": -1})[0] == 400
    rig.gen.gate.set()
    first.join(10)
    assert wait_for(lambda: 1 in results)
    with urllib.request.urlopen(rig.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    got = {(s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert got[("mlx_cluster_server_requests_total", (("outcome", "ok"),))] == 1
    assert got[("mlx_cluster_server_requests_total", (("outcome", "queue_full"),))] == 1
    assert got[("mlx_cluster_server_requests_total", (("outcome", "refused"),))] == 1
    assert got[("mlx_cluster_server_requests_total", (("outcome", "error"),))] == 0
    assert got[("mlx_cluster_server_generated_tokens_total", ())] == 3
    assert got[("mlx_cluster_server_generation_seconds_count", ())] == 1


def test_a_stopping_servers_503_counts_as_an_error_not_a_full_queue(rig):
    from prometheus_client.parser import text_string_to_metric_families

    rig.server.stopping = True
    status, _, body = http(rig.url + "/v1/completions", {"prompt": [1], "max_tokens": 1})
    assert status == 503 and "stopping" in body["error"]["message"]
    rig.server.stopping = False
    with urllib.request.urlopen(rig.url + "/metrics", timeout=10) as resp:
        got = {
            (s.name, tuple(s.labels.items())): s.value
            for f in text_string_to_metric_families(resp.read().decode())
            for s in f.samples
        }
    assert got[("mlx_cluster_server_requests_total", (("outcome", "queue_full"),))] == 0
    assert got[("mlx_cluster_server_requests_total", (("outcome", "error"),))] == 1


def test_a_client_that_resets_its_connection_is_one_line_in_the_log(rig, capsys):
    """socketserver prints a traceback between dashes for a handler that raises; rank 0's log
    (a server that runs for days) gets one line naming the client for a connection that ended."""
    with socket.create_connection(rig.httpd.server_address, timeout=10) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 500\r\n\r\n{"prompt"'
        )
        time.sleep(0.2)  # the handler is reading the body
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
    said = []
    assert wait_for(lambda: said.append(capsys.readouterr().err) or "ended early" in "".join(said)), said
    err = "".join(said)
    assert "http 127.0.0.1: the connection ended early (ConnectionResetError" in err, err
    assert "Traceback" not in err and "Exception occurred" not in err, err


def test_any_other_handler_error_keeps_its_traceback_in_the_log(rig, capsys):
    try:
        raise KeyError("unexpected")
    except KeyError:
        rig.httpd.handle_error(None, ("192.0.2.7", 5000))
    err = capsys.readouterr().err
    assert "http 192.0.2.7: the request failed:" in err and "KeyError: 'unexpected'" in err, err
