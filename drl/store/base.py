"""The DataStore interface: a flat namespace of keys ("RUN/policies/v00000001/manifest.json") holding bytes.

One store holds many runs: every run's objects live under its name (see ``run_store``), so ``--store DIR`` or
``--store s3://BUCKET/PREFIX`` can be shared, and the default store is the output directory itself, which puts a
run's policies and checkpoints inside its run folder.
"""

from __future__ import annotations

import abc
import os
from pathlib import Path

from drl.errors import UserError


class DataStore(abc.ABC):
    """Bytes under string keys. ``put`` must be atomic: a reader sees the old object, the new one, or none."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Returns the object's bytes; raises KeyError when it does not exist."""

    def get_optional(self, key: str) -> bytes | None:
        try:
            return self.get(key)
        except KeyError:
            return None

    @property
    def remote(self) -> bool:
        """Whether reads cross the network (and so go through the node-local cache)."""
        return False

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Keys starting with prefix, sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None: ...

    @abc.abstractmethod
    def describe(self) -> str: ...


class LocalStore(DataStore):
    """A directory; atomic puts by writing a temporary file in the same folder and renaming it."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"store directory {self.root} cannot be created: {exc.strerror}") from None

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
            raise ValueError(f"invalid store key {key!r}")
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise KeyError(key) from None

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        if not base.exists():
            return []
        keys = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_dir():
            raise ValueError(f"store key {key!r} names a folder, not an object")
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    def describe(self) -> str:
        return str(self.root)


def open_store(url: str) -> DataStore:
    """Opens a store from a directory path, a file:// URL or an s3://BUCKET/PREFIX URL."""
    if url.startswith("file://"):
        return LocalStore(url[len("file://") :])
    if url.startswith("s3://"):
        from drl.store.s3 import S3Store

        return S3Store(url)
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UserError(
            f"store URL scheme {scheme!r} is not supported; accepted: a directory, file://PATH, s3://BUCKET/PREFIX"
        )
    return LocalStore(url)


class PrefixedStore(DataStore):
    """A view of a store in which every key lives under ``prefix`` (one run's objects)."""

    def __init__(self, inner: DataStore, prefix: str):
        if not prefix or prefix.startswith("/") or ".." in prefix.split("/"):
            raise ValueError(f"invalid store prefix {prefix!r}")
        self.inner = inner
        self.prefix = prefix.rstrip("/") + "/"

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(self.prefix + key, data)

    def get(self, key: str) -> bytes:
        try:
            return self.inner.get(self.prefix + key)
        except KeyError:
            raise KeyError(key) from None

    def list(self, prefix: str) -> list[str]:
        return [k[len(self.prefix) :] for k in self.inner.list(self.prefix + prefix)]

    def delete(self, key: str) -> None:
        self.inner.delete(self.prefix + key)

    @property
    def remote(self) -> bool:
        return self.inner.remote

    def describe(self) -> str:
        return f"{self.inner.describe()} [{self.prefix.rstrip('/')}]"


def run_store(url: str, run: str) -> DataStore:
    """The objects of one run in the store at ``url``."""
    return PrefixedStore(open_store(url), run)
