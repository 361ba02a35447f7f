"""Reading user-named files: the one function every reader uses (imports, ``from "config.json"``,
plugins' data files).

:func:`read_text` refuses, before opening anything:

* a path with a NUL byte;
* a symbolic link, and a file outside the *project root* (unless
  :attr:`~dsl.limits.Limits.allow_outside_root`); the packaged catalog is always allowed;
* anything but a regular file (devices such as ``/dev/zero``, FIFOs, sockets, directories);
* a file larger than :attr:`~dsl.limits.Limits.file_mb`;

and reads at most that many bytes.  The **project root** of a run is the nearest ancestor
directory of the root ``.plan`` file that holds ``.git`` or ``pyproject.toml``, else the root
file's own directory.  A refused file is never opened, so no diagnostic can quote it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..syntax import limits as L
from ..syntax.diagnostics import remember_source


class FileRefused(OSError):
    """A file that cannot or may not be read.

    ``kind`` is ``missing`` (does not exist or cannot be opened), ``refused`` (outside the
    root, a symlink, not a regular file, a NUL byte), ``limit`` (too large) or ``encoding``
    (not UTF-8; ``line``/``column`` locate the first bad byte and ``text`` is the file
    decoded with replacement characters).
    """

    def __init__(self, kind: str, summary: str, hint: str = "", line: int = 0, column: int = 0, text: str = ""):
        super().__init__(summary)
        self.strerror = summary
        self.kind, self.summary, self.hint = kind, summary, hint
        self.line, self.column, self.text = line, column, text

    def __str__(self) -> str:
        return self.summary

    @property
    def code(self) -> str:
        return {"missing": "missing-file", "refused": "file-refused", "limit": "limit",
                "encoding": "encoding"}[self.kind]


def project_root(root_file: str | Path) -> Path:
    """The project root of a run whose root file is ``root_file`` (see the module docstring)."""
    try:
        start = Path(os.path.abspath(root_file)).resolve().parent
    except (OSError, ValueError):
        return Path(os.path.abspath(".")).resolve()
    for d in (start, *start.parents):
        try:
            if (d / ".git").exists() or (d / "pyproject.toml").is_file():
                return d
        except OSError:
            continue
    return start


_current_root: Path | None = None
_always: tuple[Path, ...] = ()      # directories always allowed (the packaged catalog)
_approved: set[Path] = set()


def set_root(root: Path | None, always: tuple = ()) -> None:
    """The project root used when a reader passes no ``root`` (set by each Workspace), and the
    directories always allowed (the packaged catalog)."""
    global _current_root, _always
    _current_root = root
    _always = tuple(Path(a).resolve() for a in always)


def current_root() -> Path | None:
    return _current_root


def _inside(p: Path, d: Path) -> bool:
    return p == d or d in p.parents


def check(path: str | Path, *, root: Path | None = None, what: str = "file") -> Path:
    """Validate ``path`` without reading it; return its resolved path.

    :raises FileRefused: see the module docstring."""
    text = str(path)
    if "\0" in text:
        raise FileRefused("refused", f"the path of the {what} contains a NUL byte", "write the path without it")
    lim = L.current()
    p = Path(os.path.abspath(text))
    try:
        rp = p.resolve()
    except (OSError, RuntimeError):
        raise FileRefused("missing", f"cannot resolve the path of the {what} '{text}'", "check the path") from None
    if not lim.allow_outside_root and rp not in _approved:
        base = root if root is not None else _current_root
        try:
            is_link = stat.S_ISLNK(os.lstat(p).st_mode)
        except OSError:
            is_link = False
        if is_link:
            raise FileRefused("refused", f"the {what} '{text}' is a symbolic link, which plan does not follow",
                              "name the file itself, or " + L.raise_hint("allow_outside_root"))
        if base is not None and not _inside(rp, base.resolve()) and not any(_inside(rp, a) for a in _always):
            raise FileRefused("refused", f"the {what} '{text}' is outside the project root '{base}'",
                              "imports, configs and data files must lie under the project root (the nearest "
                              "directory above the root file holding .git or pyproject.toml, else the root file's own "
                              "directory); "
                              + L.raise_hint("allow_outside_root"))
    try:
        st = os.stat(rp)
    except OSError as e:
        raise FileRefused("missing", f"cannot read the {what} '{text}': {e.strerror or 'not found'}",
                          "check the path") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if
                (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "not a regular file")
        raise FileRefused("refused", f"the {what} '{text}' is {kind}; only regular files are read",
                          "name a regular file")
    if st.st_size > L.max_bytes():
        raise FileRefused("limit", f"the {what} '{text}' is {st.st_size / 2**20:.1f} MiB, above the limit of "
                          f"{lim.file_mb:g} MiB", L.raise_hint("file_mb"))
    return rp


def approve(path: Path) -> None:
    """Remember a path already checked against its workspace's root (plugins read it later)."""
    _approved.add(path)


def read_bytes(path: str | Path, *, root: Path | None = None, what: str = "file") -> bytes:
    """The bytes of ``path`` after :func:`check`, reading at most the size limit."""
    rp = check(path, root=root, what=what)
    cap = L.max_bytes()
    try:
        fd = os.open(rp, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise FileRefused("missing", f"cannot read the {what} '{path}': {e.strerror or e}", "check the path") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):   # replaced between the check and the open
            raise FileRefused("refused", f"the {what} '{path}' is not a regular file", "name a regular file")
        chunks, size = [], 0
        while size <= cap:
            b = os.read(fd, min(1 << 20, cap + 1 - size))
            if not b:
                break
            chunks.append(b)
            size += len(b)
    except OSError as e:
        raise FileRefused("missing", f"cannot read the {what} '{path}': {e.strerror or e}", "check the path") from None
    finally:
        os.close(fd)
    if size > cap:
        raise FileRefused("limit", f"the {what} '{path}' is larger than the limit of {L.current().file_mb:g} MiB",
                          L.raise_hint("file_mb"))
    return b"".join(chunks)


def read_text(path: str | Path, *, root: Path | None = None, what: str = "file", display: str | None = None,
              remember: bool = True) -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped) after :func:`check`.

    With ``remember``, the text is kept (under ``display`` or the path) so that diagnostics
    located in it can quote it; nothing else is ever quoted.

    :raises FileRefused: see the module docstring; ``encoding`` for bytes that are not UTF-8.
    """
    raw = read_bytes(path, root=root, what=what)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        before = raw[: e.start]
        line = before.count(b"\n") + 1
        col = len(before) - (before.rfind(b"\n") + 1) + 1
        raise FileRefused("encoding", f"the {what} '{display or path}' is not UTF-8 text "
                          f"(byte 0x{raw[e.start]:02x} at line {line}, column {col})", "save the file as UTF-8",
                          line, col, raw.decode("utf-8", "replace")) from None
    if remember:
        remember_source(display or str(path), text)
    return text
