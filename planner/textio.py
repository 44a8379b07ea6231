"""Reading a user's text file: the one place that decodes it, so a file in the wrong encoding is
one exit-2 error naming the file and the fix, never a ``UnicodeDecodeError``.

Rule: a file starting with a UTF-16 byte-order mark (what Windows tools such as Excel's
"Unicode text" or PowerShell's ``Out-File`` write) is decoded as UTF-16; otherwise UTF-8, a
UTF-8 byte-order mark dropped. Anything else (Latin-1 bytes, a binary file) is an error: guessing
an 8-bit code page would silently change names and numbers.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from planner.errors import InputError, Problem


def read_text(path: str | Path) -> str:
    """The text of ``path`` (module docstring); exit-2 :class:`InputError` if it is not UTF-8/UTF-16."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError as exc:
        raise InputError(Problem(str(p), "", "is a folder, not a file", "give the path of the file inside it")) from exc
    except FileNotFoundError as exc:
        raise InputError(Problem(str(p), "", "file does not exist", "check the path")) from exc
    except OSError as exc:
        raise InputError(Problem(str(p), "", f"cannot be read: {exc.strerror or exc}", "check the path and its permissions")) from exc
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(Problem(str(p), f"byte {exc.start}", f"is not {encoding.replace('-sig', '').upper()} text",
                                 "save the file as UTF-8 (or give the file the tool wrote, unchanged)")) from exc


@contextmanager
def text_stream(path: str | Path) -> Iterator[io.StringIO]:
    """:func:`read_text` as a file object for ``csv.reader`` / ``csv.DictReader`` (``with text_stream(p) as fh``); a
    ``csv.Error`` raised while the block reads it (a field over the csv module's 128 kB limit, a NUL byte) is an
    exit-2 error naming the file."""
    try:
        yield io.StringIO(read_text(path), newline="")
    except csv.Error as exc:
        raise InputError(Problem(str(path), "", f"not a readable CSV ({exc})", "give the file the tool wrote, unchanged")) from None


def loads_json(text: str, path: str | Path) -> Any:
    """``json.loads`` whose nesting-too-deep failure is an exit-2 error; ``json.JSONDecodeError`` is left to the caller."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise InputError(Problem(str(path), "", "JSON nested too deeply to be a benchmark or measurement file",
                                 "give the file the tool wrote, unchanged")) from exc
