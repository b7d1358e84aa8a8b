"""The opened file on disk: read it with its encoding and newline style, write it atomically.

The Studio holds no copy of the file: every load re-reads it and every edit re-writes it. A
write goes to a temporary file in the same folder, gets the original's mode, and replaces the
original with :func:`os.replace`, so a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SourceFile", "atomic_write_bytes", "file_stamp", "read_source", "sha256_hex"]


def sha256_hex(data: bytes) -> str:
    """The file's version: the sha256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class SourceFile:
    """One reading of the file: its bytes, version and text (newlines normalised to ``\\n``
    when the whole file uses ``\\r\\n``, restored by :meth:`encode`)."""

    path: Path
    data: bytes
    text: str
    encoding: str
    bom: bool
    crlf: bool

    @property
    def version(self) -> str:
        return sha256_hex(self.data)

    def encode(self, text: str) -> bytes:
        """``text`` as bytes in this file's encoding, BOM and newline style."""
        if self.crlf:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def read_source(path: Path) -> SourceFile:
    """Read ``path``; :class:`UnicodeDecodeError`/:class:`SyntaxError` (a bad coding cookie) or
    :class:`OSError` propagate for the caller to report."""
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    bom = encoding == "utf-8-sig"
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    codec = "utf-8" if bom else encoding
    text = body.decode(codec)
    crlf = "\r\n" in text and "\n" not in text.replace("\r\n", "")
    if crlf:
        text = text.replace("\r\n", "\n")
    return SourceFile(path=path, data=data, text=text, encoding=codec, bom=bom, crlf=crlf)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temporary file in the same folder, the original's mode,
    then :func:`os.replace`. A symlink is written through (its target is replaced)."""
    target = path.resolve()
    try:
        mode: int | None = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".studio.tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_stamp(path: Path) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of ``path``, or ``None`` while it does not exist: what tells a
    watcher the file changed on disk."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)
