"""Reading a file a user names (a scenario, a sweep, a trace, a key): regular files only, never more than a cap.

`read_capped` refuses what is not a regular file (a directory, `/dev/zero`, a FIFO: opened without blocking,
then checked), a file larger than its cap (checked on the open file, and the read stops one byte past the cap,
so a file that grows while it is read is caught too) and, for a secret, a file that others may read. Each
refusal is a `UnreadableFileError` whose message is one line about the file, never about its content: an error must
not echo a key file someone named as a trace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MIB = 2**20


class UnreadableFileError(Exception):
    """Why a file cannot be read, in a few words (`no such file`, `not a regular file (a character device)`)."""


_KINDS = {
    stat.S_ISDIR: "a directory",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISFIFO: "a named pipe",
    stat.S_ISSOCK: "a socket",
}


def read_capped(path: Path, max_bytes: int, *, secret: bool = False) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes` of them; an `UnreadableFileError` otherwise.

    With `secret`, a file that its group or others may read or write is refused too, with the command that
    fixes it (`chmod 600 PATH`), as ssh refuses a private key others can read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block the open
    except FileNotFoundError:
        raise UnreadableFileError("no such file") from None
    except OSError as error:
        raise UnreadableFileError(f"cannot read: {error.strerror}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            kind = next((name for test, name in _KINDS.items() if test(status.st_mode)), "of an unknown kind")
            raise UnreadableFileError(f"not a regular file ({kind})")
        if secret and status.st_mode & 0o077:
            mode = stat.S_IMODE(status.st_mode)
            raise UnreadableFileError(f"a key its group or others may read (mode {mode:04o}): run chmod 600 {path}")
        if status.st_size > max_bytes:
            raise UnreadableFileError(f"file too large (more than {_size(max_bytes)})")
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)  # a file that grew since fstat: one byte past the cap tells
    except OSError as error:
        raise UnreadableFileError(f"cannot read: {error.strerror}") from None
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:
        raise UnreadableFileError(f"file too large (more than {_size(max_bytes)})")
    return data


def _size(n_bytes: int) -> str:
    return f"{n_bytes // MIB} MiB" if n_bytes >= MIB and n_bytes % MIB == 0 else f"{n_bytes} bytes"
