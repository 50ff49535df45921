# -*- coding: utf-8 -*-
"""The model over one Thunderbolt cable without ssh: model_sync's own transport.

rsync over ssh spends about five times the cable's own CPU cost per byte (ssh's encryption, and
rsync's framing on top); rsync's daemon mode without ssh still about three times
(docs/benchmarks.md, "Model copy: one cable"). Here the file bytes go over the cable's /30 as
they are: the sender hands them to the kernel with sendfile(2), the receiver writes them and
hashes them as they arrive (no second read of the weights), several TCP connections at once.

Control stays with Ansible over ssh: `model_receive` starts a `Receiver` on the receiving Mac,
bound to that Mac's address on the cable and a port the kernel picks, with a one-time token
handed to it over ssh; `model_send` on the sending Mac connects to it with the token. The
receiver knows every file it is to get (path, size, sha256, from the source's manifest): it
writes nothing else, only below the model directory, each file under a temporary name renamed
once its sha256 matches, and it ends by itself when every file is in place, when no sender is
connected for `idle` seconds, or when a connection stalls.

A copy stopped part-way resumes: the temporary file is kept, its bytes hashed once, and only
the rest is asked for. Every file the receiver verified is recorded with its size, modification
time and sha256 in HASHES, beside the model, so a re-run reads no weights: a file whose size and
time match its record is taken as it is. A Mac that passes the model on (a relay) sends each
file while its own copy is still arriving (`follow`), so a chain costs about one copy.

Protocol (one JSON object per line, then raw bytes):
    sender: {"magic": MAGIC, "token": T}          receiver: {"ok": true} | {"ok": false, "error": E}
    sender: {"file": rel}                        receiver: {"offset": k} | {"have": true} | {"error": E}
    sender: the file's bytes from k to its size  receiver: {"ok": true} | {"ok": false, "error": E}
    sender: {"end": true}
A sender that reports for its receiving Mac (`report`), once every stream of it has ended, asks on
one more connection for the receiver's last word:
    sender: {"magic": MAGIC, "token": T}, {"result": true}
    receiver: {"settled": true, "result": R} | {"settled": false}
R is the receiver's result (what model_receive's finished state returns), given only when every
file is in place; the receiver then ends by itself and keeps no status behind, so nobody needs to
collect it. Otherwise (a file failed, or another sender's files are still to come) the receiver
goes on, and model_receive collects it as before.
The code runs on the Macs' Python (3.9 and later), standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import select
import socket
import threading
import time

MAGIC = "mlx-cluster-copy/1"
# Verified files of a model directory: {"root": dir, "files": {rel: {"size", "mtime_ns", "sha256"}}}.
# Written by the receiver beside its copy; never copied (each Mac hashes its own). The source's
# record is kept elsewhere (model_manifest's record_file), so the source directory is not written.
HASHES = ".mlx-cluster-sha256.json"
# What the receiver of a model directory says of itself (running, then its result), and its log.
STATUS = ".mlx-cluster-receive.json"
LOG = ".mlx-cluster-receive.log"
# Names of the copy's own files in a model directory: never listed, sent or written as model files.
OWN_PREFIX = ".mlx-cluster-"
# A file being received: <dir>/.<name>.mlxpart, renamed to <dir>/<name> once verified.
PART_SUFFIX = ".mlxpart"
CHUNK = 4 << 20
LINE_MAX = 64 * 1024
# Seconds a sender has to say who it is after connecting.
HELLO_TIMEOUT = 10
# How often a relay looks for more of a file its own copy is still receiving.
FOLLOW_POLL = 0.05
# Seconds a receiver with every file in place waits for its reporting sender to ask for its
# result (it asks at once, after its last file; one that died is not waited on longer).
REPORT_WAIT = 10
# Seconds a connection waits on a further cable between the same two Macs before it takes the
# first one (a connection over a working cable is made in milliseconds).
FURTHER_CONNECT_TIMEOUT = 3


class CopyError(Exception):
    """A copy that cannot go on; `msg` says why, for the module to name hosts, cable and fix."""

    def __init__(self, msg, kind="error"):
        super().__init__(msg)
        self.msg = msg
        self.kind = kind


def rel_problem(rel):
    """None when `rel` is a path the receiver may write below the model directory, else why not."""
    if not isinstance(rel, str) or not rel:
        return "an empty path"
    if "\0" in rel or "\\" in rel or rel.startswith("/"):
        return f"{rel!r} is not a relative path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"{rel!r} has an empty, '.' or '..' component"
    if parts[-1].startswith(OWN_PREFIX) or parts[-1].endswith(PART_SUFFIX):
        return f"{rel!r} is a name the copy keeps for itself"
    return None


def part_path(root, rel):
    head, name = os.path.split(rel)
    return os.path.join(root, head, "." + name + PART_SUFFIX)


def sha256_file(path, digest=None, limit=None):
    """Hash a file (its first `limit` bytes), into `digest` when given. -> the digest object."""
    digest = digest or hashlib.sha256()
    left = limit
    with open(path, "rb") as fh:
        while left is None or left > 0:
            block = fh.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest


# ---- the record of verified files ----------------------------------------------------------
class Hashes:
    """The record of one directory's verified files, by size and modification time (ns).
    fresh: start from nothing (every file is read again, and the record rewritten from what was
    read: model_sync_checksum, for a file changed in place with its size and time kept).
    path: the record's file; None: HASHES in the directory. A record kept elsewhere that does not
    exist yet starts from the one in the directory, if any (read, never written); a record that
    names another directory is not taken."""

    def __init__(self, root, fresh=False, path=None):
        self.root = root
        self.path = path or os.path.join(root, HASHES)
        self.lock = threading.Lock()
        self.files = {}
        self.dirty = False
        if fresh:
            return
        for candidate in dict.fromkeys((self.path, os.path.join(root, HASHES))):
            try:
                with open(candidate, encoding="utf-8") as fh:
                    data = json.load(fh)
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                break
            named = data.get("root", root) if isinstance(data, dict) else root
            if isinstance(data, dict) and isinstance(data.get("files"), dict) and _same_dir(named, root):
                self.files = data["files"]
                self.dirty = candidate != self.path  # taken from the directory: write it where it belongs
            break

    def known(self, rel, st):
        """The recorded sha256 of `rel` when its size and time (os.stat_result) match, else None."""
        entry = self.files.get(rel)
        if isinstance(entry, dict) and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
            return entry.get("sha256")
        return None

    def record(self, rel, st, sha):
        with self.lock:
            entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
            if self.files.get(rel) != entry:
                self.files[rel] = entry
                self.dirty = True

    def save(self):
        """Write the record when it changed (a re-run rewrites nothing: a copy of the directory
        over rsync sees no new file)."""
        with self.lock:
            if not self.dirty:
                return
            self.dirty = False
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"root": self.root, "files": self.files}, fh, sort_keys=True)
            os.replace(tmp, self.path)


def _same_dir(a, b):
    return isinstance(a, str) and os.path.normpath(a) == os.path.normpath(b)


def file_sha256(root, rel, hashes, save=False):
    """sha256 of root/rel, from `hashes` when its record matches, else read (and recorded)."""
    full = os.path.join(root, rel)
    st = os.stat(full)
    sha = hashes.known(rel, st)
    if sha is None:
        sha = sha256_file(full).hexdigest()
        hashes.record(rel, st, sha)
        if save:
            hashes.save()
    return sha


# ---- lines on a socket ---------------------------------------------------------------------
class Channel:
    """A connected socket that reads JSON lines and raw bytes, with one buffer for both."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.block = None

    def send(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode("utf-8"))

    def line(self):
        while b"\n" not in self.buf:
            if len(self.buf) > LINE_MAX:
                raise CopyError("a line longer than the protocol allows", "protocol")
            data = self.sock.recv(65536)
            if not data:
                raise CopyError("the connection closed", "closed")
            self.buf += data
        raw, self.buf = self.buf.split(b"\n", 1)
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise CopyError("a line that is not JSON", "protocol") from None
        if not isinstance(obj, dict):
            raise CopyError("a line that is not a JSON object", "protocol")
        return obj

    def read_into(self, count, sink):
        """Read exactly `count` raw bytes, handing each block to sink(memoryview): into one
        buffer, reused (a block is only valid until sink returns)."""
        if self.buf:
            head, self.buf = self.buf[:count], self.buf[count:]
            sink(memoryview(head))
            count -= len(head)
        if count <= 0:
            return
        if self.block is None:
            self.block = memoryview(bytearray(CHUNK))
        while count > 0:
            n = self.sock.recv_into(self.block, min(CHUNK, count))
            if not n:
                raise CopyError("the connection closed in the middle of a file", "closed")
            sink(self.block[:n])
            count -= n


# ---- the receiver --------------------------------------------------------------------------
def listening(address, port):
    """A non-blocking socket listening on (address, port); closed again when that fails (OSError)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(16)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Receiver:
    """Receive `files` ({rel: {"size", "sha256", "mtime"}}) into `root`, from senders that know `token`.

    `bind()` listens on each of `addresses` (the Mac's ends of the cables its senders use) at
    one port (0: the kernel picks it) and returns the port; then on each of `more` (its ends of
    the further cables between it and a sender) at that port where it can (`unused`: those it
    could not, with why: a sender's connection there takes the first cable instead);
    `serve()` runs until every file is settled, no sender is connected for `idle` seconds, or a
    connection stalls for `stall` seconds; it returns what happened (see RETURN of model_receive).
    report: a sender will ask for the result once it is done (`{"result": true}`): once every
    file is settled, wait up to REPORT_WAIT seconds for it. compare: the comparison with the
    source that holds once every file is in place (model_receive lists, before the copy, the
    weight files the source does not have: the copy writes only the source's files), handed over
    with the result.
    """

    def __init__(
        self,
        root,
        files,
        token,
        addresses,
        port=0,
        stall=120,
        idle=300,
        clock=time.monotonic,
        rehash=False,
        report=False,
        compare=None,
        more=(),
    ):
        bad = sorted(filter(None, (rel_problem(rel) for rel in files)))
        if bad:
            raise CopyError("refusing to receive " + "; ".join(bad), "path")
        if not token or len(token) < 16:
            raise CopyError("the token must be at least 16 characters", "token")
        self.root, self.files, self.token = root, files, token
        self.addresses = [addresses] if isinstance(addresses, str) else list(addresses)
        self.more = [a for a in more if a not in self.addresses]
        self.unused = []  # [{"address", "why"}]: further cables it could not listen on
        self.port, self.stall, self.idle, self.clock = port, stall, idle, clock
        self.rehash = rehash  # read every file in place again, whatever the record says
        self.hashes = Hashes(root, fresh=rehash) if os.path.isdir(root) else None
        self.lock = threading.Lock()
        self.status = {}  # rel -> "had" | "copied" | "failed" | "busy"
        self.results = {}  # rel -> {"bytes", "resumed"}
        self.problems, self.strangers = [], []
        self.connections, self.last = 0, clock()
        self.socks = []
        self.dry = False
        self.done = threading.Event()
        self.compare = compare
        self.await_report = report  # a reporting sender has yet to ask
        self.reported = threading.Event()  # the result was handed to it
        self.started = clock()

    # -- set-up
    def prepare(self, dry=False):
        """Make the directory, settle what is already in place; -> bytes still to receive.
        dry: make nothing and record nothing (a dry run)."""
        if not dry:
            os.makedirs(self.root, exist_ok=True)
        if self.hashes is None:
            self.hashes = Hashes(self.root, fresh=self.rehash)
        self.dry = dry
        todo = 0
        for rel, want in self.files.items():
            full = os.path.join(self.root, rel)
            self.check_dirs(rel)
            if self.in_place(rel, full, want):
                self.status[rel] = "had"
                continue
            have = 0
            try:
                have = os.lstat(part_path(self.root, rel)).st_size
            except OSError:
                pass
            todo += max(0, want["size"] - have)
        return todo

    def in_place(self, rel, full, want):
        try:
            st = os.lstat(full)
        except OSError:
            return False
        if not os.path.isfile(full) or os.path.islink(full) or st.st_size != want["size"]:
            return False
        # a file of the right size with no record (copied by rsync, say) is hashed once
        sha = self.hashes.known(rel, st)
        if sha is None:
            sha = sha256_file(full).hexdigest()
            self.hashes.record(rel, st, sha)
            if not self.dry:
                self.hashes.save()
        return sha == want["sha256"]

    def check_dirs(self, rel):
        """Make rel's directories below root, refusing any that is a link (it could lead out)."""
        cur = self.root
        for part in rel.split("/")[:-1]:
            cur = os.path.join(cur, part)
            if os.path.islink(cur):
                raise CopyError(f"{cur} is a symbolic link: the copy writes only below {self.root}", "path")
            if not os.path.isdir(cur) and not self.dry:
                os.mkdir(cur)

    def bind(self):
        """Listen on every address at one port (the kernel picks it; tried again on a clash)."""
        for _ in range(5):
            socks = []
            try:
                for address in self.addresses:
                    socks.append(listening(address, socks[0].getsockname()[1] if socks else self.port))
            except OSError as exc:
                for sock in socks:
                    sock.close()
                if exc.errno == errno.EADDRINUSE and socks and not self.port:
                    continue
                why = (
                    (
                        ": that address is not on this Mac (its cable is not addressed: run the network stage, "
                        "--tags network)"
                    )
                    if exc.errno == errno.EADDRNOTAVAIL
                    else ""
                )
                raise CopyError(f"cannot listen on {address}: {exc.strerror}{why}", "bind") from None
            self.socks = socks
            self.port = socks[0].getsockname()[1]
            self.bind_more()
            return self.port
        raise CopyError(f"no port free on all of {', '.join(self.addresses)}", "bind")

    def bind_more(self):
        for address in self.more:
            try:
                self.socks.append(listening(address, self.port))
            except OSError as exc:
                self.unused.append({"address": address, "why": exc.strerror or str(exc)})

    # -- the loop
    def settled(self):
        return all(self.status.get(rel) in ("had", "copied", "failed") for rel in self.files)

    def serve(self):
        self.started = self.clock()
        threads = []
        settled_at = None
        try:
            while not self.done.is_set():
                if self.settled():
                    with self.lock:  # (a failed file is never reported: nothing to wait for)
                        waiting = (
                            self.await_report and not self.reported.is_set() and "failed" not in self.status.values()
                        )
                    settled_at = self.clock() if settled_at is None else settled_at
                    if not waiting or self.clock() - settled_at > REPORT_WAIT:
                        break
                with self.lock:
                    quiet = self.connections == 0 and self.clock() - self.last > self.idle
                if quiet:
                    self.problem(None, "idle", f"no sender connected for {self.idle} s")
                    break
                ready, _, _ = select.select(self.socks, [], [], 0.2)
                for sock in ready:
                    try:
                        conn, peer = sock.accept()
                    except OSError:
                        continue
                    conn.setblocking(True)
                    t = threading.Thread(target=self.handle, args=(conn, peer), daemon=True)
                    t.start()
                    threads.append(t)
        finally:
            for sock in self.socks:
                sock.close()
        for t in threads:
            t.join(self.stall + 5)
        return self.outcome()

    def outcome(self):
        """What happened so far (see RETURN of model_receive)."""
        failed = sorted(rel for rel in self.files if self.status.get(rel) != "had" and self.status.get(rel) != "copied")
        return {
            "port": self.port,
            "seconds": round(self.clock() - self.started, 3),
            "copied": sorted(rel for rel, s in self.status.items() if s == "copied"),
            "had": sorted(rel for rel, s in self.status.items() if s == "had"),
            "missing": failed,
            "files": self.results,
            "problems": self.problems,
            "strangers": self.strangers,
            "bytes": sum(r["bytes"] for r in self.results.values()),
            "unused": self.unused,
        }

    def report(self, chan):
        """The reporting sender asks for the last word: the result, with the comparison, when
        every file is in place (the receiver then ends), else "not settled" (and nobody else will
        ask: the receiver ends as it would have, leaving its status for model_receive)."""
        with self.lock:
            out = self.outcome() if self.settled() else None
            if out is None or out["missing"] or self.compare is None:
                self.await_report = False
                out = None
        if out is None:
            chan.send({"settled": False})
            return
        out["compare"] = self.compare
        chan.send({"settled": True, "result": out})
        self.reported.set()

    def problem(self, rel, kind, msg):
        with self.lock:
            self.problems.append({"file": rel, "kind": kind, "msg": msg})

    def handle(self, conn, peer):
        with self.lock:
            self.connections += 1
            self.last = self.clock()
        chan = Channel(conn)
        try:
            conn.settimeout(HELLO_TIMEOUT)
            hello = chan.line()
            token = hello.get("token")
            if (
                hello.get("magic") != MAGIC
                or not isinstance(token, str)
                or not hmac.compare_digest(token.encode("utf-8"), self.token.encode("utf-8"))
            ):
                with self.lock:
                    self.strangers.append(peer[0])
                chan.send({"ok": False, "error": "not this copy's token"})
                return
            chan.send({"ok": True})
            conn.settimeout(self.stall)
            while True:
                req = chan.line()
                if req.get("end"):
                    return
                if req.get("result"):
                    self.report(chan)
                    return
                self.one_file(chan, req.get("file"), peer)
        except socket.timeout:
            self.problem(None, "stalled", f"nothing arrived from {peer[0]} for {self.stall} s")
        except CopyError as exc:
            if exc.kind != "closed":
                self.problem(None, exc.kind, f"{peer[0]}: {exc.msg}")
        except OSError as exc:
            self.problem(None, "connection", f"{peer[0]}: {exc.strerror or exc}")
        finally:
            conn.close()
            with self.lock:
                self.connections -= 1
                self.last = self.clock()

    def one_file(self, chan, rel, peer):
        want = self.files.get(rel) if isinstance(rel, str) else None
        if want is None:
            chan.send({"error": f"{rel!r} is not a file of this copy"})
            raise CopyError(f"asked to write {rel!r}, which is not a file of this copy", "path")
        with self.lock:
            state = self.status.get(rel)
            if state in ("had", "copied"):
                chan.send({"have": True})
                return
            if state == "busy":
                chan.send({"error": f"{rel} is already arriving on another connection"})
                return
            self.status[rel] = "busy"
        try:
            ok = self.write_file(chan, rel, want)
        except BaseException:
            with self.lock:
                self.status[rel] = "failed"
            raise
        with self.lock:
            self.status[rel] = "copied" if ok else "failed"
        if ok:  # acknowledged once settled and recorded: a sender told "ok" finds it so
            self.hashes.save()
            chan.send({"ok": True})

    def write_file(self, chan, rel, want):
        part, full = part_path(self.root, rel), os.path.join(self.root, rel)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            have = os.fstat(fd).st_size
            if have > want["size"]:
                os.ftruncate(fd, 0)
                have = 0
            digest = sha256_file(part, limit=have) if have else hashlib.sha256()
            os.lseek(fd, have, os.SEEK_SET)
            chan.send({"offset": have})
            got = [0]

            def sink(block):
                view = block
                while view:
                    try:
                        n = os.write(fd, view)
                    except OSError as exc:
                        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                            raise CopyError(
                                f"the disk is full writing {rel} ({want['size']} bytes)", "disk_full"
                            ) from None
                        raise
                    view = view[n:]
                digest.update(block)
                got[0] += len(block)
                with self.lock:
                    self.last = self.clock()

            try:
                chan.read_into(want["size"] - have, sink)
            finally:
                with self.lock:
                    self.results[rel] = {"bytes": got[0], "resumed": have}
        finally:
            os.close(fd)
        sha = digest.hexdigest()
        if sha != want["sha256"]:
            os.unlink(part)
            msg = f"{rel} arrived with sha256 {sha[:12]}..., the source's is {want['sha256'][:12]}..."
            self.problem(rel, "sha256", msg)
            chan.send({"ok": False, "error": msg})
            return False
        if want.get("mtime") is not None:
            os.utime(part, (want["mtime"], want["mtime"]))
        os.replace(part, full)
        self.hashes.record(rel, os.stat(full), sha)
        return True


# ---- the sender ----------------------------------------------------------------------------
def send_order(files):
    """The order every sender takes files in: largest first, then by name (a relay and its own
    sender then go through a model in the same order)."""
    return sorted(files, key=lambda rel: (-files[rel]["size"], rel))


class Sender:
    """Send `files` from `root` to a Receiver at (address, port), over `streams` connections.

    address: the receiver's address on the copy's cable, or a list of its addresses, one per
    cable between the two Macs (the first the copy's own): `streams` connections go over each,
    every connection taking the next file of one queue, so a faster cable carries more files. A
    connection that cannot reach a further address goes over the first instead (that cable
    unplugged or unaddressed since the plan: the copy does not fail for it, it is only slower).

    follow: `root` is a copy still arriving (this Mac relays it): a file is sent as its bytes
    appear, from its temporary name or its final one, and a file that stops growing for `stall`
    seconds fails as stalled upstream.
    report: once every stream has ended without an error, ask the receiver for its result
    (`run()`'s "received"; None when it is not settled or did not answer).
    """

    def __init__(
        self,
        root,
        files,
        token,
        address,
        port,
        streams=4,
        stall=120,
        follow=False,
        connect_timeout=10,
        clock=time.monotonic,
        sleep=time.sleep,
        report=False,
    ):
        self.root, self.files, self.token, self.port = root, files, token, port
        self.addresses = [address] if isinstance(address, str) else list(address)
        self.address = self.addresses[0]
        self.report = report
        self.streams, self.stall, self.follow, self.connect_timeout = max(1, streams), stall, follow, connect_timeout
        self.clock, self.sleep = clock, sleep
        self.queue = send_order(files)
        self.lock = threading.Lock()
        self.results, self.errors = {}, []
        self.sent = 0
        self.by_address = {a: 0 for a in self.addresses}  # bytes sent over each cable
        self.fell_back = []  # [(address, why)]: further cables a connection could not use

    def next_file(self):
        with self.lock:
            return self.queue.pop(0) if self.queue and not self.errors else None

    def run(self):
        start = self.clock()
        count = min(self.streams * len(self.addresses), len(self.files)) or 1
        # (one connection per cable in turn: the first files, the largest, spread over the cables)
        threads = [
            threading.Thread(target=self.stream, args=(self.addresses[i % len(self.addresses)],), daemon=True)
            for i in range(count)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {
            "seconds": round(self.clock() - start, 3),
            "bytes": self.sent,
            "files": self.results,
            "errors": self.errors,
            "received": self.ask_result() if self.report and not self.errors else None,
            "by_address": dict(self.by_address),
            "fell_back": [{"address": a, "why": why} for a, why in self.fell_back],
        }

    def ask_result(self):
        """The receiver's last word, once every stream is done: its result when every file is in
        place (it then ends by itself), else None (model_receive collects it)."""
        chan = None
        try:
            chan = self.connect()
            chan.send({"result": True})
            answer = chan.line()
        except (CopyError, OSError):  # (socket.timeout is an OSError)
            return None
        finally:
            if chan is not None:
                chan.sock.close()
        result = answer.get("result")
        return result if answer.get("settled") is True and isinstance(result, dict) else None

    def fail(self, exc, address):
        with self.lock:
            self.errors.append({"kind": exc.kind, "msg": exc.msg, "address": address})

    def connect(self, address=None, timeout=None):
        address, timeout = address or self.address, timeout or self.connect_timeout
        try:
            sock = socket.create_connection((address, self.port), timeout=timeout)
        except socket.timeout:
            raise CopyError(f"no answer from {address}:{self.port} within {timeout} s", "timeout") from None
        except ConnectionRefusedError:
            raise CopyError(f"nothing listens on {address}:{self.port}", "refused") from None
        except OSError as exc:
            raise CopyError(f"cannot connect to {address}:{self.port}: {exc.strerror or exc}", "connect") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.stall)
        chan = Channel(sock)
        chan.send({"magic": MAGIC, "token": self.token})
        answer = chan.line()
        if not answer.get("ok"):
            sock.close()
            raise CopyError(f"the receiver refused the connection: {answer.get('error')}", "refused_token")
        return chan

    def stream(self, address):
        chan = None
        try:
            rel = self.next_file()
            if rel is None:
                return
            if address != self.address:  # a further cable: the first one when it cannot be used
                try:
                    chan = self.connect(address, min(self.connect_timeout, FURTHER_CONNECT_TIMEOUT))
                except CopyError as exc:
                    if exc.kind == "refused_token":
                        raise
                    with self.lock:
                        self.fell_back.append((address, exc.msg))
                    address = self.address
            if chan is None:
                chan = self.connect(address)
            while rel is not None:
                self.one_file(chan, rel, address)
                rel = self.next_file()
            chan.send({"end": True})
        except CopyError as exc:
            self.fail(exc, address)
        except socket.timeout:
            self.fail(
                CopyError(f"the receiver at {address}:{self.port} did not answer for {self.stall} s", "stalled"),
                address,
            )
        except OSError as exc:
            self.fail(
                CopyError(f"the connection to {address}:{self.port} broke: {exc.strerror or exc}", "connection"),
                address,
            )
        finally:
            if chan is not None:
                chan.sock.close()

    def one_file(self, chan, rel, address):
        size = self.files[rel]["size"]
        chan.send({"file": rel})
        answer = chan.line()
        if answer.get("have"):
            self.results[rel] = {"bytes": 0, "had": True}
            return
        if "offset" not in answer:
            raise CopyError(f"the receiver would not take {rel}: {answer.get('error')}", "receiver")
        offset = int(answer["offset"])
        with self.source(rel) as fh:
            pos = offset
            while pos < size:
                avail = self.available(fh, rel, pos, size)
                n = self.push(chan.sock, fh, pos, avail - pos)
                if n == 0:
                    raise CopyError(f"{rel} on this Mac ended at {pos} bytes, expected {size}", "short")
                pos += n
                with self.lock:
                    self.sent += n
                    self.by_address[address] += n
        answer = chan.line()
        if not answer.get("ok"):
            raise CopyError(answer.get("error") or f"the receiver did not keep {rel}", "sha256")
        self.results[rel] = {"bytes": size - offset, "resumed": offset}

    def push(self, sock, fh, offset, count):
        """Hand count bytes of fh from offset to the socket (sendfile(2) where the OS has it)."""
        return sock.sendfile(fh, offset, count)

    def source(self, rel):
        """The open file to read rel from: its final name, or (follow) its temporary one."""
        full = os.path.join(self.root, rel)
        if not self.follow:
            return open(full, "rb")
        waited_from = self.clock()
        while True:
            for path in (full, part_path(self.root, rel)):
                try:
                    return open(path, "rb")
                except FileNotFoundError:
                    continue
            if self.clock() - waited_from > self.stall:
                raise CopyError(f"{rel} has not started to arrive on this Mac for {self.stall} s", "upstream")
            self.sleep(FOLLOW_POLL)

    def available(self, fh, rel, pos, size):
        """How far fh can be read (its size, up to `size`); follow: wait for more than pos."""
        if not self.follow:
            return size  # a file shorter than its manifest says ends the sendfile early: "short"
        have = min(os.fstat(fh.fileno()).st_size, size)
        since = self.clock()
        while have <= pos:
            if self.clock() - since > self.stall:
                raise CopyError(
                    f"{rel} stopped growing on this Mac at {pos} of {size} bytes for {self.stall} s", "upstream"
                )
            self.sleep(FOLLOW_POLL)
            have = min(os.fstat(fh.fileno()).st_size, size)
        return have


# ---- the receiver as a process of its own -------------------------------------------------
# model_receive starts the receiver detached (it outlives the module, which returns its port):
# `python -c BOOT <run_id>`, this file's source and the settings on stdin, so the run_id is in
# its arguments (model_receive ends it by PID only when they still name it).
BOOT = (
    "import sys, types; d = sys.stdin.buffer.read(); s, c = d.split(b'\\0', 1); "
    "m = types.ModuleType('mlx_copy'); exec(compile(s, 'mlx_copy', 'exec'), m.__dict__); "
    "m.receiver_main(c)"
)


def receiver_argv(python, run_id):
    return [python, "-c", BOOT, "mlx-cluster-receive", run_id]


def own_source():
    """This file's source, from wherever it was imported (a file, or Ansible's module zip)."""
    loader = globals().get("__loader__")
    src = loader.get_source(__name__) if loader is not None and hasattr(loader, "get_source") else None
    if src is None:
        with open(__file__, encoding="utf-8") as fh:
            src = fh.read()
    return src.decode("utf-8") if isinstance(src, bytes) else src  # ansible's collection loader gives bytes


def write_json(path, data):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def receiver_main(settings):
    """The detached receiver: bind, say the port on stdout (one JSON line), serve, write STATUS."""
    cfg = json.loads(settings.decode("utf-8"))
    root = cfg["root"]
    status = os.path.join(root, STATUS)
    try:
        rx = Receiver(
            root,
            cfg["files"],
            cfg["token"],
            cfg["addresses"],
            stall=cfg["stall"],
            idle=cfg["idle"],
            report=cfg.get("report", False),
            compare=cfg.get("compare"),
            more=cfg["more"],
        )
        rx.prepare()
        port = rx.bind()
    except (CopyError, OSError) as exc:
        sys_stdout_line({"error": getattr(exc, "msg", None) or str(exc)})
        return
    write_json(status, {"state": "running", "pid": os.getpid(), "port": port})
    sys_stdout_line({"port": port, "pid": os.getpid(), "unused": rx.unused})
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # model_receive has read its line and gone
    result = rx.serve()
    if rx.reported.is_set():  # its sender has the result: nothing to collect, nothing left behind
        remove_own(status, os.path.join(root, LOG))
        return
    result.update(state="done", pid=os.getpid())
    write_json(status, result)


def remove_own(status, log):
    """Remove the receiver's status, and its log when it said nothing."""
    for path in (status, log):
        try:
            if path == status or os.path.getsize(path) == 0:
                os.unlink(path)
        except OSError:
            pass


def sys_stdout_line(obj):
    os.write(1, (json.dumps(obj) + "\n").encode("utf-8"))
