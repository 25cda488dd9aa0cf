"""The local-directory artifact store (the embedded default: ``<data_dir>/artifacts``).

Writes are atomic and safe under concurrency: the bytes go to a temp file in the target
directory, are fsynced, then published with ``os.link`` (create-if-absent: a racing writer of the
same artifact finds it already there) or, where hard links are not supported, ``os.replace``.
A reader therefore sees either no file or the complete file, never a partial one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from turngate.artifacts.store import (
    RETENTIONS,
    ArtifactNotFoundError,
    ArtifactUnavailableError,
    BaseArtifactStore,
    Clock,
    Retention,
    StoredObject,
)

logger = logging.getLogger(__name__)

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_READ_CHUNK = 1 << 16  # one read for a manifest; below malloc's mmap threshold

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Retrying does not help with these (a read-only or forbidden directory).
_PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


class LocalArtifactStore(BaseArtifactStore):
    """Artifacts as files under ``root`` (created on first write)."""

    def __init__(self, root: Path | str, *, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        self.root = Path(root).expanduser().absolute()
        self._root_name = os.fspath(self.root)

    def describe(self) -> str:
        return f"local:{self.root.as_posix()}"

    def file_path(self, path: str) -> Path:
        """The file behind a workspace-relative artifact path (which must stay under ``root``)."""
        return Path(self._file_name(path))

    def _file_name(self, path: str) -> str:
        # A string, not a Path: verify reads every artifact once, and building Paths was a
        # tenth of its cost. The checked parts hold no "", "." or "..", so there is nothing a
        # Path would have normalized.
        parts = path.split("/")
        if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"not a workspace-relative artifact path: {path!r}")
        return os.path.join(self._root_name, *parts)

    # ---- primitives

    def _stat(self, path: str) -> StoredObject | None:
        target = self.file_path(path)
        try:
            st = target.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _unavailable("stat", target, exc) from exc
        return StoredObject(size=st.st_size, created_at=_mtime(st))

    def _write(self, path: str, data: bytes, *, digest: str, media_type: str) -> StoredObject:
        target = self.file_path(path)
        try:
            fd, tmp = _temp_file(target)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                _publish(tmp, target, len(data))
                _fsync_dir(target.parent)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            st = target.stat()
        except OSError as exc:
            raise _unavailable("write", target, exc) from exc
        return StoredObject(size=st.st_size, created_at=_mtime(st))

    def _read(self, path: str) -> bytes:
        name = self._file_name(path)
        try:
            # Raw descriptor calls: no file object per read (verify reads every artifact, and a
            # buffered or FileIO object cost as much as the read itself).
            fd = os.open(name, os.O_RDONLY | _O_CLOEXEC)
            try:
                chunks = []
                while chunk := os.read(fd, _READ_CHUNK):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ArtifactNotFoundError(f"no artifact at {path}") from None
        except OSError as exc:
            raise _unavailable("read", Path(name), exc) from exc

    def _list(self, retention: Retention | None) -> Iterator[tuple[str, StoredObject, str | None]]:
        for klass in (retention,) if retention else RETENTIONS:
            for kind in _subdirs(self.root / klass):
                for fan in _subdirs(self.root / klass / kind):
                    directory = self.root / klass / kind / fan
                    try:
                        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        raise _unavailable("list", directory, exc) from exc
                    for entry in entries:
                        if entry.name.startswith("."):  # temp files of writes in progress
                            continue
                        try:
                            if not entry.is_file(follow_symlinks=False):
                                continue
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:  # deleted meanwhile
                            continue
                        except OSError as exc:
                            raise _unavailable("stat", Path(entry.path), exc) from exc
                        yield (
                            f"{klass}/{kind}/{fan}/{entry.name}",
                            StoredObject(size=st.st_size, created_at=_mtime(st)),
                            None,
                        )

    def _delete(self, paths: list[str]) -> list[str]:
        failed: list[str] = []
        for path in paths:
            target = self.file_path(path)
            try:
                target.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("artifact gc could not delete %s: %s", target, exc)
                failed.append(path)
                continue
            with contextlib.suppress(OSError):  # drop the fan-out directory once it is empty
                target.parent.rmdir()
        return failed

    def _find(self, hex_digest: str) -> str | None:
        for klass in RETENTIONS:
            for kind in _subdirs(self.root / klass):
                path = f"{klass}/{kind}/{hex_digest[:2]}/{hex_digest}"
                if self.file_path(path).is_file():
                    return path
        return None


def _temp_file(target: Path) -> tuple[int, str]:
    """A new temp file beside ``target``, creating the directory (again, if gc just removed it)."""
    for attempt in range(3):
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            return tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:12]}.", suffix=".tmp")
        except FileNotFoundError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _publish(tmp: str, target: Path, size: int) -> None:
    """Make the complete temp file visible at ``target``; an equal-sized file there is kept."""
    try:
        os.link(tmp, target)
        return
    except FileExistsError:
        # Another writer published the same content first (same path = same sha256). A file
        # of another size can only be a damaged copy: replace it.
        with contextlib.suppress(FileNotFoundError):
            if target.stat().st_size == size:
                return
    except OSError:
        pass  # no hard links on this file system
    os.replace(tmp, target)


def _fsync_dir(directory: Path) -> None:
    """Persist the directory entry of a new file (POSIX; a no-op where unsupported)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _subdirs(directory: Path) -> list[str]:
    try:
        return sorted(
            entry.name
            for entry in os.scandir(directory)
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
        )
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise _unavailable("list", directory, exc) from exc


def _mtime(st: os.stat_result) -> datetime:
    return _EPOCH + timedelta(microseconds=st.st_mtime_ns // 1000)


def _unavailable(action: str, target: Path, exc: OSError) -> ArtifactUnavailableError:
    """The error callers see names the operation and the OS reason, never the file: where the
    store lives on this machine is the operator's business (it is logged for them)."""
    reason = exc.strerror or (errno.errorcode.get(exc.errno or 0) or type(exc).__name__)
    logger.warning("artifact store %s failed for %s: %s", action, target.as_posix(), exc)
    return ArtifactUnavailableError(
        f"artifact store {action} failed: {reason}",
        retryable=exc.errno not in _PERMANENT_ERRNOS,
    )
