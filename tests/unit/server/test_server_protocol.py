"""The pure parts of roles/mlx_server/files/mlx_cluster_server.py: the request broadcast
(header and payload rows every rank contributes to the all_sum), request checking and
prompt building. Collectives are simulated by summing the rows."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.programs import load_program, program_path

ROOT = Path(__file__).resolve().parents[3]
SERVER = ROOT / "roles" / "mlx_server" / "files" / "mlx_cluster_server.py"
BENCH = ROOT / "roles" / "benchmark" / "files" / "mlx_cluster_bench.py"


@pytest.fixture(scope="module")
def srv():
    return load_program("mlx_server", SERVER.name)


REQ = {"tokens": [1, 2, 300, 7], "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 42, "stop": ["\n\n", "é"]}


def all_sum(rows):
    return [sum(col) for col in zip(*rows)]


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize("stoppers", [(), (1,), (0, 2)])
def test_a_broadcast_turn_gives_every_rank_rank0s_request_and_the_stop_votes(srv, world, stoppers):
    stoppers = [r for r in stoppers if r < world]
    data = srv.encode_request(REQ)
    header = srv.read_header(
        all_sum(
            [
                srv.header_row(
                    r == 0,
                    srv.KIND_GENERATE if r == 0 else srv.KIND_IDLE,
                    len(data) if r == 0 else 0,
                    r in stoppers,
                    9 if r == 0 else 0,
                )
                for r in range(world)
            ]
        )
    )
    assert header == {"kind": srv.KIND_GENERATE, "length": len(data), "stop_votes": len(stoppers), "seq": 9}
    payload = all_sum([srv.payload_row(r == 0, data if r == 0 else None, header["length"]) for r in range(world)])
    assert all(0 <= b < 256 for b in payload)  # no overflow: one rank contributes, the rest add 0
    assert srv.decode_request(bytes(payload)) == REQ


@pytest.mark.parametrize("world", [1, 2, 5])
def test_each_turn_carries_every_ranks_peak_memory(srv, world):
    """Each rank fills its own slot of the header; the sum gives rank 0 every rank's."""
    mib = [1000 + 37 * r for r in range(world)]
    header = srv.read_header(
        all_sum([srv.header_row(r == 0, seq=4 if r == 0 else 0, memory=(r, world, mib[r])) for r in range(world)])
    )
    assert header == {"kind": srv.KIND_IDLE, "length": 0, "stop_votes": 0, "seq": 4, "peak_memory_kib": mib}
    assert srv.header_row(False, memory=(1, 3, 77)) == [0, 0, 0, 0, 0, 77, 0]


def test_an_idle_turn_carries_no_payload(srv):
    header = srv.read_header(all_sum([srv.header_row(True), srv.header_row(False)]))
    assert header == {"kind": srv.KIND_IDLE, "length": 0, "stop_votes": 0, "seq": 0}


def test_workers_never_contribute_a_kind_or_length(srv):
    assert srv.header_row(False, srv.KIND_GENERATE, 99, True, 5) == [0, 0, 1, 0]


def test_encoding_is_canonical_json(srv):
    data = srv.encode_request(dict(reversed(list(REQ.items())), extra="ignored"))
    assert data == json.dumps({k: REQ[k] for k in srv.REQUEST_KEYS}, sort_keys=True, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "bad, match",
    [
        ({**REQ, "tokens": []}, "non-empty"),
        ({**REQ, "tokens": [1, -2]}, "token ids"),
        ({k: v for k, v in REQ.items() if k != "seed"}, "lacks seed"),
    ],
)
def test_bad_requests_are_refused_before_the_broadcast(srv, bad, match):
    with pytest.raises(ValueError, match=match):
        srv.encode_request(bad)


@pytest.mark.parametrize("summed", [[7, 0, 0, 1], [1, -1, 0, 1], [0, 2**30, 0, 0], [0, 0, 0, 1, 5, -3]])
def test_a_corrupt_header_is_an_error_not_a_hang(srv, summed):
    with pytest.raises(RuntimeError, match="out of step"):
        srv.read_header(summed)


def test_sampling_params_defaults_and_limits(srv):
    p = srv.sampling_params({"seed": 5}, 128)
    assert p == {"max_tokens": 128, "temperature": 0.0, "top_p": 1.0, "seed": 5, "stop": []}
    p = srv.sampling_params({"max_completion_tokens": 3, "temperature": 1, "stop": "END", "seed": -1}, 128)
    assert (p["max_tokens"], p["temperature"], p["stop"], p["seed"]) == (3, 1.0, ["END"], 2**31 - 1)
    assert 0 <= srv.sampling_params({}, 8)["seed"] < 2**31  # a fresh seed, shared by every rank


@pytest.mark.parametrize(
    "body, param",
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 129}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"n": 2}, "n"),
        ({"stop": [1]}, "stop"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"max_tokens": True}, "max_tokens"),
    ],
)
def test_sampling_params_refuse_bad_values_naming_the_field(srv, body, param):
    with pytest.raises(srv.ApiError) as err:
        srv.sampling_params(body, 128)
    assert err.value.status == 400 and err.value.param == param
    assert err.value.body()["error"]["param"] == param


def test_message_text(srv):
    assert srv.message_text("hi") == "hi"
    assert srv.message_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    assert srv.message_text(None) == ""
    with pytest.raises(srv.ApiError, match="only text"):
        srv.message_text([{"type": "image_url", "image_url": {}}])


class FakeTokenizer:
    has_chat_template = True

    def apply_chat_template(self, msgs, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}" for m in msgs) + "<assistant>"

    def encode(self, text, add_special_tokens=True):
        return ([0] if add_special_tokens else []) + [ord(c) for c in text]


def test_chat_prompt_uses_the_chat_template_without_extra_special_tokens(srv):
    tokens = srv.chat_prompt(FakeTokenizer(), [{"role": "user", "content": "hi"}])
    assert tokens == [ord(c) for c in "<user>hi<assistant>"]
    with pytest.raises(srv.ApiError, match="non-empty list"):
        srv.chat_prompt(FakeTokenizer(), [])
    with pytest.raises(srv.ApiError, match="role"):
        srv.chat_prompt(FakeTokenizer(), [{"content": "x"}])


def test_completion_prompt_accepts_text_or_token_ids(srv):
    assert srv.completion_prompt(FakeTokenizer(), "ab") == [0, 97, 98]
    assert srv.completion_prompt(FakeTokenizer(), ["ab"]) == [0, 97, 98]
    assert srv.completion_prompt(FakeTokenizer(), [5, 6]) == [5, 6]
    for bad in ("", [], ["a", "b"], [True]):
        with pytest.raises(srv.ApiError):
            srv.completion_prompt(FakeTokenizer(), bad)


def test_startup_code_lives_once():
    """Each role deploys the one mlx_cluster_startup.py (its files/ entry is a link to
    roles/mlx_cluster/files/), and no program defines the start-up again."""
    home = program_path("mlx_cluster", "mlx_cluster_startup.py")
    assert home.is_file() and not home.is_symlink()
    programs = {
        "benchmark": ["mlx_cluster_bench.py"],
        "net_check": ["mlx_cluster_netcheck.py"],
        "mlx_server": ["mlx_cluster_server.py", "mlx_server_daemon.py"],
    }
    for role, names in programs.items():
        link = program_path(role, "mlx_cluster_startup.py")
        assert link.is_symlink() and link.resolve() == home.resolve(), link
        tasks = "".join(p.read_text() for p in (ROOT / "roles" / role / "tasks").glob("*.yml"))
        tasks += "".join(p.read_text() for p in (ROOT / "roles" / role / "vars").glob("*.yml"))
        assert "mlx_cluster_startup.py" in tasks, f"{role} does not deploy the start-up helper"
        for name in names:
            text = program_path(role, name).read_text()
            assert "from mlx_cluster_startup import" in text, name
            for defined in ("def init_distributed", "LAUNCHER_ENV =", "class InitError"):
                assert defined not in text, f"{name} defines {defined} again"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"max_tokens": float("inf")}, "max_tokens"),
        ({"max_tokens": float("nan")}, "max_tokens"),
        ({"seed": float("inf")}, "seed"),
        ({"seed": float("-inf")}, "seed"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": float("nan")}, "top_p"),
    ],
)
def test_sampling_params_refuse_infinity_and_nan(srv, body, param):
    with pytest.raises(srv.ApiError) as err:
        srv.sampling_params(body, 128)
    assert err.value.status == 400 and err.value.param == param


def test_a_body_with_nan_or_infinity_is_not_json(srv):
    for text in ('{"max_tokens": NaN}', '{"seed": Infinity}', '{"seed": -Infinity}'):
        with pytest.raises(srv.ApiError, match="not JSON"):
            json.loads(text, parse_constant=srv.refuse_constant)


def test_token_ids_must_lie_within_the_vocabulary(srv):
    assert srv.completion_prompt(FakeTokenizer(), [0, 99], vocab_size=100) == [0, 99]
    for bad in ([100], [5, -1], [2**70]):
        with pytest.raises(srv.ApiError, match="outside the model's vocabulary") as err:
            srv.completion_prompt(FakeTokenizer(), bad, vocab_size=100)
        assert err.value.status == 400 and err.value.param == "prompt"
    with pytest.raises(srv.ApiError, match="0 to 2147483647"):  # a model whose size is not known
        srv.completion_prompt(FakeTokenizer(), [2**70])


def test_the_vocabulary_size_comes_from_the_config(srv, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    assert srv.vocab_size(tmp_path, None) == 151936
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 262144}}))
    assert srv.vocab_size(tmp_path, None) == 262144
    (tmp_path / "config.json").write_text("{}")
    assert srv.vocab_size(tmp_path, ["a"] * 7) == 7
    assert srv.vocab_size(tmp_path / "none", object()) is None


ALLOWED = {"localhost", "studio-1", "studio-1.local", "mlx.lab.example"}
OK_HEADERS = {"Host": "10.0.0.11:8080", "Content-Type": "application/json; charset=utf-8"}


@pytest.mark.parametrize(
    "headers",
    [
        OK_HEADERS,
        dict(OK_HEADERS, Host="localhost:8080"),
        dict(OK_HEADERS, Host="studio-1.local:8080"),
        dict(OK_HEADERS, Host="[fe80::1]:8080"),
        dict(OK_HEADERS, Host="mlx.lab.example"),
        dict(OK_HEADERS, Host="STUDIO-1."),
    ],
)
def test_requests_from_api_clients_pass(srv, headers):
    assert srv.check_request_headers(headers, ALLOWED) is None


@pytest.mark.parametrize(
    "headers, status, words",
    [
        (
            dict(OK_HEADERS, Origin="https://evil.example"),
            403,
            "from web pages are refused (Origin: https://evil.example)",
        ),
        (dict(OK_HEADERS, Origin="null"), 403, "Origin: null"),
        (
            dict(OK_HEADERS, Host="rebound.evil.example:8080"),
            403,
            "Host rebound.evil.example:8080 is not a name of this server",
        ),
        ({"Content-Type": "application/json"}, 403, "Host (none)"),
        (dict(OK_HEADERS, **{"Content-Type": "text/plain"}), 415, "not text/plain"),
        ({"Host": "10.0.0.11"}, 415, "not (none)"),
    ],
)
def test_requests_a_web_page_could_make_are_refused(srv, headers, status, words):
    err = srv.check_request_headers(headers, ALLOWED)
    assert err is not None and err.status == status and words in err.message, err and err.message


def test_the_macs_own_names(srv, monkeypatch):
    monkeypatch.setattr(srv.socket, "gethostname", lambda: "Studio-1.lan")
    assert srv.own_names("10.0.0.11") == {"localhost", "studio-1.lan", "studio-1", "studio-1.local"}
    assert "api.example" in srv.own_names("api.example")


def test_the_http_server_serves_a_bounded_number_of_connections(srv, monkeypatch):
    import socket
    import urllib.request
    from http.server import BaseHTTPRequestHandler

    gate = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            gate.wait(10)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    monkeypatch.setattr(srv, "MAX_CONNECTIONS", 2)
    httpd = srv.BoundedHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    try:
        held = [
            threading.Thread(target=lambda: urllib.request.urlopen(url, timeout=10).read(), daemon=True)
            for _ in range(2)
        ]
        for t in held:
            t.start()
        deadline = time.monotonic() + 5
        while httpd.slots._value and time.monotonic() < deadline:  # both slots taken
            time.sleep(0.02)
        third = socket.create_connection(httpd.server_address, timeout=5)
        third.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert third.recv(100) == b""  # closed at once, not queued behind the two
        gate.set()
        for t in held:
            t.join(10)
        # every slot given back (by the server's thread once it has closed the connection, which
        # can be just after the client has read its answer)
        deadline = time.monotonic() + 5
        while httpd.slots._value < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpd.slots._value == 2
    finally:
        gate.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    "value, ok",
    [
        ("Bearer s3cret-key", True),
        ("bearer s3cret-key", True),
        ("Bearer  s3cret-key ", True),
        (None, False),
        ("", False),
        ("Bearer", False),
        ("Bearer s3cret-keyX", False),
        ("Basic s3cret-key", False),
        ("s3cret-key", False),
    ],
)
def test_the_api_key_is_asked_for_only_when_set(srv, value, ok):
    headers = {} if value is None else {"Authorization": value}
    assert srv.authorized(headers, b"s3cret-key") is ok
    assert srv.authorized(headers, None) is True
    err = srv.unauthorized()
    assert err.status == 401 and err.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_api_key_file_is_read_at_start(srv, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    base = ["--model", str(model), "--run-dir", str(tmp_path / "run")]
    key = tmp_path / "api_key"
    key.write_text("s3cret-key\n")
    assert srv.parse_args(base + ["--api-key-file", str(key)]).api_key == b"s3cret-key"
    assert srv.parse_args(base).api_key is None
    key.write_text("\n")
    with pytest.raises(SystemExit):
        srv.parse_args(base + ["--api-key-file", str(key)])
    with pytest.raises(SystemExit):
        srv.parse_args(base + ["--api-key-file", str(tmp_path / "none")])
