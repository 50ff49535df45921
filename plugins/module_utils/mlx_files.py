# -*- coding: utf-8 -*-
"""Write a few small text files given inline (the module mlx_files, and its action plugin when
the files are the controller's own): what differs is written atomically, missing parent
directories are made, `changed` is measured per file.

One copy of the logic and of the argument spec for both: on a Mac the module runs it; on the
controller (delegate_to: localhost) the action plugin runs it in ansible-playbook's own
process, without starting a module (a Python process) for a few kilobytes.

Run as root for a user (a module with become writing the user's files), nothing the user can
change leads root elsewhere: a file that is a symbolic link is refused, never followed, and so
is a directory on the way that another user could swap (untrusted()).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

# The characters a path the toolkit hands to a shell, a forced command or a root path may hold:
# a remote shell reads rsync's destination (openrsync and rsync < 3.2.4 do not protect it),
# sshd's forced command is a shell line, pip splits virtualenv_command on spaces. Anything a
# shell could interpret is refused rather than quoted.
SAFE_PATH = re.compile(r"[A-Za-z0-9._/+@%=,:-]+")  # (fullmatch: "$" would let a last "\n" in)
# A launchd label: reverse-DNS words (it names /Library/LaunchDaemons/<label>.plist, as root).
SAFE_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*")

ARGUMENT_SPEC = dict(
    files=dict(
        type="list",
        elements="dict",
        required=True,
        options=dict(
            path=dict(type="path", required=True),
            content=dict(type="str", required=True),
            mode=dict(type="str", default="0600"),
        ),
    ),
    directory_mode=dict(type="str", default="0700"),
)


def unsafe_path(path, setting, home=False):
    """None when `path` is an absolute path of SAFE_PATH's characters with no '.' or '..'
    component (with `home`, '~' or '~/...' too: each Mac's home), else why not, naming
    `setting` (the variable to change) and the rule."""
    if path is None or path == "":
        return f"{setting} is empty: give an absolute path"
    if not isinstance(path, str):
        return f"{setting} {path!r} is not a path: give an absolute path such as /opt/mlx-cluster"
    rest = path[1:] if home and (path == "~" or path.startswith("~/")) else path
    if rest and not rest.startswith("/"):
        return (
            f"{setting} {path!r} is not an absolute path"
            + (" (nor one under ~)" if home else "")
            + ": give one such as /opt/mlx-cluster"
        )
    if rest and not SAFE_PATH.fullmatch(rest):
        return (
            f"{setting} {path!r} holds whitespace or characters a shell reads: use letters, digits, "
            "/ and . _ - + @ % = , : only"
        )
    if any(part in (".", "..") for part in rest.split("/")):
        return f"{setting} {path!r} holds '.' or '..' components: give the path itself"
    return None


def unsafe_component(name, setting):
    """None when `name` is one path component of SAFE_PATH's characters (no '/', not '.' or
    '..'), else why not, naming `setting` (the variable to change) and the rule."""
    if not isinstance(name, str) or name == "":
        return f"{setting} is empty: give a directory name such as Qwen3-4B-Instruct-2507-4bit"
    if "/" in name or name in (".", ".."):
        return f"{setting} {name!r} is not one directory name: give the name alone, such as Qwen3-4B-Instruct-2507-4bit"
    if not SAFE_PATH.fullmatch(name):
        return (
            f"{setting} {name!r} holds whitespace or characters a shell reads: use letters, digits "
            "and . _ - + @ % = , : only"
        )
    return None


def unsafe_label(label, setting):
    """None when `label` is a launchd label of reverse-DNS words (org.example.name), else why not."""
    if isinstance(label, str) and SAFE_LABEL.fullmatch(label):
        return None
    return (
        f"{setting} {label!r} is not a launchd label: use dot-separated words of letters, digits, "
        "_ and - (e.g. org.mlx-cluster.server); it names the LaunchDaemon's plist"
    )


class FilesError(Exception):
    """A file that cannot be written; `msg` says what and how to fix it."""

    def __init__(self, msg, path=None):
        super().__init__(msg)
        self.msg = msg
        self.path = path


def octal(value, what):
    try:
        return int(str(value), 8)
    except ValueError:
        raise FilesError(f"{what} must be an octal string like '0600' (got '{value}')") from None


def missing_parents(path):
    """Parent directories of `path` that do not exist yet, outermost first."""
    missing = []
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    return list(reversed(missing))


def current(path):
    """(content bytes or None, mode or None) of an existing regular file; (False, None) when
    `path` is something else (a symbolic link included: never followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        return False, None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False, None  # swapped for a link meanwhile
    with os.fdopen(fd, "rb") as f:
        return f.read(), stat.S_IMODE(st.st_mode)


def untrusted(path, uid):
    """Why root should not write below the directory `path` for the user `uid` ("" when it
    may): walking from / down, every existing component must be a directory owned by root or
    by that user, not writable by group or others unless root's and sticky (as /tmp and
    /Users/Shared are), or a symbolic link owned by root (as /tmp and /var are on a Mac);
    a link or a directory another user owns could send root's write anywhere."""
    cur = os.sep
    for name in [n for n in os.path.normpath(path).split(os.sep) if n]:
        step = os.path.join(cur, name)
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            return ""  # made from here on, by root, for the user
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != 0:
                return f"{step} is a symbolic link owned by uid {st.st_uid}, not root"
            step = os.path.realpath(step)
            st = os.lstat(step)
        if not stat.S_ISDIR(st.st_mode):
            return f"{step} is not a directory"
        if st.st_uid not in (0, uid):
            return f"{step} belongs to uid {st.st_uid}, not to this user (uid {uid}) or root"
        if st.st_mode & 0o022 and not (st.st_uid == 0 and st.st_mode & stat.S_ISVTX):
            return f"{step} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
        cur = step
    return ""


def loose_modes(folder):
    """What in `folder` (the artifacts directory: plans, findings, hostfiles, results) others
    could read or change: [(path, mode now, mode it should have)], the folder and every
    directory below it 0700, every regular file without group or other bits. Links below it are
    neither followed nor changed; a missing folder gives []."""
    found = []
    if not os.path.isdir(folder):  # (the folder itself may be a link the user made)
        return found
    for root, _dirs, names in os.walk(folder):  # (a link to a directory below is listed, not walked)
        for path in [root] + [os.path.join(root, name) for name in names]:
            try:
                st = os.stat(path) if path == folder else os.lstat(path)
            except FileNotFoundError:
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode) and mode != 0o700:
                found.append((path, mode, 0o700))
            elif stat.S_ISREG(st.st_mode) and mode & 0o077:
                found.append((path, mode, mode & ~0o077))
    return found


def write(path, data, mode, owner=None):
    """Atomically: a temporary file in the same directory, then a rename."""
    fd, tmp = tempfile.mkstemp(prefix=".mlx_files.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        if owner:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise FilesError(
            f"cannot write {path}: {exc.strerror}. Check that the connecting user may write "
            f"to {os.path.dirname(path)}.",
            path,
        ) from None


def sudo_owner(environ, euid):
    """(uid, gid) of the user who ran sudo, when this runs as root under sudo (sudo sets
    SUDO_UID and SUDO_GID); None otherwise (files then belong to whoever runs this)."""
    try:
        return (int(environ["SUDO_UID"]), int(environ["SUDO_GID"])) if euid == 0 else None
    except (KeyError, ValueError):
        return None


def write_files(files, directory_mode="0700", check_mode=False, diff=False, owner=None):
    """Write each of `files` ([{path, content, mode}], as ARGUMENT_SPEC checked them) whose
    content or mode differs. `owner` (uid, gid): given to the directories made and the files
    written (a module run as root writing a user's files: sudo_owner()). Returns the module's
    result: {changed, files, [diff]}; raises FilesError."""
    dir_mode = octal(directory_mode, "directory_mode")
    results, diffs, made = [], [], set()
    as_root = os.geteuid() == 0
    for spec in files:
        path = spec["path"]
        if not os.path.isabs(path):
            raise FilesError(f"path must be absolute (got '{path}')", path)
        why = untrusted(os.path.dirname(path), owner[0] if owner else 0) if as_root else ""
        if why:
            raise FilesError(
                f"refusing to write {path} as root: {why}. Fix: make it a directory of its own, "
                "owned by the login user and writable by that user alone",
                path,
            )
        mode = octal(spec.get("mode", "0600"), f"mode of {path}")
        data = spec["content"].encode("utf-8", errors="surrogateescape")
        parents = [d for d in missing_parents(path) if d not in made]
        old, old_mode = current(path)
        if old is False:
            raise FilesError(
                f"{path} exists and is not a regular file: move it away (a symbolic link is never followed)", path
            )
        res = {
            "path": path,
            "created": old is None,
            "mode": f"{mode:04o}",
            "changed": bool(parents) or old != data or old_mode != mode,
        }
        if res["changed"] and diff:
            diffs.append(
                {
                    "before_header": path,
                    "after_header": path,
                    "before": "" if old is None else old.decode("utf-8", errors="surrogateescape"),
                    "after": spec["content"],
                }
            )
        if res["changed"] and not check_mode:
            for d in parents:
                try:
                    os.mkdir(d, dir_mode)
                    os.chmod(d, dir_mode)  # mkdir's mode is masked by the umask
                    if owner:
                        os.chown(d, *owner)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise FilesError(f"cannot create the directory {d}: {exc.strerror}", path) from None
            # (a new mode alone is written the same way: a rename, never a chmod through a path)
            write(path, data, mode, owner)
        made.update(parents)
        results.append(res)
    out = {"changed": any(r["changed"] for r in results), "files": results}
    if diffs:
        out["diff"] = diffs
    return out
