"""A local folder as the farm's storage: one machine, tests and development (``wire.storage``'s ``Storage``)."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import Final

from pipeline.errors import TTSFarmError
from wire.errors import STORAGE_IO_ERROR, ObjectNotFoundError, StorageError, TransientError
from wire.storage.keys import bad_key, clean_prefix, safe_key

log = logging.getLogger(__name__)

_TRANSIENT_ERRNOS: Final = frozenset(
    {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EIO, errno.EAGAIN, errno.EBUSY}
)


class LocalStorage:
    """Objects as files under ``root/prefix``; for one machine, tests and development.

    Writes are atomic: a temporary file in the target folder, fsynced, then ``os.replace``, so a
    reader sees the old object or the whole new one, never a part. Folders are created as needed.
    The content type is not stored (a file has nowhere to keep it).
    """

    def __init__(self, root: str | Path, prefix: str = "") -> None:
        self.prefix = clean_prefix(prefix)
        self.root = Path(root).expanduser().resolve()
        self.base = self.root / self.prefix if self.prefix else self.root
        self._real_base = self.base.resolve()  # a key's file must resolve inside it (a later symlink there fails safe)

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r}, prefix={self.prefix!r})"

    def path(self, key: str) -> Path:
        """The file that holds ``key``; raises ``BAD_KEY`` for unsafe keys or symlinks leading out."""
        path = self.base / safe_key(key)
        # safe_key already rules out ``..``; this also catches a symlink inside the tree pointing out.
        if not path.resolve().is_relative_to(self._real_base):
            raise bad_key("resolves outside the storage folder", key)
        return path

    def put(self, key: str, data: bytes, content_type: str) -> str:
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise _local_error("write", key, exc) from exc
        log.debug("stored %d bytes at %s", len(data), path)
        return path.as_uri()

    def get(self, key: str) -> bytes:
        path = self.path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"no stored object {key!r}", key=key) from None
        except OSError as exc:
            raise _local_error("read", key, exc) from exc

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def url(self, key: str) -> str:
        return self.path(key).as_uri()

    def presigned_url(self, key: str, expires_s: int = 3600) -> str | None:
        """Always ``None``: a local folder has no HTTP endpoint to sign for."""
        self.path(key)
        return None


def _local_error(op: str, key: str, exc: OSError) -> TTSFarmError:
    reason = exc.strerror or type(exc).__name__
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientError(f"local storage could not {op} {key!r}: {reason}", key=key)
    return StorageError(f"local storage could not {op} {key!r}: {reason}", code=STORAGE_IO_ERROR, key=key)
