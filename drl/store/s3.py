"""S3-compatible data store (AWS S3, MinIO, any S3 endpoint) through the minio client.

``s3://BUCKET/PREFIX``, with the endpoint, region and TLS settings from the URL's query or the environment,
and credentials only from the environment or AWS-style files (never from process arguments):

- endpoint: ``?endpoint=http://HOST:PORT`` or ``$DRL_S3_ENDPOINT`` (default ``https://s3.amazonaws.com``);
  the scheme decides TLS; ``$DRL_S3_CA`` names a CA bundle for a private TLS endpoint
- region: ``?region=`` or ``$DRL_S3_REGION``, ``$AWS_REGION``, ``$AWS_DEFAULT_REGION``
- credentials: ``$AWS_ACCESS_KEY_ID``/``$AWS_SECRET_ACCESS_KEY`` (``$AWS_SESSION_TOKEN``), then
  ``$AWS_SHARED_CREDENTIALS_FILE`` or ``~/.aws/credentials`` (profile ``$AWS_PROFILE``), then MinIO's variables
- the bucket is created when missing unless ``$DRL_S3_CREATE_BUCKET=0``

Transient failures (connection refused, timeouts, 5xx, throttling) are retried with backoff for
``$DRL_STORE_RETRY_S`` seconds (default 300) and logged, so a short outage of the endpoint never kills a run.
"""

from __future__ import annotations

import http.client
import io
import logging
import os
import ssl
import time
from typing import Callable, TypeVar
from urllib.parse import parse_qs, urlsplit

import urllib3

from drl.errors import UserError
from drl.store.base import DataStore

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "OperationAborted",
    "Throttling",
}
TRANSIENT_STATUS = {500, 502, 503, 504}
# How long the first contact (the bucket check) tolerates a peer that accepts connections but does not answer
# HTTP (e.g. a Redis port): long enough for a proxy that is restarting, short enough for a wrong address.
NOT_HTTP_S = 5.0


def _causes(exc: BaseException):
    seen = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += [e.__cause__, e.__context__, *(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))]


def tls_failure(exc: BaseException) -> str | None:
    """A reason when ``exc`` is a TLS failure that retrying cannot fix (untrusted certificate, or a peer that
    does not speak TLS); None otherwise."""
    for e in _causes(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            return (
                f"the server's TLS certificate is not trusted ({e.verify_message or e}); for a private CA set "
                "DRL_S3_CA to its certificate bundle"
            )
        if isinstance(e, ssl.SSLError) and e.reason in (
            "WRONG_VERSION_NUMBER",
            "RECORD_LAYER_FAILURE",
            "PACKET_LENGTH_TOO_LONG",
        ):
            return f"the TLS handshake failed ({e.reason}): does the endpoint speak https?"
    return None


def not_http(exc: BaseException) -> bool:
    """Whether the peer accepted the connection but gave no HTTP answer (closed at once or sent garbage)."""
    return any(isinstance(e, (http.client.RemoteDisconnected, http.client.BadStatusLine)) for e in _causes(exc))


class S3Store(DataStore):
    def __init__(self, url: str, env: dict[str, str] | None = None):
        from minio import Minio
        from minio.credentials import AWSConfigProvider, ChainedProvider, EnvAWSProvider, EnvMinioProvider

        env = dict(os.environ if env is None else env)
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise UserError(f"store URL {url!r} is not valid; expected s3://BUCKET/PREFIX")
        if "@" in parts.netloc:
            raise UserError(
                "store URL must not carry credentials; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                "or an AWS credentials file"
            )
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise UserError(f"store URL option(s) {', '.join(sorted(unknown))} unknown; accepted: endpoint, region")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        endpoint = query.get("endpoint") or env.get("DRL_S3_ENDPOINT") or "https://s3.amazonaws.com"
        ep = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        if ep.scheme not in ("http", "https") or not ep.netloc:
            raise UserError(f"S3 endpoint {endpoint!r} is not valid; expected http://HOST:PORT or https://HOST")
        region = (
            query.get("region") or env.get("DRL_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        )
        try:
            self.retry_s = float(env.get("DRL_STORE_RETRY_S", "300"))
        except ValueError:
            raise UserError(
                f"DRL_STORE_RETRY_S must be a number of seconds, got {env['DRL_STORE_RETRY_S']!r}"
            ) from None
        ca = env.get("DRL_S3_CA") or None
        if ca is not None and not os.path.isfile(ca):
            raise UserError(f"DRL_S3_CA={ca} is not a readable file")
        timeout = urllib3.Timeout(connect=5.0, read=10.0)
        pool = urllib3.PoolManager(
            timeout=timeout,
            retries=False,
            maxsize=8,
            ca_certs=ca,
            cert_reqs="CERT_REQUIRED" if ep.scheme == "https" else None,
        )
        self.endpoint = f"{ep.scheme}://{ep.netloc}"
        self.client = Minio(
            ep.netloc,
            secure=ep.scheme == "https",
            region=region,
            http_client=pool,
            credentials=ChainedProvider([EnvAWSProvider(), AWSConfigProvider(), EnvMinioProvider()]),
        )
        self._ensure_bucket(env.get("DRL_S3_CREATE_BUCKET", "1") not in ("0", "false", "no"))

    @property
    def remote(self) -> bool:
        return True

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} at {self.endpoint}"

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
            raise ValueError(f"invalid store key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _retry(self, fn: Callable[[], T], what: str, not_http_s: float | None = None) -> T:
        """fn(), retried on transient failures for ``retry_s``; failures no retry can fix (an untrusted TLS
        certificate, a server that is not S3) are a ``UserError`` at once, and a peer that answers no HTTP at all
        is one after ``not_http_s`` when given."""
        from minio.error import InvalidResponseError, S3Error, ServerError

        start = time.monotonic()
        deadline = start + self.retry_s
        delay = 0.2
        while True:
            try:
                return fn()
            except S3Error as exc:
                if exc.code not in TRANSIENT_CODES:
                    raise
                error: Exception = exc
            except InvalidResponseError as exc:
                if exc._code not in TRANSIENT_STATUS:
                    raise UserError(
                        f"S3 store {self.describe()}: {what}: the endpoint does not answer like an S3 "
                        f"server (HTTP {exc._code}, {exc._content_type or 'no content type'}); is "
                        "the endpoint right?"
                    ) from None
                error = exc
            except (ServerError, urllib3.exceptions.HTTPError, OSError) as exc:
                reason = tls_failure(exc)
                if reason:
                    raise UserError(f"S3 store {self.describe()}: {what} failed: {reason}") from None
                if not_http_s is not None and not_http(exc) and time.monotonic() - start >= not_http_s:
                    raise UserError(
                        f"S3 store {self.describe()}: {what}: the endpoint accepts connections but gives "
                        f"no HTTP answer (is it an S3 endpoint?): {exc}"
                    ) from None
                error = exc
            if time.monotonic() + delay > deadline:
                raise UserError(
                    f"S3 store {self.describe()}: {what} kept failing for {self.retry_s:.0f}s: {error}"
                ) from None
            quiet = not_http_s is not None and not_http(error)  # decided within seconds; no noise meanwhile
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "S3 %s failed (%s); retrying in %.1fs",
                what,
                str(error).splitlines()[0][:200],
                delay,
            )
            time.sleep(delay)
            delay = min(5.0, delay * 2)

    def _ensure_bucket(self, create: bool) -> None:
        from minio.error import S3Error

        try:
            exists = self._retry(
                lambda: self.client.bucket_exists(self.bucket), "bucket check", not_http_s=min(NOT_HTTP_S, self.retry_s)
            )
        except S3Error as exc:
            raise UserError(f"S3 store {self.describe()}: {exc.code}: {exc.message}") from None
        if exists:
            return
        if not create:
            raise UserError(f"S3 bucket {self.bucket!r} does not exist (creation disabled by DRL_S3_CREATE_BUCKET=0)")
        try:
            self._retry(lambda: self.client.make_bucket(self.bucket), "bucket creation")
        except S3Error as exc:
            if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise UserError(f"S3 bucket {self.bucket!r} cannot be created: {exc.code}: {exc.message}") from None

    def put(self, key: str, data: bytes) -> None:
        name = self._key(key)
        self._retry(lambda: self.client.put_object(self.bucket, name, io.BytesIO(data), len(data)), f"put {name}")

    def get(self, key: str) -> bytes:
        from minio.error import S3Error

        name = self._key(key)

        def _get() -> bytes:
            response = self.client.get_object(self.bucket, name)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        try:
            return self._retry(_get, f"get {name}")
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject"):
                raise KeyError(key) from None
            raise

    def list(self, prefix: str) -> list[str]:
        if prefix.startswith("/") or ".." in prefix.split("/"):
            raise ValueError(f"invalid store prefix {prefix!r}")
        base = self.prefix + "/" if self.prefix else ""
        full = base + prefix
        strip = len(base)
        objects = self._retry(
            lambda: [o.object_name for o in self.client.list_objects(self.bucket, prefix=full, recursive=True)],
            f"list {full}",
        )
        return sorted(name[strip:] for name in objects)

    def delete(self, key: str) -> None:
        name = self._key(key)
        self._retry(lambda: self.client.remove_object(self.bucket, name), f"delete {name}")
