# -*- coding: utf-8 -*-
"""SSH trust between the Macs (the module mlx_ssh_trust): the pure parts.

- `split_block(text, marker)`: the marked block of an authorized_keys file, as
  ansible.builtin.blockinfile writes it (`# BEGIN ...` / `# END ...` lines around the block), so
  a file written by either is read and rewritten alike, and `blockinfile state=absent` (the role's
  ssh_trust_remove) still removes it.
- `with_block(text, marker, lines)`: the file's text with the block holding `lines`.
- `block_keys(text)`: how many keys the block holds (discovery reports it, so the models stage
  runs ssh_trust only where a key is needed or must be revoked).
- `host_key_lines(texts)`: `type base64` of each public host key file (comments dropped).
- `RECEIVE_ONLY` and `authorized_line(...)`: what a cluster key may do on the Mac that trusts
  it (receive the model with rsync, from the sending Mac's own addresses), and its line.
"""

from __future__ import annotations

from ansible_collections.mlx.cluster.plugins.module_utils.mlx_files import unsafe_path

BEGIN, END = "BEGIN", "END"
# The marker lines of the block of cluster keys in a Mac's authorized_keys (mlx_ssh_trust's
# default; discovery counts the keys in it; roles/ssh_trust/tasks/absent.yml removes it).
MARKER = "# {mark} mlx-cluster: keys of the Macs that copy to this one (ssh_trust_state=absent removes it)"


def marker_lines(marker):
    """The two marker lines of `marker` (with `{mark}` where BEGIN and END go)."""
    if "{mark}" not in marker:
        raise ValueError("the marker must hold {mark} (where BEGIN and END go), got %r" % (marker,))
    return marker.replace("{mark}", BEGIN), marker.replace("{mark}", END)


def split_block(text, marker):
    """(lines before, the block's lines or None, lines after) of `text`.

    The block is what stands between the first BEGIN marker line and the first END marker line
    after it; without both, there is no block (None) and every line is "before"."""
    begin, end = marker_lines(marker)
    lines = (text or "").splitlines()
    stripped = [ln.rstrip("\r") for ln in lines]
    try:
        i = stripped.index(begin)
        j = stripped.index(end, i + 1)
    except ValueError:
        return lines, None, []
    return lines[:i], lines[i + 1 : j], lines[j + 1 :]


def block_keys(text, marker=MARKER):
    """How many keys the marked block of `text` holds (0 without a block): its lines that are
    neither blank nor comments."""
    block = split_block(text, marker)[1] or []
    return sum(1 for line in block if line.strip() and not line.lstrip().startswith("#"))


def with_block(text, marker, lines):
    """`text` with its marked block holding `lines`, in place of the old one, or appended at
    the end when there is none; the other lines are kept as they are."""
    begin, end = marker_lines(marker)
    before, _old, after = split_block(text, marker)
    out = list(before) + [begin] + [str(x) for x in lines] + [end] + list(after)
    return "\n".join(out) + "\n"


def host_key_lines(texts):
    """`type base64` of each public key text (the comment dropped); texts that hold no key
    (fewer than two words on the first line) are left out."""
    out = []
    for text in texts:
        words = (text or "").strip().splitlines()[0].split() if (text or "").strip() else []
        if len(words) >= 2:
            out.append(" ".join(words[:2]))
    return out


# ---- what a cluster key may do -------------------------------------------------------------
# sshd runs this in place of the command a cluster key asks for (authorized_keys `command=`,
# the asked command in SSH_ORIGINAL_COMMAND): rsync's receiving end (`rsync --server ... . DIR`)
# writing into the model's directory (its first argument) and nothing else: no shell, no
# `--sender` (reading files out), no option that names a file outside it (--log-file,
# --temp-dir, --backup-dir, --partial-dir, --*-dest, --files-from, batch files), no symbolic
# links or devices made (-l, -D: the toolkit copies links as the files they point to), no
# other program than the rsync the toolkit starts (its second argument, or rsync /
# /usr/bin/rsync).
# Options are taken by a list of what GNU rsync 3.x and macOS's openrsync send there (fargs.c
# of Apple's rsync-182; GNU's server_options), so an option the list lacks is refused, named.
RECEIVE_ONLY = r"""#!/bin/sh
# mlx-cluster (role ssh_trust): what the cluster key may run on this Mac. sshd runs this in
# place of the command asked for ($SSH_ORIGINAL_COMMAND): only rsync receiving into $1.
# Written by the toolkit; ssh_trust_state=absent (--tags ssh_trust_remove) removes it.
dir=${1%/}
rsync_path=$2
cmd=$SSH_ORIGINAL_COMMAND
refuse() {
  echo "mlx-cluster: this Mac's cluster key only lets rsync receive into $dir ($1); refused: $cmd" >&2
  exit 126
}
case $cmd in
  *[!A-Za-z0-9_./=,:+@%\ -]*) refuse "a character rsync's receiving end is never given" ;;
esac
set -f
set -- $cmd
[ $# -ge 4 ] || refuse "too few words"
case $1 in
  rsync|/usr/bin/rsync) ;;
  *) { [ -n "$rsync_path" ] && [ "$1" = "$rsync_path" ]; } || refuse "not the rsync the toolkit starts" ;;
esac
[ "$2" = --server ] || refuse "not rsync's receiving end"
n=$#
i=0
for w in "$@"; do
  i=$((i + 1))
  [ $i -le 2 ] && continue
  if [ $i -eq $n ]; then
    case ${w%/} in
      "$dir") ;;
      *) refuse "not the model's directory: $w" ;;
    esac
    continue
  fi
  if [ $i -eq $((n - 1)) ]; then
    [ "$w" = . ] || refuse "not rsync's receiving end"
    continue
  fi
  case $w in
    --delete|--delete-before|--delete-during|--delete-delay|--delete-after|--numeric-ids|--ignore-times) ;;
    --timeout=*|--checksum-seed=*|--contimeout=*)
      case ${w#*=} in ''|*[!0-9]*) refuse "option $w" ;; esac ;;
    --log-format=*)
      case ${w#*=} in *[!A-Za-z%]*) refuse "option $w" ;; esac ;;
    --*) refuse "option $w" ;;
    -*e.*)
      flags=${w%%e.*}
      case ${flags#-}${w#*e.} in *[!A-Za-z]*) refuse "option $w" ;; esac
      case $flags in *[BTfMelD]*) refuse "option $w" ;; esac ;;
    -?*)
      case ${w#-} in *[!A-Za-z]*|*[BTfMelD]*) refuse "option $w" ;; esac ;;
    *) refuse "option $w" ;;
  esac
done
exec "$@"
"""

_ADDRESS_CHARS = set("0123456789.")


def authorized_line(public_key, addresses, command_file, directory, rsync_path=""):
    """The authorized_keys line of a cluster key: `restrict` (no pty, no forwarding of any
    kind), `from=` the sending Mac's own addresses (IPv4, as sshd sees the connection come),
    and `command=` RECEIVE_ONLY at `command_file` for the model's `directory` (and the rsync
    the toolkit starts there, when it is not the Mac's own). Raises ValueError on a word that
    cannot stand in the line."""
    words = (public_key or "").split()
    if len(words) < 2:
        raise ValueError(f"not a public key: {public_key!r}")
    addrs = sorted({str(a) for a in addresses if a})
    bad = [a for a in addrs if not set(a) <= _ADDRESS_CHARS or a.count(".") != 3]
    if bad or not addrs:
        raise ValueError(f"the sending Mac's addresses must be IPv4 addresses, got {addrs or 'none'}")
    args = [command_file, directory] + ([rsync_path] if rsync_path else [])
    for arg in args:
        why = unsafe_path(arg, "an argument of the forced command", home=True)
        if why or arg == "~":
            raise ValueError(why or f"{arg!r} cannot be an argument of the forced command (a path below ~)")
    # sh reads the file (its mode does not matter); sshd runs the command with the user's shell
    command = " ".join(["/bin/sh"] + [a.replace("~/", "$HOME/", 1) if a.startswith("~/") else a for a in args])
    return f'restrict,from="{",".join(addrs)}",command="{command}" ' + " ".join(words)
