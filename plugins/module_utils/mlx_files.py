# -*- coding: utf-8 -*-
"""Write a few small text files given inline (the module mlx_files, and its action plugin when
the files are the controller's own): what differs is written atomically, missing parent
directories are made, `changed` is measured per file.

One copy of the logic and of the argument spec for both: on a Mac the module runs it; on the
controller (delegate_to: localhost) the action plugin runs it in ansible-playbook's own
process, without starting a module (a Python process) for a few kilobytes.
"""

from __future__ import annotations

import os
import stat
import tempfile

ARGUMENT_SPEC = dict(
    files=dict(type="list", elements="dict", required=True, options=dict(
        path=dict(type="path", required=True),
        content=dict(type="str", required=True),
        mode=dict(type="str", default="0600"),
    )),
    directory_mode=dict(type="str", default="0700"),
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
    `path` is something else."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        return False, None
    with open(path, "rb") as f:
        return f.read(), stat.S_IMODE(st.st_mode)


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
        raise FilesError(f"cannot write {path}: {exc.strerror}. Check that the connecting user may write "
                         f"to {os.path.dirname(path)}.", path) from None


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
    for spec in files:
        path = spec["path"]
        if not os.path.isabs(path):
            raise FilesError(f"path must be absolute (got '{path}')", path)
        mode = octal(spec.get("mode", "0600"), f"mode of {path}")
        data = spec["content"].encode("utf-8", errors="surrogateescape")
        parents = [d for d in missing_parents(path) if d not in made]
        old, old_mode = current(path)
        if old is False:
            raise FilesError(f"{path} exists and is not a regular file: move it away", path)
        res = {"path": path, "created": old is None, "mode": f"{mode:04o}",
               "changed": bool(parents) or old != data or old_mode != mode}
        if res["changed"] and diff:
            diffs.append({"before_header": path, "after_header": path,
                          "before": "" if old is None else old.decode("utf-8", errors="surrogateescape"),
                          "after": spec["content"]})
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
            if old != data:
                write(path, data, mode, owner)
            elif old_mode != mode:
                os.chmod(path, mode)
        made.update(parents)
        results.append(res)
    out = {"changed": any(r["changed"] for r in results), "files": results}
    if diffs:
        out["diff"] = diffs
    return out
