"""The build cache: compiled objects on disk, loaded only when verified.

    entry = cache.Entry(key)            # key: sha256 of compiler, flags and source
    so = entry.lookup()                 # the object's path if it verifies, else None
    so = entry.store(tmp_object)        # hash it, keep the hash beside it, rename into place

The directory (``$PYPTO_CACHE_DIR``, default ``~/.cache/pypto``) is created
0700 and must be the user's own, writable by no one else (``own_dir``). An
object is loaded only when its content hash matches the one written beside it
when it was stored, and it is a regular file owned by the user that neither
group nor others may write: a foreign or damaged file under the expected name
(an empty one, a truncated one, another program's library) is removed and
rebuilt, never loaded, so its constructors never run. The hash covers the
entry's key too: another entry's object and hash copied under this name do not
verify. Objects and hashes are written to a temporary file and renamed into place,
so a killed build leaves no half-written entry (its temporaries are removed after an
hour). A full or read-only disk is a ``BuildEnvironmentError`` naming the entry.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import stat
import tempfile
import time

from .errors import BuildEnvironmentError

HASH_SUFFIX = ".sha256"


def home() -> str:
    """The user's pypto store: ``$PYPTO_HOME``, default ``~/.cache/pypto`` (tuning logs
    and trained models live under it; the build cache too, unless ``$PYPTO_CACHE_DIR``)."""
    return os.environ.get("PYPTO_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "pypto")


def own_dir(d: str, what: str, hint: str = "") -> str:
    """``d``, created 0700 (with its missing parents) where it does not exist;
    ``BuildEnvironmentError`` when it cannot be, is a dangling symlink, is another
    user's, may be written by others (they could plant files this process would trust),
    or would be made by root inside another user's directory (``sudo -E`` keeps that
    user's HOME: the directories would lock them out)."""
    d, tail = os.path.abspath(d), f"; {hint}" if hint else ""
    try:
        os.stat(d)
    except OSError as e:
        if e.errno == errno.ELOOP:  # (a path through a loop of symlinks: no directory)
            raise BuildEnvironmentError(f"{what} {d} runs into a loop of symlinks{tail}") from None
    if os.path.islink(d) and not os.path.exists(d):
        raise BuildEnvironmentError(
            f"{what} {d} is a symlink to {os.readlink(d)}, which does not exist{tail}"
        )
    above = d
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if above != d and os.geteuid() == 0 and os.stat(above).st_uid != 0:
        raise BuildEnvironmentError(
            f"{what} {d} would be created by root inside {above}, which belongs to uid "
            f"{os.stat(above).st_uid} (another user's HOME, as under sudo -E?){tail}"
        )
    try:
        private_dirs(d)
        st = os.stat(d)
    except OSError as e:
        raise BuildEnvironmentError(f"cannot create {what} {d}: {e.strerror or e}{tail}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BuildEnvironmentError(f"{what} {d} is not a directory{tail}")
    if st.st_uid != os.getuid():
        raise BuildEnvironmentError(f"{what} {d} belongs to another user (uid {st.st_uid}){tail}")
    if st.st_mode & 0o022:  # (one this call made is 0700, whatever the umask)
        raise BuildEnvironmentError(
            f"{what} {d} may be written by other users (mode {stat.S_IMODE(st.st_mode):o}): "
            f"they could plant files in it; chmod go-w it{', or ' + hint if hint else ''}"
        )
    if not os.access(d, os.W_OK | os.X_OK):
        raise BuildEnvironmentError(f"{what} {d} is not writable{tail}")
    return d


def private_dirs(d: str) -> None:
    """``d`` and its missing parents created 0700 whatever the umask (``os.makedirs``
    applies it: under umask 0777 it made a directory no one could enter, for good)."""
    if os.path.isdir(d):
        return
    parent = os.path.dirname(d)
    if parent and parent != d:
        private_dirs(parent)
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        return  # (made meanwhile by another process, or not a directory: the caller sees)
    os.chmod(d, 0o700)


def cache_dir() -> str:
    """The build cache directory (``own_dir``: created 0700, the user's own, writable by
    no one else)."""
    d = os.environ.get("PYPTO_CACHE_DIR") or home()
    return own_dir(d, "the build cache directory", "set PYPTO_CACHE_DIR to a directory of your own")


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    atomic_write_all([(path, data, mode)])


def atomic_write_all(files: list) -> None:
    """Write each ``(path, data, mode)`` to a temporary file first, then rename them all
    into place one after another: files that belong together (a saved module's object
    and signature) are never seen half old, half new but for the instant between
    renames. A rename that fails puts back the files renamed before it (kept as hard
    links until all are in place), so a failed save leaves the old pair whole."""
    tmps, kept, done = [], [], []
    try:
        for path, data, mode in files:
            if os.path.isdir(path):  # (the rename would name the temporary file)
                raise IsADirectoryError(f"{path} is a directory; give a file name")
            try:
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
            except OSError as e:  # named after the destination, not the temporary file
                raise OSError(e.errno, f"cannot write {path}: {e.strerror}") from None
            tmps.append(tmp)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
        for (path, _, _), tmp in zip(files, tmps):
            kept.append(_keep(path))
            os.replace(tmp, path)
            done.append(path)
    except BaseException:
        for path, old in zip(done, kept):  # (the last one kept was not replaced)
            if old is not None:
                os.replace(old, path)
        for tmp in [*tmps, *kept]:
            if tmp is not None and os.path.lexists(tmp):
                remove_file(tmp)
        raise
    for old in kept:
        if old is not None:
            remove_file(old)


def _keep(path: str) -> str | None:
    """A hard link to the file at ``path`` (to put it back), or None: no file there, or
    a file system without hard links."""
    if not os.path.isfile(path):
        return None
    old = os.path.join(os.path.dirname(path) or ".", f".tmp-old-{os.getpid()}-{id(path)}")
    try:
        os.link(path, old)
    except OSError:
        return None
    return old


def remove_file(path: str) -> None:
    """Remove ``path`` if it is there; ``BuildEnvironmentError`` when it cannot be (a
    directory planted under an object's name, say)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise BuildEnvironmentError(
            f"cannot remove the damaged build cache entry {path}: {e.strerror or e}"
        ) from None


def _own_file_bytes(path: str) -> bytes | None:
    """The content of ``path`` if it is a regular file (not a link) of this user that
    group and others cannot write; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


ELF_MAGIC = b"\x7fELF"  # what every object the compilers we drive write starts with


class Entry:
    """One cached object: ``<key>.so``, its hash ``<key>.so.sha256`` and the source
    ``<key>.c`` (kept for error messages)."""

    def __init__(self, key: str, directory: str | None = None):
        d = directory or cache_dir()
        _sweep(d)
        stem = os.path.join(d, key)
        self.key = key
        self.so = stem + ".so"
        self.source = stem + ".c"
        self.hash = self.so + HASH_SUFFIX

    def digest(self, data: bytes) -> str:
        """The hash kept beside an object: of its key and its bytes, so another entry's
        object and hash copied under this key do not verify."""
        return hashlib.sha256(self.key.encode() + b"\0" + data).hexdigest()

    def lookup(self) -> str | None:
        """The object's path when it verifies; a damaged or foreign entry is removed."""
        if not os.path.lexists(self.so):
            return None
        data = _own_file_bytes(self.so)
        want = _own_file_bytes(self.hash)
        if data and want and self.digest(data) == want.decode(errors="replace"):
            return self.so
        remove_file(self.so)
        remove_file(self.hash)
        return None

    def write_source(self, source: str) -> None:
        """Keep the C source beside the object (error messages point at it)."""
        with _disk_faults(self.source):
            if os.path.isdir(self.source):
                raise BuildEnvironmentError(
                    f"the build cache entry {self.source} is a directory; remove it"
                )
            atomic_write(self.source, source.encode())

    def temp_object(self) -> str:
        """A fresh temporary path in the cache directory for the compiler's output."""
        with _disk_faults(self.so):
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.so), prefix=".tmp-", suffix=".so")
        os.close(fd)
        return tmp

    def store(self, tmp: str) -> str:
        """Move a freshly built object into place with its hash; returns its path.
        ``BuildEnvironmentError`` when the compiler left no object."""
        try:
            with open(tmp, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        if not data.startswith(ELF_MAGIC):  # nothing, or not an object: never cached
            remove_file(tmp)
            wrote = "no object" if not data else f"{len(data)} bytes that are not an ELF object"
            raise BuildEnvironmentError(
                f"the C compiler reported success but wrote {wrote} "
                f"(is $CC a compiler? CC={os.environ.get('CC') or 'cc'!r})",
                source_path=self.source,
            )
        try:
            with _disk_faults(self.so):
                os.chmod(tmp, 0o700)
                atomic_write(self.hash, self.digest(data).encode())
                os.replace(tmp, self.so)
        except BaseException:
            remove_file(tmp)  # (a full disk: not one more object left on it per retry)
            raise
        return self.so


# errors of the disk, not of the code: a build that meets one stops a tuner
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


@contextlib.contextmanager
def _disk_faults(path: str):
    """``BuildEnvironmentError`` naming ``path`` for a full or read-only disk."""
    try:
        yield
    except OSError as e:
        if e.errno not in _DISK_ERRNOS:
            raise
        raise BuildEnvironmentError(
            f"cannot write the build cache entry {path}: {os.strerror(e.errno)}"
        ) from None


STALE_S = 3600.0  # a temporary file this old is a killed build's
_swept: set = set()


def _sweep(d: str) -> None:
    """Remove what killed builds left in ``d`` (their compilers finish writing after the
    process is gone): temporaries older than ``STALE_S``, once per process."""
    if d in _swept:
        return
    _swept.add(d)
    old = time.time() - STALE_S
    for p in glob.glob(os.path.join(d, ".tmp-*")):
        try:
            if os.lstat(p).st_mtime < old:
                os.unlink(p)
        except OSError:
            pass  # another process's, or gone: not ours to insist on
