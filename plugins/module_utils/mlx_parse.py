# -*- coding: utf-8 -*-
"""What every parser of a Mac's command output shares (the Thunderbolt, host, RDMA, network and
rsync parsers alike): the error that names the command whose output was not understood, text
from bytes that may not be UTF-8, and bounded integers. Pure: no command runs here."""

from __future__ import annotations


class ParseError(Exception):
    """A command's output could not be understood.

    `command` names the command whose output was bad, `message` says what was wrong.
    """

    def __init__(self, command, message):
        super().__init__(f"{command}: {message}")
        self.command = command
        self.message = message


def to_text(data, command):
    """Return (text, replaced): `data` as str, with anything that is not UTF-8 replaced by U+FFFD.

    Accepts bytes, or str that may carry lone surrogates (bytes decoded with
    surrogateescape); anything else raises ParseError.
    """
    if isinstance(data, (bytes, bytearray)):
        raw = bytes(data)
    elif isinstance(data, str):
        try:
            data.encode("utf-8")
            return data, False
        except UnicodeEncodeError:
            return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in data), True
    else:
        raise ParseError(command, f"expected text output, got {type(data).__name__}")
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


def small_int(text):
    """'42' -> 42; anything that is not 1-18 decimal digits (after stripping) -> None.

    The bound keeps clear of Python's int-from-str digit limit (4300) and of absurd values.
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    return int(text) if 0 < len(text) <= 18 and text.isdecimal() else None
