"""plugins/module_utils/mlx_copy.py: the receiver and the sender over loopback, for real sockets
and files: the copy, the re-run that reads nothing, the resume, a corrupted byte, a stranger
without the token, paths that lead out, a relay passing on a file still arriving, and the bounds."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading

import pytest

from ansible_collections.mlx.cluster.plugins.module_utils import mlx_copy
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import (
    HASHES,
    MAGIC,
    CopyError,
    Receiver,
    Sender,
    part_path,
    rel_problem,
    send_order,
)
from tests.unit.conftest import random_files

TOKEN = "t" * 32


def say(sock, *lines):
    """Send the protocol's JSON lines by hand (a stranger, or a sender that misbehaves); -> the
    socket as a file, to read the receiver's answers."""
    f = sock.makefile("rwb")
    for obj in lines:
        f.write((json.dumps(obj) + "\n").encode())
    f.flush()
    return f


def start(receiver):
    port = receiver.bind()
    out = {}
    t = threading.Thread(target=lambda: out.update(receiver.serve()), daemon=True)
    t.start()
    return port, t, out


def copy(src, dest, files, streams=2, **kw):
    rx = Receiver(str(dest), files, TOKEN, "127.0.0.1", stall=5, idle=5)
    rx.prepare()
    port, t, out = start(rx)
    sent = Sender(str(src), files, TOKEN, "127.0.0.1", port, streams=streams, stall=5, **kw).run()
    t.join(10)
    assert not t.is_alive(), "the receiver did not end once every file was in place"
    return sent, out


SIZES = {
    "config.json": 300,
    "model-00001-of-00002.safetensors": 3_000_000,
    "model-00002-of-00002.safetensors": 2_000_001,
    "sub/tokenizer.json": 70_000,
}


def test_copies_every_file_verified_with_its_source_time(tmp_path):
    files = random_files(tmp_path / "src", SIZES)
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files)
    assert sent["errors"] == [] and got["problems"] == []
    assert got["copied"] == sorted(SIZES) and got["missing"] == []
    for rel in SIZES:
        assert (tmp_path / "dest" / rel).read_bytes() == (tmp_path / "src" / rel).read_bytes()
        assert int((tmp_path / "dest" / rel).stat().st_mtime) == 1764130000
    assert sent["bytes"] == got["bytes"] == sum(SIZES.values())
    record = json.loads((tmp_path / "dest" / HASHES).read_text())["files"]
    assert {rel: e["sha256"] for rel, e in record.items()} == {rel: f["sha256"] for rel, f in files.items()}
    assert not list((tmp_path / "dest").rglob("*" + mlx_copy.PART_SUFFIX))


def test_a_rerun_reads_no_weights_and_sends_nothing(tmp_path, monkeypatch):
    files = random_files(tmp_path / "src", SIZES)
    copy(tmp_path / "src", tmp_path / "dest", files)
    reads = []
    real = mlx_copy.sha256_file
    monkeypatch.setattr(mlx_copy, "sha256_file", lambda *a, **k: reads.append(a) or real(*a, **k))
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1")
    assert rx.prepare() == 0
    assert rx.settled() and reads == []


def test_a_file_put_there_by_rsync_is_hashed_once_then_taken(tmp_path):
    files = random_files(tmp_path / "src", {"a.safetensors": 100_000})
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "a.safetensors").write_bytes((tmp_path / "src" / "a.safetensors").read_bytes())
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1")
    assert rx.prepare() == 0 and rx.status == {"a.safetensors": "had"}
    assert "a.safetensors" in json.loads((tmp_path / "dest" / HASHES).read_text())["files"]


def test_a_file_changed_in_place_is_taken_by_its_record_and_found_by_rehash(tmp_path):
    """Same size, same time, another byte: the record vouches for it (as rsync's quick check
    would); rehash (model_sync_checksum) reads it again, asks for it, and copies it right."""
    files = random_files(tmp_path / "src", SIZES)
    copy(tmp_path / "src", tmp_path / "dest", files)
    shard = tmp_path / "dest" / "model-00002-of-00002.safetensors"
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1").prepare() == 0
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", rehash=True)
    assert rx.prepare() == st.st_size
    assert [rel for rel in SIZES if rx.status.get(rel) != "had"] == [shard.name]
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files)  # the record now says what was read
    assert got["copied"] == [shard.name] and sent["errors"] == []
    assert shard.read_bytes() == (tmp_path / "src" / shard.name).read_bytes()


def test_a_stopped_copy_resumes_from_its_temporary_file(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 1_000_000})
    data = (tmp_path / "src" / "w.safetensors").read_bytes()
    (tmp_path / "dest").mkdir()
    with open(part_path(str(tmp_path / "dest"), "w.safetensors"), "wb") as fh:
        fh.write(data[:400_000])
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files)
    assert got["files"]["w.safetensors"] == {"bytes": 600_000, "resumed": 400_000}
    assert sent["bytes"] == 600_000
    assert (tmp_path / "dest" / "w.safetensors").read_bytes() == data


def test_a_resumed_file_whose_first_part_is_wrong_fails_its_hash(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 500_000})
    (tmp_path / "dest").mkdir()
    with open(part_path(str(tmp_path / "dest"), "w.safetensors"), "wb") as fh:
        fh.write(b"\0" * 1000)  # not the source's bytes
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files)
    assert [p["kind"] for p in got["problems"]] == ["sha256"] and got["missing"] == ["w.safetensors"]
    assert not (tmp_path / "dest" / "w.safetensors").exists()
    # the bad temporary file is gone: the next run starts that file from zero
    assert not os.path.exists(part_path(str(tmp_path / "dest"), "w.safetensors"))


def one_stream(sender_class, tmp_path, files, idle=5):
    """A receiver into tmp_path/dest and one stream of `sender_class` from tmp_path/src: (sent, got)."""
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=idle)
    rx.prepare()
    port, t, got = start(rx)
    sent = sender_class(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port, streams=1, stall=5).run()
    t.join(10)
    return sent, got


class CutSender(Sender):
    """Sends the first `cut` bytes of each file, then the connection breaks (a pulled cable)."""

    cut = 150_000

    def push(self, sock, fh, offset, count):
        fh.seek(offset)
        sock.sendall(fh.read(min(count, self.cut)))
        sock.shutdown(socket.SHUT_RDWR)
        raise OSError(errno.EPIPE, "Broken pipe")


def test_the_bytes_before_a_break_are_kept_for_the_resume(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 1_000_000})
    sent, got = one_stream(CutSender, tmp_path, files, idle=0.5)
    assert sent["errors"] and got["missing"] == ["w.safetensors"]
    data = (tmp_path / "src" / "w.safetensors").read_bytes()
    part = part_path(str(tmp_path / "dest"), "w.safetensors")
    with open(part, "rb") as fh:
        assert fh.read() == data[:150_000]  # all that arrived before the break
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files)
    assert got["files"]["w.safetensors"] == {"bytes": 850_000, "resumed": 150_000}
    assert (tmp_path / "dest" / "w.safetensors").read_bytes() == data


class FlippingSender(Sender):
    """Sends one byte of the model wrong, as a bad cable or memory would."""

    def push(self, sock, fh, offset, count):
        fh.seek(offset)
        data = bytearray(fh.read(count))
        data[len(data) // 2] ^= 0x01
        sock.sendall(bytes(data))
        return len(data)


def test_a_corrupted_byte_is_caught_by_the_hash_and_nothing_is_left_under_the_name(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 200_000})
    sent, got = one_stream(FlippingSender, tmp_path, files)
    assert [e["kind"] for e in sent["errors"]] == ["sha256"]
    assert "w.safetensors arrived with sha256" in sent["errors"][0]["msg"]
    assert got["missing"] == ["w.safetensors"] and not (tmp_path / "dest" / "w.safetensors").exists()


def test_a_stranger_without_the_token_is_refused_and_named(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 10_000})
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5)
    rx.prepare()
    port, t, got = start(rx)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        f = say(s, {"magic": MAGIC, "token": "x" * 32}, {"file": "w.safetensors"})
        assert json.loads(f.readline()) == {"ok": False, "error": "not this copy's token"}
    with pytest.raises(CopyError, match="refused the connection"):
        Sender(str(tmp_path / "src"), files, "y" * 32, "127.0.0.1", port, streams=1).connect()
    sent = Sender(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port, streams=1).run()
    t.join(10)
    assert sent["errors"] == [] and got["copied"] == ["w.safetensors"]
    assert got["strangers"] == ["127.0.0.1", "127.0.0.1"]


@pytest.mark.parametrize(
    "rel", ["../x", "/etc/passwd", "a/../../b", "", "a//b", "./a", HASHES, ".w" + mlx_copy.PART_SUFFIX]
)
def test_paths_that_lead_out_or_that_the_copy_keeps_are_refused(rel):
    assert rel_problem(rel)
    with pytest.raises(CopyError, match="refusing to receive"):
        Receiver("/nonexistent", {rel: {"size": 1, "sha256": "0"}}, TOKEN, "127.0.0.1")


def test_a_directory_that_is_a_link_is_not_followed(tmp_path):
    (tmp_path / "dest").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "dest" / "sub").symlink_to(tmp_path / "elsewhere")
    rx = Receiver(str(tmp_path / "dest"), {"sub/x.json": {"size": 1, "sha256": "0"}}, TOKEN, "127.0.0.1")
    with pytest.raises(CopyError, match="is a symbolic link"):
        rx.prepare()


def test_a_file_the_copy_does_not_list_is_not_written(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 1000})
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=1)
    rx.prepare()
    port, t, got = start(rx)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        f = say(s, {"magic": MAGIC, "token": TOKEN}, {"file": "../evil"})
        assert json.loads(f.readline()) == {"ok": True}
        assert "not a file of this copy" in json.loads(f.readline())["error"]
    t.join(10)
    assert not (tmp_path / "evil").exists()
    assert [p["kind"] for p in got["problems"]][:1] == ["path"]


def test_a_relay_passes_a_file_on_while_it_is_still_arriving(tmp_path):
    files = random_files(tmp_path / "src", {"w.safetensors": 2_000_000})
    data = (tmp_path / "src" / "w.safetensors").read_bytes()
    relay = tmp_path / "relay"
    relay.mkdir()
    part = part_path(str(relay), "w.safetensors")
    written = threading.Event()

    def arrive():  # the relay's own copy: in pieces, then renamed, as its receiver does
        with open(part, "wb") as fh:
            for k in range(0, len(data), 250_000):
                fh.write(data[k : k + 250_000])
                fh.flush()
                written.wait(0.02)
        os.replace(part, relay / "w.safetensors")

    t_in = threading.Thread(target=arrive)
    t_in.start()
    sent, got = copy(relay, tmp_path / "dest", files, streams=1, follow=True)
    t_in.join()
    assert sent["errors"] == [] and got["copied"] == ["w.safetensors"]
    assert (tmp_path / "dest" / "w.safetensors").read_bytes() == data


def test_a_relay_whose_copy_stops_growing_names_its_upstream(tmp_path):
    files = {"w.safetensors": {"size": 1000, "sha256": "0" * 64}}
    (tmp_path / "relay").mkdir()
    with open(part_path(str(tmp_path / "relay"), "w.safetensors"), "wb") as fh:
        fh.write(b"x" * 10)
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5)
    rx.prepare()
    port, t, got = start(rx)
    sent = Sender(str(tmp_path / "relay"), files, TOKEN, "127.0.0.1", port, streams=1, stall=0.3, follow=True).run()
    assert [e["kind"] for e in sent["errors"]] == ["upstream"]
    assert "stopped growing on this Mac at 10 of 1000 bytes" in sent["errors"][0]["msg"]
    t.join(10)
    assert got["missing"] == ["w.safetensors"]
    # what arrived stays under the temporary name, for the next run to resume
    assert os.path.getsize(part_path(str(tmp_path / "dest"), "w.safetensors")) == 10


def test_a_full_disk_is_named_and_the_file_stays_under_its_temporary_name(tmp_path, monkeypatch):
    files = random_files(tmp_path / "src", {"w.safetensors": 300_000})
    real = os.write

    def full(fd, data):  # as the kernel does: a short write up to the disk's end, then ENOSPC
        room = 100_000 - os.fstat(fd).st_size
        if room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data[:room])

    monkeypatch.setattr(mlx_copy.os, "write", full)
    sent, got = copy(tmp_path / "src", tmp_path / "dest", files, streams=1)
    assert [p["kind"] for p in got["problems"]] == ["disk_full"]
    assert "the disk is full writing w.safetensors" in got["problems"][0]["msg"]
    assert sent["errors"] and not (tmp_path / "dest" / "w.safetensors").exists()


def test_a_receiver_no_sender_reaches_ends_by_itself(tmp_path):
    rx = Receiver(str(tmp_path / "dest"), {"w.safetensors": {"size": 1, "sha256": "0"}}, TOKEN, "127.0.0.1", idle=0.3)
    rx.prepare()
    port, t, got = start(rx)
    t.join(5)
    assert not t.is_alive() and [p["kind"] for p in got["problems"]] == ["idle"]
    with pytest.raises(CopyError) as exc:  # and nothing listens after it
        Sender(str(tmp_path), {}, TOKEN, "127.0.0.1", port).connect()
    assert exc.value.kind == "refused"


def test_senders_go_through_a_model_in_one_order():
    files = {"b": {"size": 5}, "a": {"size": 5}, "c": {"size": 9}, "d": {"size": 1}}
    assert send_order(files) == ["c", "a", "b", "d"]


EXTRA = [{"host": "m2", "file": "old.safetensors", "kind": "extra_weight", "msg": "m2: old.safetensors ..."}]


def test_a_reporting_sender_gets_the_receivers_result_and_the_receiver_ends(tmp_path):
    """The sender done with its files asks for the last word: every file in place, so it gets
    the result (with the comparison model_receive made before the copy) and the receiver ends
    at once, with nobody left to collect it."""
    files = random_files(tmp_path / "src", SIZES)
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, report=True, compare=EXTRA)
    rx.prepare()
    port, t, got = start(rx)
    sent = Sender(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port, streams=2, report=True).run()
    t.join(mlx_copy.REPORT_WAIT / 2)
    assert not t.is_alive() and rx.reported.is_set()
    received = sent["received"]
    assert received["copied"] == sorted(SIZES) and received["missing"] == [] and received["compare"] == EXTRA
    assert received["bytes"] == sum(SIZES.values()) == got["bytes"]
    with pytest.raises(CopyError) as exc:  # nothing listens after it
        Sender(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port).connect()
    assert exc.value.kind == "refused"


def test_a_receiver_still_owed_files_is_not_settled_and_ends_with_its_last_file(tmp_path, monkeypatch):
    """Two senders (a relay and a direct share): the reporter that finishes first hears "not
    settled" (None: model_receive collects); the receiver ends with the other sender's last
    file, without waiting for a report nobody will ask for."""
    monkeypatch.setattr(mlx_copy, "REPORT_WAIT", 30)
    files = random_files(tmp_path / "src", SIZES)
    mine = {rel: f for rel, f in files.items() if rel.endswith(".json")}
    rest = {rel: f for rel, f in files.items() if rel not in mine}
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, report=True, compare=[])
    rx.prepare()
    port, t, got = start(rx)
    first = Sender(str(tmp_path / "src"), mine, TOKEN, "127.0.0.1", port, report=True).run()
    assert first["errors"] == [] and first["received"] is None and t.is_alive()
    second = Sender(str(tmp_path / "src"), rest, TOKEN, "127.0.0.1", port).run()
    assert second["errors"] == [] and second["received"] is None  # (not a reporter: it does not ask)
    t.join(5)
    assert not t.is_alive() and not rx.reported.is_set()
    assert got["copied"] == sorted(SIZES) and got["missing"] == []


def test_a_reporter_that_never_asks_is_waited_for_a_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setattr(mlx_copy, "REPORT_WAIT", 0.5)
    files = random_files(tmp_path / "src", {"w.safetensors": 10_000})
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, report=True, compare=[])
    rx.prepare()
    port, t, got = start(rx)
    Sender(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port).run()  # copies, never asks
    assert t.is_alive()  # waiting for the report
    t.join(5)
    assert not t.is_alive() and not rx.reported.is_set() and got["copied"] == ["w.safetensors"]


def test_a_failed_file_is_never_reported_as_settled(tmp_path, monkeypatch):
    """A file that arrived damaged: the reporter hears "not settled", so model_receive collects
    the receiver and the stage names the file."""
    files = random_files(tmp_path / "src", {"w.safetensors": 10_000})
    files["w.safetensors"] = dict(files["w.safetensors"], sha256="0" * 64)
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, report=True, compare=[])
    rx.prepare()
    port, t, got = start(rx)
    sent = Sender(str(tmp_path / "src"), files, TOKEN, "127.0.0.1", port, report=True).run()
    assert sent["errors"] and sent["received"] is None  # (a sender with an error does not ask)
    t.join(5)
    assert not t.is_alive() and got["missing"] == ["w.safetensors"]


# Several cables between two Macs (loopback's 127.0.0.x stand for the receiver's ends of them)
class EachCableTakesAFile(Sender):
    """A Sender whose first connections, one per cable, have each taken a file before any of them
    sends: on a busy machine the second cable's thread started after the first had taken every
    file, and that cable carried nothing."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = threading.Barrier(len(self.addresses))
        self.first = iter(range(len(self.addresses)))

    def next_file(self):
        rel = super().next_file()
        if next(self.first, None) is not None:
            self.started.wait(10)
        return rel


def test_the_connections_spread_over_every_cable_between_the_two_macs(tmp_path):
    files = random_files(tmp_path / "src", SIZES)
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, more=["127.0.0.2"])
    rx.prepare()
    port, t, got = start(rx)
    sent = EachCableTakesAFile(
        str(tmp_path / "src"), files, TOKEN, ["127.0.0.1", "127.0.0.2"], port, streams=1, stall=5
    ).run()
    t.join(10)
    assert sent["errors"] == [] and sent["fell_back"] == [] and got["unused"] == []
    assert got["copied"] == sorted(SIZES)
    # one connection on each cable, each taking a file before it connects: both cables carried some
    assert sent["by_address"]["127.0.0.1"] > 0 and sent["by_address"]["127.0.0.2"] > 0
    assert sum(sent["by_address"].values()) == sent["bytes"] == sum(SIZES.values())
    for rel in SIZES:
        assert (tmp_path / "dest" / rel).read_bytes() == (tmp_path / "src" / rel).read_bytes()


def test_a_further_cable_that_cannot_be_used_is_left_for_the_first(tmp_path):
    """The receiver cannot listen on a further cable's end (not on this machine: TEST-NET-1), and a
    connection meant for another further cable finds nothing there: both go over the first cable,
    named, and the copy completes."""
    files = random_files(tmp_path / "src", SIZES)
    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=5, more=["192.0.2.1"])
    rx.prepare()
    port, t, got = start(rx)
    assert [u["address"] for u in rx.unused] == ["192.0.2.1"] and rx.unused[0]["why"]
    sent = Sender(str(tmp_path / "src"), files, TOKEN, ["127.0.0.1", "127.0.0.3"], port, streams=1, stall=5).run()
    t.join(10)
    assert sent["errors"] == [] and got["copied"] == sorted(SIZES)
    assert [f["address"] for f in sent["fell_back"]] == ["127.0.0.3"]
    assert "nothing listens on 127.0.0.3" in sent["fell_back"][0]["why"]
    assert sent["by_address"] == {"127.0.0.1": sum(SIZES.values()), "127.0.0.3": 0}
    assert got["unused"] == [{"address": "192.0.2.1", "why": rx.unused[0]["why"]}]


def test_a_break_on_a_further_cable_is_named_by_its_address(tmp_path):
    """A connection that breaks on the second cable: the error carries that cable's address (the
    module names that cable in its message)."""
    files = random_files(tmp_path / "src", {"a.safetensors": 3_000_000, "b.safetensors": 2_000_000})

    class BreaksOnTheSecond(EachCableTakesAFile):
        def push(self, sock, fh, offset, count):
            if sock.getpeername()[0] == "127.0.0.2":
                raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
            return super().push(sock, fh, offset, count)

    rx = Receiver(str(tmp_path / "dest"), files, TOKEN, "127.0.0.1", stall=5, idle=2, more=["127.0.0.2"])
    rx.prepare()
    port, t, got = start(rx)
    sent = BreaksOnTheSecond(
        str(tmp_path / "src"), files, TOKEN, ["127.0.0.1", "127.0.0.2"], port, streams=1, stall=5
    ).run()
    t.join(15)
    assert [(e["kind"], e["address"]) for e in sent["errors"]] == [("connection", "127.0.0.2")]
    assert "127.0.0.2" in sent["errors"][0]["msg"]
