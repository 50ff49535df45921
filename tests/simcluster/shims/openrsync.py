"""`rsync` on a simulated Mac: macOS's openrsync, modelled over the machine's GNU rsync.

Since macOS 15.4 `/usr/bin/rsync` is openrsync (Apple's fork of OpenBSD's, published as
github.com/apple-oss-distributions/rsync, directory openrsync/). There is no openrsync for
Linux to install, so this shim keeps openrsync's *interface* and runs GNU rsync underneath:

- Options: parsed like openrsync's `rsync_getopt` (main.c `rsync_shopts`/`rsync_lopts`,
  read from tags rsync-146 = macOS 15.4 and rsync-170/174.40.1/182 = macOS 26), with macOS
  libc's getopt_long (Libc stdlib/FreeBSD/getopt_long.c, built GNU_COMPATIBLE): a unique
  prefix of a long option is taken, an option openrsync lacks is refused with
  `rsync: unrecognized option `--x'` (long) or `rsync: invalid option -- x` (short), the
  usage text on stderr and exit code 1 (usage(ERR_SYNTAX)). macOS 15.x lacks --log-file,
  --log-file-format and --print-flist-chunk-size (added in rsync-170).
- `--version` (or -V) prints openrsync's two lines and exits 0 as soon as it is parsed
  (main.c case 'V'): options after it are not looked at, options before it are.
- Protocol 29 (extern.h RSYNC_PROTOCOL), as client and as `--server`: GNU rsync runs with
  `--protocol=29`, so the peer (GNU or this shim) negotiates 29 as with a real Mac.
- Itemized output, when this end is the client: GNU's 11-letter `YXcstpoguax` is rewritten
  to openrsync's 9-letter `YXcstpog.` (log.c, the 'i' case of printf_doformat: flags u/a/x
  do not exist, the ninth is `+` for a new item or `?` for missing data), `*deleting   x`
  to `*deleting x` (sender.c file_deleted) and unchanged items GNU shows with -ii dropped.
- Unchanged files as the sender: not itemized, as Apple's source reads (rsync-182 uploader.c
  ~2358 skips items with no flags unless -ii/-vv; log.c log_item filters them on the sender;
  issue #30). An earlier reading (issue #11) had openrsync itemize every *unchanged* file as
  `<f.......` when it sends: ITEMIZE_UNCHANGED_AS_SENT = True models that (GNU runs with -ii so
  its receiver reports unchanged files, and their blank lines become `<f.......`), and the
  product's parser takes both (tests/sim/test_openrsync_shim.py runs each); a capture from a
  Mac would settle it.

- A far end whose login shell prints (text before rsync's protocol), when this end is the
  client: GNU rsync checks the version it reads and says "protocol version mismatch -- is your
  shell clean?"; openrsync has no such check (rsync-182 client.c reads the text as the version
  and the seed, io.c io_read_flush then reads it as a multiplex header) and fails with
  `rsync(PID): error: unexpected tag N (0x...), len L`, exit code 1. The shim rewrites GNU's
  lines into that one. N and L depend on the text, which the shim does not see: it names the
  header of a text whose ninth to twelfth bytes are "in: " (as in "Last login: ..."); a text
  whose twelfth byte is k, l or m gives "multiplex buffer overflow" instead (not modelled).

What is not modelled (GNU's behaviour stands): openrsync's own delta/transfer code, its
`-v`/`--stats`/`--progress` text, other error texts after option parsing, and macOS before
15.4 (samba rsync 2.6.9: this shim then runs GNU rsync as is).
"""

import os
import re
import subprocess
import sys
import threading

PROTOCOL = 29
VERSION_TEXT = "openrsync: protocol version 29\nrsync version 2.6.9 compatible\n"
GNU_RSYNC_CANDIDATES = ("/usr/bin/rsync", "/bin/rsync", "/usr/local/bin/rsync")
# See the module docstring: False is Apple's source as read for issue #30; True, issue #11's
# reading, stays a switch (tests run both).
ITEMIZE_UNCHANGED_AS_SENT = False

# main.c rsync_shopts: a letter followed by ':' takes an argument.
SHORT_OPTIONS = "0468B:CDEFHIKLOPRST:VWabcde:f:ghiklmnopqrtuvxyz"
# main.c rsync_lopts of rsync-170 (macOS 26) in table order: name -> takes an argument.
_LONG_26 = [
    ("address", True),
    ("append", False),
    ("archive", False),
    ("backup", False),
    ("backup-dir", True),
    ("block-size", True),
    ("blocking-io", False),
    ("bwlimit", True),
    ("cache", False),
    ("no-cache", False),
    ("checksum", False),
    ("checksum-seed", True),
    ("chmod", True),
    ("compare-dest", True),
    ("copy-dest", True),
    ("link-dest", True),
    ("compress", False),
    ("compress-level", True),
    ("contimeout", True),
    ("copy-dirlinks", False),
    ("copy-links", False),
    ("copy-unsafe-links", False),
    ("cvs-exclude", False),
    ("no-D", False),
    ("daemon", False),
    ("del", False),
    ("delete", False),
    ("delete-before", False),
    ("delete-during", False),
    ("delete-delay", False),
    ("delete-after", False),
    ("delete-excluded", False),
    ("devices", False),
    ("no-devices", False),
    ("dry-run", False),
    ("exclude", True),
    ("exclude-from", True),
    ("executability", False),
    ("existing", False),
    ("extended-attributes", False),
    ("filter", True),
    ("force", False),
    ("fuzzy", False),
    ("group", False),
    ("no-group", False),
    ("no-g", False),
    ("hard-links", False),
    ("help", False),
    ("human-readable", False),
    ("ignore-errors", False),
    ("ignore-existing", False),
    ("ignore-non-existing", False),
    ("ignore-times", False),
    ("include", True),
    ("include-from", True),
    ("inplace", False),
    ("ipv4", False),
    ("ipv6", False),
    ("keep-dirlinks", False),
    ("links", False),
    ("list-only", False),
    ("max-delete", True),
    ("max-size", True),
    ("min-size", True),
    ("motd", False),
    ("no-motd", False),
    ("no-links", False),
    ("no-l", False),
    ("numeric-ids", False),
    ("omit-dir-times", False),
    ("owner", False),
    ("no-owner", False),
    ("no-o", False),
    ("one-file-system", False),
    ("password-file", True),
    ("partial", False),
    ("no-partial", False),
    ("partial-dir", True),
    ("perms", False),
    ("no-perms", False),
    ("no-p", False),
    ("port", True),
    ("print-flist-chunk-size", False),
    ("prune-empty-dirs", False),
    ("protocol", True),
    ("quiet", False),
    ("read-batch", True),
    ("recursive", False),
    ("no-recursive", False),
    ("no-r", False),
    ("rsh", True),
    ("rsync-path", True),
    ("safe-links", False),
    ("sender", False),
    ("server", False),
    ("size-only", False),
    ("sockopts", True),
    ("specials", False),
    ("no-specials", False),
    ("sparse", False),
    ("stats", False),
    ("suffix", True),
    ("super", False),
    ("no-super", False),
    ("syslog-trace", False),
    ("temp-dir", True),
    ("timeout", True),
    ("times", False),
    ("no-times", False),
    ("no-t", False),
    ("update", False),
    ("verbose", False),
    ("no-verbose", False),
    ("no-v", False),
    ("whole-file", False),
    ("no-whole-file", False),
    ("no-W", False),
    ("only-write-batch", True),
    ("write-batch", True),
    ("progress", False),
    ("no-progress", False),
    ("relative", False),
    ("no-R", False),
    ("no-relative", False),
    ("remove-sent-files", False),
    ("remove-source-files", False),
    ("version", False),
    ("dirs", False),
    ("no-dirs", False),
    ("no-implied-dirs", False),
    ("files-from", True),
    ("from0", False),
    ("out-format", True),
    ("log-file", True),
    ("log-file-format", True),
    ("log-format", True),
    ("itemize-changes", False),
    ("delay-updates", False),
    ("modify-window", True),
    ("8-bit-output", False),
]
# rsync-146 (macOS 15.4 to 15.x) has neither client log file nor --print-flist-chunk-size.
_ADDED_IN_26 = {"log-file", "log-file-format", "print-flist-chunk-size"}
_LONG_15 = [o for o in _LONG_26 if o[0] not in _ADDED_IN_26]

# Long names that are one option in the table (same has_arg, flag and val).
_ALIASES = {"del": "delete", "remove-sent-files": "remove-source-files", "log-format": "out-format"}

USAGE = """usage: rsync [-0468BCDEFHIKLOPRSTWVabcdghiklnopqrtuvxyz] [-e program]
\t[-f filter] [--8-bit-output] [--address=sourceaddr] [--append]
\t[--backup-dir=dir] [--bwlimit=limit] [--cache | --no-cache]
\t[--checksum-seed=NUM] [--chmod=mode] [--compare-dest=dir] [--compress]
\t[--compress-level=NUM] [--contimeout] [--copy-dest=dir]
\t[--copy-unsafe-links] [--del]
\t[--delete-after | --delete-before | --delete-delay | --delete-during]
\t[--delete-excluded] [--delay-updates] [--dirs] [--no-dirs]
\t[--existing] [--exclude=pattern] [--exclude-from=file] [--executability]
\t[--extended-attributes]
\t[--existing] [--files-from=filespec] [--force] [--ignore-errors]
\t[--ignore-existing] [--ignore-non-existing] [--include=pattern]
\t[--include-from=file] [--inplace] [--itemize-changes]
\t[--keep-dirlinks] [--link-dest=dir] [--list-only]
\t[--max-delete=NUM] [--max-size=SIZE] [--min-size=SIZE]
\t[--modify-window=sec] [--no-implied-dirs] [--no-motd] [--numeric-ids]
\t[--out-format=FMT] [--partial] [--partial-dir] [--password-file=pwfile]
\t[--port=portnumber] [--progress] [--protocol=NUM] [--prune-empty-dirs]
\t[--read-batch=file] [--remove-source-files] [--rsync-path=program]
\t[--safe-links] [--size-only] [--sockopts=sockopts] [--specials]
\t[--stats] [--suffix] [--super] [--timeout=seconds]
\t[--only-write-batch=file | --write-batch=file]
\tsource ... directory
"""


class UsageError(Exception):
    """What macOS's getopt_long prints (without the `rsync: ` prefix) before the usage text."""


def macos_tuple(version):
    parts = []
    for x in (str(version).split(".") + ["0", "0"])[:2]:
        try:
            parts.append(int(x))
        except ValueError:
            parts.append(0)
    return tuple(parts)


def is_openrsync(macos):
    """/usr/bin/rsync is openrsync from macOS 15.4 on (rsync-146)."""
    return macos_tuple(macos) >= (15, 4)


def long_options(macos):
    return dict(_LONG_26 if macos_tuple(macos) >= (26, 0) else _LONG_15)


def parse_options(argv, macos):
    """openrsync's option parsing: [(name, value)] of the options up to `--version` or the end,
    and the operands. Long names are given in full, short ones as one letter. Raises
    UsageError with getopt_long's message for an option this openrsync does not have."""
    longs = long_options(macos)
    opts, operands, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            operands += argv[i:]
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name in longs:
                matches = [name]
            else:
                matches = [n for n in longs if n.startswith(name)]
                # getopt_long: a prefix of several options is ambiguous unless they are one
                # option under two names (same argument, flag and value in the table)
                if len({_ALIASES.get(m, m) for m in matches}) > 1:
                    raise UsageError(f"option `--{name}' is ambiguous")
            if not matches:
                raise UsageError(f"unrecognized option `{word}'")
            full = matches[0]
            if not longs[full]:
                if eq:
                    raise UsageError(f"option `--{name}' doesn't allow an argument")
                value = None
            elif not eq:
                if i >= len(argv):
                    raise UsageError(f"option `--{name}' requires an argument")
                value = argv[i]
                i += 1
            opts.append((full, value))
            if full == "version":
                return opts, operands
            continue
        if word.startswith("-") and word != "-":
            j = 1
            while j < len(word):
                ch = word[j]
                j += 1
                k = SHORT_OPTIONS.find(ch)
                if ch == ":" or k < 0:
                    raise UsageError(f"invalid option -- {ch}")
                if k + 1 < len(SHORT_OPTIONS) and SHORT_OPTIONS[k + 1] == ":":
                    if j < len(word):
                        value = word[j:]
                    elif i < len(argv):
                        value = argv[i]
                        i += 1
                    else:
                        raise UsageError(f"option requires an argument -- {ch}")
                    opts.append((ch, value))
                    break
                opts.append((ch, None))
                if ch == "V":
                    return opts, operands
            continue
        operands.append(word)  # getopt_long permutes: operands may come before options
    return opts, operands


def to_openrsync_item(line, sender, unchanged_as_sent=ITEMIZE_UNCHANGED_AS_SENT):
    """One line of GNU rsync's client output as openrsync prints it (None: not printed).

    GNU `%i` is 11 letters YXcstpoguax; openrsync's is 9, YXcstpog plus `+`/`?`/`.`.
    """
    m = re.match(r"^\*deleting\s+(.*)$", line)
    if m:
        return f"*deleting {m.group(1)}"
    m = re.match(r"^([<>ch.])([fdLDS])([.+?cstTpoguax ]{9}) (.*)$", line)
    if not m:
        return line
    y, x, flags, rest = m.groups()
    if not flags.strip() and (y in ".h" or (y == "c" and x == "f")):
        # an item GNU lists only because -ii asked for every item
        if unchanged_as_sent and sender and y == "." and x == "f":
            return f"<f....... {rest}"
        return None
    if set(flags) == {"+"}:
        nine = "+" * 7
    elif set(flags) == {"?"}:
        nine = "?" * 7
    else:
        nine = flags[:6] + "."
    item = y + x + nine
    if (y in ".h" or (y == "c" and x == "f")) and set(item[2:]) == {"."}:
        item = item[:2] + " " * 7
    return f"{item} {rest}"


# GNU rsync's lines for text before the protocol (compat.c), and what openrsync prints instead
# (see the module docstring): the header "in: " read little-endian, its top byte minus 7 the tag.
_GNU_NOT_CLEAN = ("protocol version mismatch -- is your shell clean?", "(see the rsync manpage")
_HEADER = int.from_bytes(b"in: ", "little")


def to_openrsync_error(line, pid):
    """One line of GNU rsync's stderr as openrsync, the client, would put it: None drops it."""
    if line.startswith(_GNU_NOT_CLEAN[0]):
        tag = (_HEADER >> 24) - 7
        return f"rsync({pid}): error: unexpected tag {tag} (0x{_HEADER:x}), len {_HEADER & 0xFFFFFF}"
    if line.startswith(_GNU_NOT_CLEAN[1]) or line.startswith("rsync error: protocol incompatibility"):
        return None
    return line


def gnu_rsync():
    shim = os.path.realpath(sys.argv[0])
    for path in GNU_RSYNC_CANDIDATES:
        if os.path.exists(path) and os.path.realpath(path) != shim:
            return path
    return None


def plan(argv, macos):
    """What the shim does with `rsync argv` on a Mac running `macos`:
    ("print", stdout, stderr, rc) for --version/--help/refusals, or
    ("run", gnu_argv_tail, rewrite, client) to run GNU rsync with gnu_argv_tail, rewriting its
    stdout when rewrite is "sender" or "receiver" (None: pass it through), and its stderr into
    openrsync's words when client (openrsync as the client, not --server) is True."""
    if not is_openrsync(macos):
        return ("run", list(argv), None, False)
    try:
        opts, operands = parse_options(argv, macos)
    except UsageError as exc:
        return ("print", "", f"rsync: {exc}\n{USAGE}", 1)
    names = [n for n, _ in opts]
    if names and names[-1] in ("version", "V"):
        return ("print", VERSION_TEXT, "", 0)
    if "help" in names or (names == ["h"] and len(argv) == 1):
        return ("print", USAGE, "", 0)
    tail = [a for a in argv if not a.startswith("--protocol")]
    if "server" in names:
        return ("run", [f"--protocol={PROTOCOL}", *tail], None, False)
    itemizing = any(n in ("out-format", "log-format") and v and "%i" in v for n, v in opts) or any(
        n in ("i", "itemize-changes") for n in names
    )
    # the sender: the last operand (the destination) is remote, host:path
    sender = bool(operands) and re.match(r"^[^/:]+:", operands[-1]) is not None
    extra = []
    if itemizing and sender and ITEMIZE_UNCHANGED_AS_SENT:
        extra = ["-ii"]
    return (
        "run",
        [f"--protocol={PROTOCOL}", *extra, *tail],
        ("sender" if sender else "receiver") if itemizing else None,
        True,
    )


def cmd_rsync(ctx, args):
    """The `rsync` command of a simulated Mac (see the module docstring)."""
    action = plan(args, ctx.cfg.get("macos", "26.0"))
    gnu = gnu_rsync()
    if action[0] == "print":
        _, stdout, stderr, rc = action
        sys.stdout.write(stdout)
        sys.stderr.write(stderr)
        return rc
    if gnu is None:
        sys.stderr.write("rsync: the simulation needs GNU rsync on the machine (apt-get install rsync)\n")
        return 127
    _, tail, rewrite, client = action
    sys.stdout.flush()
    if not client:
        os.execv(gnu, [gnu, *tail])
    proc = subprocess.Popen(
        [gnu, *tail],
        stdout=subprocess.PIPE if rewrite else None,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",
    )
    garbled = []

    def errors():
        for line in proc.stderr:
            shown = to_openrsync_error(line.rstrip("\n"), os.getpid())
            garbled.append(shown != line.rstrip("\n"))
            if shown is not None:
                sys.stderr.write(shown + "\n")
                sys.stderr.flush()

    reader = threading.Thread(target=errors, daemon=True)
    reader.start()
    if rewrite:
        for line in proc.stdout:
            shown = to_openrsync_item(line.rstrip("\n"), rewrite == "sender")
            if shown is not None:
                sys.stdout.write(shown + "\n")
                sys.stdout.flush()
    rc = proc.wait()
    reader.join()
    # openrsync's client fails with 1 there (client.c: rc stays 1), GNU with 2
    return 1 if rc and any(garbled) else rc
