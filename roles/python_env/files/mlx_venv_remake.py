"""Make the venv at argv[1] again, emptied first, when it is a venv that holds nothing but a
venv's own entries; run by the base Python, for a venv whose own Python no longer starts.
Prints one JSON line: {"remade": bool, "why": str} ("remade" with --dry: it would be). A
directory that is no venv (no pyvenv.cfg) is left as it is, and so is one that holds anything
else besides (a model, a hostfile, another program's files: python_env_venv_dir set to a
directory that is not the venv's own), naming what it holds. Standard library only."""

import json
import os
import sys
import venv

# What `python -m venv` and pip put in a venv (Python 3.13 adds .gitignore; pip may add share/
# and etc/ for a package's data files).
OWN = {"bin", "include", "lib", "lib64", "pyvenv.cfg", "share", "etc", ".gitignore"}


def remake(path, dry=False):
    if os.path.islink(path) or not os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        return {"remade": False, "why": f"{path} is not a venv (no pyvenv.cfg in it): left as it is"}
    others = sorted(set(os.listdir(path)) - OWN)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        return {"remade": False, "why": f"{path} holds more than a venv ({shown}): it is not emptied"}
    if not dry:
        venv.EnvBuilder(clear=True, symlinks=True, with_pip=True).create(path)
    return {"remade": True, "why": ""}


if __name__ == "__main__":
    print(json.dumps(remake(sys.argv[1], dry="--dry" in sys.argv[2:])))
