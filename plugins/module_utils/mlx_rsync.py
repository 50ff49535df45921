# -*- coding: utf-8 -*-
"""Pure helpers for copying a model directory with rsync (the model sync stage).

Nothing here runs a command or touches a file: `library/model_rsync.py` runs rsync and hands
its output to `parse_itemized`; `library/model_manifest.py` walks a directory and hands the
listings to `compare_manifests`.

Two rsync implementations have to work, because the sending side is either the controller
(GNU rsync 3.x on Linux, or a Mac) or rank 0 (a Mac), and the receiving side is a Mac:

- GNU rsync 3.x (samba.org), and Apple's old 2.6.9 before macOS 15.4;
- openrsync, `/usr/bin/rsync` on macOS 15.4 and later ("openrsync: protocol version 29",
  "rsync version 2.6.9 compatible"; Apple's source: github.com/apple-oss-distributions/rsync,
  openrsync/, tags rsync-146 for 15.4 and rsync-170 and later for macOS 26).

Both take `-i`/`--itemize-changes` and `--out-format`; the argv asks for `--out-format=%i %n%L`
(what `-i` means in both) and only long options both have. `--log-file` is GNU 3.x and
openrsync from macOS 26 only (rsync-146 has none; both openrsyncs print the same --version,
so the module asks rsync itself, see LOG_FILE_PROBE). The itemize strings come in two dialects:

    GNU 3.x   YXcstpoguax   `>f+++++++++ model.safetensors`   (11 characters)
    openrsync YXcstpog.     `>f+++++++ model.safetensors`     (9 characters, log.c)

Y is the update type (`<` sent, `>` received, `c` local change or creation, `h` hard link,
`.` no data moved, `*` a message such as `*deleting`), X the file type (f d L D S). A `c`
without `+` in the flags (an existing item changed locally) is not a creation for a directory.

A file line whose update type says sent or received but whose flags are all dots
(`<f.......`) names no difference at all: mlx-cluster issue #11 reads openrsync, as the
sender, as listing every *unchanged* file that way, which would make every re-run look
changed. Such lines go to `unchanged`, not `transferred`. With the options used here (no
--ignore-times) a real transfer always carries a reason (`s`, `t`, `c` or `+`) - except on
a macOS 15.x receiver, whose itemizer has no size flag, for a file whose size changed but
whose time did not; the manifest comparison after the copy still checks every size.
"""

from __future__ import annotations

import os
import posixpath
import re

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_copy import (
    OWN_PREFIX,
    PART_SUFFIX,
    file_sha256,
    rel_problem,
    sha256_file,
)
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import SAFE_PATH
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_parse import to_text
from ansible_collections.mlx.cluster.plugins.module_utils.mlx_ssh import explain_ssh_failure

RSYNC_COMMAND = "rsync"
# What `-i` means in GNU rsync and openrsync alike.
OUT_FORMAT = "%i %n%L"
# Does this rsync take --log-file? Both stop at --version, after parsing what comes before it:
# rc 0 means accepted (GNU 3.x, openrsync of macOS 26), rc 1 with "unrecognized option" not.
LOG_FILE_PROBE = ("--log-file=/dev/null", "--version")
# Weight files: the ones the sha256 manifest covers (a divergent shard is what breaks a run).
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz", ".bin")
# Offline for every run: nothing in this stage may reach a model hub.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# `--progress` (GNU rsync 3.x and openrsync alike): while a file is sent, one update at a time
# ended by a carriage return, then a last one ended by a newline carrying the transfer count:
#   GNU 3.x    "     22,085,632  73%   19.24MB/s    0:00:00\r"     (%15s, thousands commas)
#              "     30,000,000 100%   19.91MB/s    0:00:01 (xfr#2, to-chk=2/5)\n"
#   openrsync  "       22085632  73%   19.24MB/s   00:00:00\r"     (client.c rsync_progress:
#              "       30000000 100%   19.91MB/s   00:00:01 (xfer#2, to-check=2/5)\n"  " %14llu %3.0f%%")
# openrsync leaves the rate out below 1 KB/s; only the bytes of the file so far are read here.
PROGRESS_OPTION = "--progress"
_PROGRESS = re.compile(r"^\s*(\d[\d,.]*)\s+(\d{1,3})%")
_PROGRESS_DONE = re.compile(r"\(xfe?r#\d+")
# How far back the rate looks (seconds): long enough to smooth per-file pauses, short enough
# to follow a link that slows down.
RATE_WINDOW = 5.0

_ITEM = re.compile(r"^([<>ch.])([fdLDS])([.+?cstTpoguaxnbz]{7,9}) (.*)$")
_DELETING = re.compile(r"^\*deleting\s+(.*)$")
_SAFE_SSH_WORD = re.compile(r"[^'\"\\\s]+")


def is_weight_file(rel):
    """True for the weight files the sha256 manifest covers (by suffix, case-insensitive)."""
    return rel.lower().endswith(WEIGHT_SUFFIXES)


def _strip_link(kind, name):
    """`%L` appends ` -> target` to a symlink and ` => target` to a hard link: keep the name."""
    for sep, kinds in ((" -> ", "L"), (" => ", "fLDS")):
        if kind in kinds and sep in name:
            return name.split(sep, 1)[0]
    return name


def parse_itemized(text):
    """Read rsync's itemized output (`--out-format=%i %n%L` or `-i`), real run or `--dry-run`.

    Returns {"changed", "transferred", "created", "deleted", "attrs_only", "unchanged"}:
    - transferred: file data sent or received (Y is `<` or `>`), or changed in place
      (`.` with a checksum `c` or size `s` flag: a symlink target, a device);
    - created: a new directory, symlink or special file (`+` flags), a hard link (`h`), or a
      changed symlink (`cL` without `+`);
    - deleted: `*deleting` lines (only with --delete);
    - attrs_only: only time, permission, owner or group differ (`.f..t......`, `.d..t......`,
      and openrsync's `cd..t....`): rsync fixes them, but nothing in the model changed;
    - unchanged: files itemized as sent or received with no difference at all (`<f.......`,
      see the module docstring): not a change.
    changed is true when anything was transferred, created or deleted. Lines that are not
    items ("created directory x", warnings, a stats block) are ignored.
    """
    text, _ = to_text(text, RSYNC_COMMAND)
    out = {"transferred": [], "created": [], "deleted": [], "attrs_only": [], "unchanged": []}
    for line in text.splitlines():
        line = line.rstrip("\r")
        m = _DELETING.match(line)
        if m:
            out["deleted"].append(m.group(1))
            continue
        m = _ITEM.match(line)
        if not m:
            continue
        update, kind, flags, name = m.groups()
        name = _strip_link(kind, name)
        new = "+" in flags
        content = flags[0] == "c" or flags[1] == "s"
        others = any(ch not in ".+" for ch in flags)
        if update in "<>" and kind == "f" and not flags.strip("."):
            out["unchanged"].append(name)
        elif update in "<>":
            out["transferred"].append(name)
        elif update == "h" or (update == "c" and (new or kind != "d")):
            out["created"].append(name)
        elif new:
            out["created"].append(name)
        elif content and kind != "d":
            out["transferred"].append(name)
        elif others:
            out["attrs_only"].append(name)
    return with_changed(out)


class CopyProgress:
    """What rsync has sent so far, from its `--progress` output fed as it arrives.

    `feed(text, now)` takes any piece of rsync's standard output (item lines, progress updates
    ended by a carriage return or a newline, a line cut in two by the pipe) and the time it
    arrived (seconds on a monotonic clock); `state(now)` is what the module writes to its
    progress file: {"bytes": sent so far, "files": files finished, "total": the model's size
    (None when not known), "rate": bytes per second over about the last RATE_WINDOW seconds
    (None before anything moved), "elapsed": seconds since the first piece, "done"}. A file's
    bytes count once: the last update of a file that is done, the latest of the file being sent.
    """

    def __init__(self, total=None):
        self.total = total
        self.done_bytes = 0
        self.current = 0
        self.files = 0
        self.start = None
        self._partial = ""
        self._samples = []  # (time, bytes) readings, the oldest at most RATE_WINDOW back

    @property
    def bytes(self):
        return self.done_bytes + self.current

    def _begin(self, now):
        """The first reading: the elapsed time and the rate count from here."""
        if self.start is None:
            self.start = now
            self._samples = [(now, 0)]

    def feed(self, text, now):
        """Read a piece of output; True when the bytes sent moved."""
        self._begin(now)
        before = self.bytes
        pieces = re.split(r"[\r\n]", self._partial + text)
        self._partial = pieces.pop()
        for piece in pieces:
            m = _PROGRESS.match(piece)
            if not m:
                continue
            sent = int(re.sub(r"[,.]", "", m.group(1)))
            if sent < self.current:
                # a file's updates only grow: this is the next file, the last one ended
                # without its closing update (a failed file); what it sent counts
                self.done_bytes += self.current
            if _PROGRESS_DONE.search(piece):
                self.done_bytes += sent
                self.files += 1
                self.current = 0
            else:
                self.current = sent
        if self.bytes == before:
            return False
        self._samples.append((now, self.bytes))
        return True

    def count(self, sent, files, now):
        """For a copy that counts its own bytes (model_send): `sent` bytes and `files` files
        done so far; True when the bytes sent moved."""
        self._begin(now)
        if sent == self.bytes:
            return False
        self.done_bytes, self.current, self.files = sent, 0, files
        self._samples.append((now, sent))
        return True

    def rate(self, now):
        """Bytes per second since the oldest reading of the window (it falls while nothing
        arrives); None before anything moved."""
        while len(self._samples) > 2 and self._samples[1][0] <= now - RATE_WINDOW:
            self._samples.pop(0)
        if not self.bytes or not self._samples or now <= self._samples[0][0]:
            return None
        t0, b0 = self._samples[0]
        return (self.bytes - b0) / (now - t0)

    def state(self, now, done=False):
        return {
            "bytes": self.bytes,
            "files": self.files,
            "total": self.total,
            "rate": self.rate(now),
            "elapsed": round(now - self.start, 3) if self.start is not None else 0.0,
            "done": done,
        }


def without_progress(text):
    """rsync's output without its `--progress` updates (what a diff shows)."""
    text, _ = to_text(text, RSYNC_COMMAND)
    kept = [p for p in re.split(r"\r\n?|\n", text) if p and not _PROGRESS.match(p)]
    return "".join(p + "\n" for p in kept)


def _with_slash(path):
    return path if path.endswith("/") else path + "/"


def ssh_command(ssh, ssh_args=()):
    """The `-e` value for rsync: the ssh program and its options as one string.

    rsync takes its remote shell as one string and splits it on whitespace itself (GNU honours
    quotes, openrsync only roughly), so there is no argv form to hand over. Words are therefore
    refused, not quoted, when they hold whitespace, quotes or backslashes: write
    `-oHostKeyAlias=m2` or `-o HostKeyAlias=m2` as two words, never a quoted string.
    """
    words = [ssh] + [str(a) for a in ssh_args]
    bad = [w for w in words if not _SAFE_SSH_WORD.fullmatch(w)]
    if bad:
        raise ValueError(
            f"ssh argument {bad[0]!r} holds whitespace, a quote or a backslash; "
            "rsync's -e cannot carry it: pass each option and value as separate plain words"
        )
    return " ".join(words)  # one string is what -e takes (see above); every word was checked


def ssh_login(ssh_args):
    """The login user named by ssh options (`-l USER`, `-o User=USER`), for messages; None."""
    args = [str(a) for a in ssh_args or []]
    for i, a in enumerate(args):
        if a == "-l" and i + 1 < len(args):
            return args[i + 1]
        if a == "-o" and i + 1 < len(args) and args[i + 1].lower().startswith("user="):
            return args[i + 1].split("=", 1)[1]
    return None


def remote_spec(host, path):
    """`host:path` for rsync over ssh; just `path` for a local copy (host empty)."""
    return f"{host}:{path}" if host else path


# The own transport's files (mlx_copy) stay where they are: a record of verified files is only
# true of the directory whose files it measured, and a part file is that Mac's own unfinished copy.
OWN_EXCLUDES = [f"--exclude={OWN_PREFIX}*", f"--exclude=.*{PART_SUFFIX}"]


def rsync_argv(
    rsync,
    src,
    dest,
    ssh_command=None,
    dry_run=False,
    delete=False,
    checksum=False,
    log_file=None,
    rsync_path=None,
    progress=False,
    stall_timeout=0,
    excludes=(),
):
    """The rsync argv copying the *contents* of directory `src` into directory `dest`.

    `dest` is a local path or `host:path` (see remote_spec); both get a trailing slash, so the
    transfer (and any deletion) is confined to the model directory. Only long options that GNU
    rsync 3.x and openrsync both take are used:
      --recursive --copy-links --perms --times   the tree, symlinks (Hugging Face cache
                                                 snapshots) copied as the files they point to
      --whole-file                               no delta: the Thunderbolt link is faster than
                                                 re-reading 100 GB on both ends
      --out-format=%i %n%L                       the itemized changes `changed` is measured from
    log_file adds GNU rsync's `--log-file` (openrsync has none: the module checks first);
    rsync_path names the rsync to start on the far end (`--rsync-path`, both take it);
    progress adds `--progress` (both print it, see CopyProgress);
    stall_timeout > 0 adds `--timeout=N` (both take it: the copy ends when no data has moved
    for N seconds, GNU rsync's exit code 30; see explain_failure);
    excludes are `--exclude=PATTERN` words (both take it; see relay_excludes), after
    OWN_EXCLUDES (always).
    """
    argv = [rsync, "--recursive", "--copy-links", "--perms", "--times", "--whole-file", f"--out-format={OUT_FORMAT}"]
    if progress:
        argv.append(PROGRESS_OPTION)
    if checksum:
        argv.append("--checksum")
    if delete:
        argv.append("--delete")
    if dry_run:
        argv.append("--dry-run")
    if log_file:
        argv.append(f"--log-file={log_file}")
    if stall_timeout and stall_timeout > 0:
        argv.append(f"--timeout={int(stall_timeout)}")
    argv += OWN_EXCLUDES + list(excludes)
    if ssh_command:
        argv += ["--rsh", ssh_command]
    if rsync_path:
        argv.append(f"--rsync-path={rsync_path}")
    argv += [_with_slash(src), _with_slash(dest)]
    return argv


def check_dest(path, home):
    """None when `path` is a safe model directory to copy into (and maybe delete in), else why not.

    Refused: a relative path, `..`, whitespace or shell characters (the far end's shell reads
    the path), `/`, the home directory itself or any directory above it, a path fewer than two
    components below home (`~/models` could be a directory of the user's own), and a path
    outside home with fewer than two components (`/tmp`, `/Volumes`). `home` may be None or
    empty when unknown: the path must then have at least four components (two below a
    `/Users/<name>` home).
    """
    if not isinstance(path, str) or not path:
        return "the destination is empty"
    if not path.startswith("/"):
        return f"the destination {path!r} is not an absolute path"
    if not SAFE_PATH.fullmatch(path):
        return (
            f"the destination {path!r} holds whitespace or shell characters: use letters, digits "
            "and . _ - + @ % = , : only"
        )
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return f"the destination {path!r} holds '.' or '..' components"
    norm = "/" + "/".join(parts)
    if norm == "/":
        return "the destination is / (the whole disk)"
    if home:
        home_parts = [p for p in posixpath.normpath(home).split("/") if p]
        if parts == home_parts:
            return f"the destination {norm} is the home directory itself"
        if home_parts[: len(parts)] == parts:
            return f"the destination {norm} is above the home directory {home}"
        if parts[: len(home_parts)] == home_parts:
            below = len(parts) - len(home_parts)
            if below < 2:
                return (
                    f"the destination {norm} is only {below} level below the home directory {home}: "
                    "use a dedicated directory at least two levels down (e.g. ~/mlx-cluster/models/<name>)"
                )
            return None
    if not home and len(parts) < 4:
        return (
            f"the destination {norm} has fewer than four components and the home directory of the "
            "destination is not known: use a dedicated directory (e.g. ~/mlx-cluster/models/<name>)"
        )
    if len(parts) < 2:
        return f"the destination {norm} is a top-level directory: use a dedicated directory below it"
    return None


def walk(root, with_sha=False, hashes=None):
    """({rel: {"size", "mtime", "sha256"?}}, warnings) of every file under root, links followed
    (as the sync copies them), loops cut, the copy's own files (its record, files still
    arriving) left out. With `with_sha` the sha256 of the weight files; with `hashes`
    (mlx_copy.Hashes) every file's, from its record where it matches. A link to nothing is a
    warning; a file that cannot be read for its hash raises OSError."""
    files, seen, warnings = {}, set(), []
    for top, dirs, names in os.walk(root, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back up the tree: rsync --copy-links would not end either
            warnings.append(f"{top} is a link loop; not walked again")
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel_problem(rel):  # the copy's own record and files still arriving
                continue
            try:
                st = os.stat(full)
            except OSError as exc:
                warnings.append(f"{rel}: {exc.strerror} (a link to nothing?); skipped")
                continue
            entry = {"size": st.st_size, "mtime": int(st.st_mtime)}
            if hashes is not None:
                entry["sha256"] = file_sha256(root, rel, hashes)
            elif with_sha and is_weight_file(rel):
                entry["sha256"] = sha256_file(full).hexdigest()
            files[rel] = entry
    return files, warnings


def _size(entry):
    return entry.get("size") if isinstance(entry, dict) else None


def _problem(host, rel, kind, expected, got, msg):
    return {"host": host, "file": rel, "kind": kind, "expected": expected, "got": got, "msg": msg}


def compare_manifests(source, by_host):
    """Problems between the source manifest and each host's: [] when every host matches.

    source:  {rel: {"size": int, "sha256": str (optional)}}
    by_host: {host: {rel: {...}} or None (directory missing)}
    A problem is {"host", "file", "kind", "expected", "got", "msg"}, kind one of:
    missing_dir (nothing of the model on the host), missing (a source file absent), size,
    sha256 (compared only where both sides carry one), extra_weight (a weight file the source
    does not have: MLX would load a stale shard). Extra non-weight files are not problems.
    Hosts and files come out sorted, so the result is deterministic.
    """
    problems = []
    for host in sorted(by_host):
        files = by_host[host] or {}
        if source and not any(rel in files for rel in source):
            total = sum(_size(e) or 0 for e in source.values())
            problems.append(
                _problem(
                    host,
                    "*",
                    "missing_dir",
                    f"{len(source)} files, {total} bytes",
                    f"{len(files)} of them",
                    f"{host}: none of the model's {len(source)} files is there",
                )
            )
            continue
        for rel in sorted(source):
            want, have = source[rel], files.get(rel)
            if have is None:
                problems.append(
                    _problem(
                        host,
                        rel,
                        "missing",
                        _size(want),
                        None,
                        f"{host}: {rel} is missing ({_size(want)} bytes on the source)",
                    )
                )
                continue
            if _size(want) != _size(have):
                problems.append(
                    _problem(
                        host,
                        rel,
                        "size",
                        _size(want),
                        _size(have),
                        f"{host}: {rel} is {_size(have)} bytes, expected {_size(want)} (as on the source)",
                    )
                )
                continue
            want_sha = want.get("sha256") if isinstance(want, dict) else None
            have_sha = have.get("sha256") if isinstance(have, dict) else None
            if want_sha and have_sha and want_sha != have_sha:
                problems.append(
                    _problem(
                        host,
                        rel,
                        "sha256",
                        want_sha,
                        have_sha,
                        f"{host}: {rel} has sha256 {have_sha[:16]}..., expected {want_sha[:16]}... (divergent copy)",
                    )
                )
        for rel in sorted(set(files) - set(source)):
            if is_weight_file(rel):
                problems.append(
                    _problem(
                        host,
                        rel,
                        "extra_weight",
                        None,
                        _size(files[rel]),
                        f"{host}: {rel} is a weight file the source does not have "
                        "(MLX would load it): remove it or sync with delete",
                    )
                )
    return problems


# GNU rsync's exit code for "timeout in data send/receive" (errcode.h RERR_TIMEOUT).
RSYNC_STALLED = 30
# openrsync's words (Apple's rsync-182 openrsync/io.c io_read_flush, client.c rsync_client) when
# the far end's bytes are not its protocol: a header with an unknown tag, a header whose length
# overflows the message buffer, or a "version" read from text with the high bit set (negative).
_OPENRSYNC_GARBLED = re.compile(
    r"error: (unexpected tag -?\d+|multiplex buffer overflow|remote protocol -\d+ is older than)"
)


def explain_failure(rc, stderr, host, dest, source, name=None, user=None, trust="yours", stall_timeout=0):
    """One message for a failed rsync: what failed, between which machines, and the fix. `name`
    is the Mac's inventory name (default `host`), `user` its login, `trust` whose ssh keys are
    used (see mlx_ssh.explain_ssh_failure), `stall_timeout` the `--timeout` the copy ran with."""
    err = stderr or ""
    low = err.lower()
    where = f"{host}:{dest}" if host else dest
    first = next((line.strip() for line in err.splitlines() if line.strip()), f"exit code {rc}").rstrip(".")
    if stall_timeout and (rc == RSYNC_STALLED or "io timeout" in low or "timeout in data" in low):
        return (
            f"rsync into {where} from {source} stalled: no data moved for {stall_timeout} s, so the "
            f"copy was ended ({first}). What was copied stays: the next run resumes it. Fix: check "
            f"the cable or link between {source} and {name or host or source} and both disks, then "
            "re-run the models stage; for a link that is only slow, raise model_sync_stall_timeout"
        )
    if host:
        # the far end's rsync answered (so ssh itself worked): its own words first
        if ("command not found" in low or "rsync: not found" in low) and "rsync" in low:
            return (
                f"rsync into {where} failed: rsync is not installed on {host} ({first}). Fix: macOS "
                "ships /usr/bin/rsync; on another system install rsync"
            )
        shell_fix = (
            "keep ~/.zshenv silent (zsh reads it for every command run over ssh; bash: ~/.bashrc): "
            "move what prints to ~/.zshrc, or run it only in an interactive shell "
            f"(`[[ -o interactive ]] && ...`); `ssh {host} true` run on {source} must print nothing"
        )
        who = name or host
        if "is your shell clean" in low or "protocol version mismatch" in low:
            # GNU rsync's words when the far end's login shell printed text before rsync spoke
            return (
                f"rsync into {where} failed: the login shell on {who} prints text for a command run "
                f"over ssh, which rsync's protocol cannot pass ({first}). Fix: on {who}, {shell_fix}"
            )
        if _OPENRSYNC_GARBLED.search(err):
            # openrsync (a Mac's rsync) has no such check: text before the protocol is read as
            # the version, the seed and then multiplex headers, and the first bad header fails
            return (
                f"rsync into {where} failed: what came back from {who} was not rsync's protocol "
                f"({first}); most often the login shell on {who} prints text for a command run "
                f"over ssh. Fix: on {who}, {shell_fix}. If that prints nothing, the two rsyncs "
                f"disagree: install rsync 3.x on both (e.g. `brew install rsync`) and point "
                "model_sync_rsync_path at it (e.g. /opt/homebrew/bin/rsync)"
            )
        if "unknown option" in low or "unrecognized option" in low:
            return (
                f"rsync into {where} failed: one rsync does not understand an option of the other "
                f"({first}). Fix: install rsync 3.x on {host} (e.g. `brew install rsync`) and point "
                "model_sync_rsync_path at it (e.g. /opt/homebrew/bin/rsync)"
            )
        ssh_msg = explain_ssh_failure(err, rc, source, name or host, host, user, trust=trust)
        if ssh_msg:
            return ssh_msg
    if "no space left on device" in low:
        return f"rsync into {where} failed: the disk is full ({first}). Fix: free space on {host or source}"
    return f"rsync into {where} failed with exit code {rc}: {first}"


def parse_rsync_version(text):
    """`rsync --version` -> {"flavour": "openrsync"|"rsync", "version": str|None, "log_file": bool}.

    log_file says whether the client takes `--log-file`, as far as the text tells: GNU rsync
    3.0 and later yes, 2.x no. openrsync prints the same two lines on macOS 15.4 (no
    --log-file) and macOS 26 (--log-file): log_file is then None, ask rsync (LOG_FILE_PROBE).
    """
    text, _ = to_text(text, "rsync --version")
    if "openrsync" in text.lower():
        m = re.search(r"rsync version (\d+(?:\.\d+)*) compatible", text)
        return {"flavour": "openrsync", "version": m.group(1) if m else None, "log_file": None}
    m = re.search(r"rsync\s+version\s+v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return {"flavour": "unknown", "version": None, "log_file": False}
    version = ".".join(g for g in m.groups() if g is not None)
    return {"flavour": "rsync", "version": version, "log_file": int(m.group(1)) >= 3}


# ---- relaying a copy that is still arriving (model_sync_source: tree) -------------------------
# A Mac of the tree passes each file on as soon as that file is complete in its own copy, while
# its own sender is still writing the rest. GNU rsync and openrsync alike receive a file into a
# temporary `.<name>.XXXXXX` beside it (openrsync: `.<name>.XXXXXXXXXX`), set its times (our argv
# has --times) and rename it into place when it is whole: a file under its final name with the
# source's size and modification time is complete.

# Seconds between two looks at the copy while waiting (a stat of each file, no rsync): a file
# that became complete waits half of this on average before its pass starts.
RELAY_POLL = 0.2
# A relay's passes share one SSH connection (relay_master_args): the master waits this many
# seconds idle after the last pass, so one left behind by a module that was killed ends by itself.
RELAY_MASTER_IDLE = 30
# The longest a Mac waits on its own copy without anything arriving when stall_timeout is 0
# (no bound of rsync's own): a sender whose upstream failed must not wait for ever.
RELAY_WAIT_DEFAULT = 600
_PATTERN_SPECIAL = re.compile(r"([*?\[\]\\])")


def file_complete(want, have):
    """True when a file is complete in the copy: `want` the source's {"size", "mtime"} (mtime in
    whole seconds, model_manifest), `have` (size, mtime) of the file under its final name or None."""
    if have is None or not isinstance(want, dict):
        return False
    size, mtime = have
    return size == want.get("size") and want.get("mtime") is not None and int(mtime) == int(want["mtime"])


def complete_files(wait_for, stats):
    """The relative paths of `wait_for` ({rel: {size, mtime}}) complete in `stats` ({rel: (size, mtime)})."""
    return {rel for rel, want in wait_for.items() if file_complete(want, stats.get(rel))}


def _literal(text):
    """`text` as a literal in an rsync pattern that holds a wildcard (both honour the backslash then)."""
    return _PATTERN_SPECIAL.sub(r"\\\1", text)


def relay_excludes(pending):
    """`--exclude` words keeping the files not yet complete, and their rsync temporary names,
    out of a pass: anchored at the top of the transfer (`/rel`), so only that path matches.

    `a/b.safetensors` -> `--exclude=/a/b.safetensors`, `--exclude=/a/.b.safetensors.*`.
    """
    out = []
    for rel in sorted(pending):
        parent, name = posixpath.split(rel)
        head = "/" + (parent + "/" if parent else "")
        literal = _PATTERN_SPECIAL.search(rel) is not None
        out.append("--exclude=" + (_literal(head + name) if literal else head + name))
        out.append("--exclude=" + _literal(head + "." + name) + ".*")
    return out


def relay_master_args(control_path):
    """ssh options that make a relay's rsync passes share one SSH connection: the first pass's
    ssh becomes the master (in the background, idle for RELAY_MASTER_IDLE seconds at most), the
    later passes run over it, without a handshake each. `control_path` is a socket path of the
    module's own (a private temporary directory), so no one else's master is used or left."""
    return [
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={control_path}",
        "-o",
        f"ControlPersist={RELAY_MASTER_IDLE}",
    ]


def relay_master_exit_argv(ssh, control_path, host):
    """Ends the master of relay_master_args() (`ssh -O exit`): run once the passes are done."""
    return [ssh, "-o", f"ControlPath={control_path}", "-O", "exit", host]


def with_changed(items):
    """`items` (parse_itemized's lists) with `changed`: true when anything was transferred,
    created or deleted (time or permission fixes and unchanged files do not count)."""
    items["changed"] = bool(items["transferred"] or items["created"] or items["deleted"])
    return items


def merge_itemized(results):
    """parse_itemized results of several passes into one: each list in first-seen order without
    repeats; a file sent in one pass and itemized again in a later one counts as sent only."""
    keys = ("transferred", "created", "deleted", "attrs_only", "unchanged")
    out = {k: [] for k in keys}
    for res in results:
        for k in keys:
            for item in res.get(k, ()):
                if item not in out[k]:
                    out[k].append(item)
    sent = set(out["transferred"])
    out["attrs_only"] = [i for i in out["attrs_only"] if i not in sent]
    out["unchanged"] = [i for i in out["unchanged"] if i not in sent]
    return with_changed(out)


class UpstreamStalled(Exception):
    """Nothing arrived in the copy for `waited` seconds; `complete`/`pending` its files."""

    def __init__(self, complete, pending, waited):
        super().__init__("upstream stalled")
        self.complete, self.pending, self.waited = complete, pending, waited


def stall_message(source, dest_name, upstream, complete, pending, waited):
    """The failure of a Mac that waited in vain on its own copy to pass the model on."""
    shown = ", ".join(sorted(pending)[:3]) + (", ..." if len(pending) > 3 else "")
    return (
        f"{source} stopped waiting to pass the model on to {dest_name}: its own copy from "
        f"{upstream} has not grown for {waited:.0f} s ({len(complete)} of "
        f"{len(complete) + len(pending)} files complete; not yet: {shown}). The copy into "
        f"{source} is what stopped: its own failure (task 'Copy the model along the cables', "
        f"{source}'s copy from {upstream}) names the cause. Fix that, then re-run the models "
        "stage: what was copied stays and every copy resumes"
    )


def relay_passes(wait_for, look, run_pass, clock, sleep, wait_limit, poll=RELAY_POLL):
    """Pass a copy on while it arrives: the rsync passes a relaying Mac runs.

    wait_for: the source's files {rel: {size, mtime}}; look(): {rel: (size, mtime)} of every
    file in this Mac's copy now (temporary ones included); run_pass(excludes) runs one rsync
    pass and returns (rc, out, err, argv); clock() and sleep(s) as time.monotonic/time.sleep.

    Each time files have become complete since the last pass, one pass sends the copy with the
    files not yet complete excluded (relay_excludes); when all are complete, a last pass with no
    exclude, and the passes end. Between passes it looks at the copy every `poll` seconds. When
    no file grows or completes for `wait_limit` seconds it raises UpstreamStalled. Returns the
    passes' results [(rc, out, err, argv)], ending at the first that failed (rc != 0).
    """
    passes, sent, seen, since = [], None, None, clock()
    while True:
        stats = look()
        done = complete_files(wait_for, stats)
        now = clock()
        state = (frozenset(done), sum(size for size, _ in stats.values()))
        if state != seen:
            seen, since = state, now
        pending = set(wait_for) - done
        if not pending or (done and done != sent):
            result = run_pass(relay_excludes(pending))
            passes.append(result)
            if result[0] != 0 or not pending:
                return passes
            sent, since = done, clock()  # a pass is not waiting
            continue
        if now - since >= wait_limit:
            raise UpstreamStalled(sorted(done), sorted(pending), now - since)
        sleep(poll)
