"""The data's endpoint: checked before any run, and read one object at a time.

    ep = Endpoint.parse("s3://bucket/prefix/")      # or "http://host/shard-{000..099}.tar"
    ep.check()                                       # EndpointError (exit 2) if unusable
    names = ep.objects(limit=256)                    # the dataset's own objects
    ttfb_s, nbytes = ep.fetch(names[0], ep.client())  # one GET, read whole

`check` turns the three ways an endpoint fails before it serves a byte into one
line each: unreachable (nothing answers at the address), no credentials (S3:
none in the environment, profile or instance), missing bucket or object. An S3
endpoint other than AWS's comes from `AWS_ENDPOINT_URL`, as boto3, s3fs and
s3torchconnector take it. boto3 is imported only for an s3:// endpoint.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from dsanalyze.errors import EndpointError

CONNECT_TIMEOUT_S = 5.0
READ_CHUNK_BYTES = 1 << 20
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Endpoint:
    """An `s3://bucket/prefix` or an `http(s)://` URL (braces expand to the shards)."""

    url: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        if not url.startswith(("s3://", "http://", "https://")):
            raise EndpointError(f"cannot read endpoint {url!r}: write s3://bucket/prefix or "
                                "http://host/path (braces for shards: shard-{000..099}.tar)")
        return cls(url)

    @property
    def is_s3(self) -> bool:
        return self.url.startswith("s3://")

    @property
    def bucket(self) -> str:
        return self.url[len("s3://"):].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        parts = self.url[len("s3://"):].split("/", 1)
        return parts[1] if len(parts) > 1 else ""

    def check(self) -> None:
        """Raise EndpointError, one line saying what to do, unless an object can be read."""
        if self.is_s3:
            self._check_s3()
        elif not self.objects(limit=1):
            raise EndpointError(f"no URL in {self.url}")
        else:
            self._http_get(self.objects(limit=1)[0], head_only=True)

    def objects(self, limit: int = 256) -> list[str]:
        """Up to `limit` of the dataset's objects: S3 keys under the prefix, or the URLs."""
        if not self.is_s3:
            import braceexpand

            return list(braceexpand.braceexpand(self.url))[:limit]
        page = self._s3().list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=limit)
        return [o["Key"] for o in page.get("Contents", [])]

    def client(self) -> Any:
        """What `fetch` reads with: an S3 client (one per thread), or None for HTTP."""
        return self._s3() if self.is_s3 else None

    def fetch(self, name: str, client: Any = None) -> tuple[float, int]:
        """GET one object whole: (seconds to its first byte, bytes)."""
        t0 = time.perf_counter()
        if self.is_s3:
            body = client.get_object(Bucket=self.bucket, Key=name)["Body"]
        else:
            body = self._http_get(name)
        with body:
            first = body.read(1)
            ttfb_s = time.perf_counter() - t0
            n = len(first)
            while chunk := body.read(READ_CHUNK_BYTES):
                n += len(chunk)
        return ttfb_s, n

    def _s3(self) -> Any:
        import boto3
        from botocore.config import Config

        # a boto3 client is thread-safe once made (its creation is not: make it first)
        return boto3.session.Session().client(
            "s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
            config=Config(connect_timeout=CONNECT_TIMEOUT_S, retries={"max_attempts": 1},
                          max_pool_connections=64))

    def _check_s3(self) -> None:
        import boto3
        import botocore.exceptions as bx

        if boto3.session.Session().get_credentials() is None:
            raise EndpointError(f"no S3 credentials for {self.url}: set AWS_ACCESS_KEY_ID and "
                                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        where = os.environ.get("AWS_ENDPOINT_URL") or "AWS"
        try:
            self._s3().head_bucket(Bucket=self.bucket)
        except (bx.EndpointConnectionError, bx.ConnectTimeoutError) as e:
            raise EndpointError(f"cannot reach the S3 endpoint {where}: {e}; check "
                                "AWS_ENDPOINT_URL and the network") from None
        except bx.ClientError as e:
            code = str(e.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchBucket"):
                raise EndpointError(f"bucket {self.bucket!r} not found at {where}: check the "
                                    "s3:// URL") from None
            raise EndpointError(f"S3 refused bucket {self.bucket!r} at {where} ({code}): check "
                                "the credentials and their permissions") from None
        if not self.objects(limit=1):
            raise EndpointError(f"no objects under {self.url}: check the prefix")

    def _http_get(self, url: str, head_only: bool = False) -> Any:
        request = urllib.request.Request(url, method="HEAD" if head_only else "GET")
        try:
            return _NO_PROXY.open(request, timeout=CONNECT_TIMEOUT_S)
        except urllib.error.HTTPError as e:
            raise EndpointError(f"{url}: HTTP {e.code} {e.reason}: check the URL") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise EndpointError(f"cannot reach {url}: {reason}; check the host, the port and "
                                "the network") from None
