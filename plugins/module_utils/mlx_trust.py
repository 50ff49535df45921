# -*- coding: utf-8 -*-
"""SSH trust between the Macs (the module mlx_ssh_trust): the pure parts.

- `split_block(text, marker)`: the marked block of an authorized_keys file, as
  ansible.builtin.blockinfile writes it (`# BEGIN ...` / `# END ...` lines around the block), so
  a file written by either is read and rewritten alike, and `blockinfile state=absent` (the role's
  ssh_trust_remove) still removes it.
- `with_block(text, marker, lines)`: the file's text with the block holding `lines`.
- `host_key_lines(texts)`: `type base64` of each public host key file (comments dropped).
"""

from __future__ import annotations

BEGIN, END = "BEGIN", "END"


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
    return lines[:i], lines[i + 1:j], lines[j + 1:]


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
