"""An S3 API on loopback for tests: moto's server, so that trial storage at `s3://` runs without a cloud.

`s3_server(root)` starts it, makes a bucket and yields an `ObjectStore`: the environment its clients
need (fake credentials, no instance-metadata lookups) and the URIs forge-ml is given, written as a user
of MinIO or any S3-compatible store writes them (`s3://bucket/prefix?endpoint_override=…&scheme=http`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mlflow_server import BIN, free_port, wait_for

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "forge-test",
    "AWS_SECRET_ACCESS_KEY": "forge-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str  # host:port
    bucket: str

    @property
    def env(self) -> dict[str, str]:
        return dict(S3_ENV)

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http"

    def filesystem(self):
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(
            access_key=S3_ENV["AWS_ACCESS_KEY_ID"],
            secret_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            region=S3_ENV["AWS_DEFAULT_REGION"],
            endpoint_override=self.endpoint,
            scheme="http",
            allow_bucket_creation=True,
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object under `bucket/prefix`, as paths relative to it."""
        import pyarrow.fs

        root = f"{self.bucket}/{prefix}"
        found = self.filesystem().get_file_info(pyarrow.fs.FileSelector(root, recursive=True))
        return sorted(i.path[len(root) + 1 :] for i in found if i.type == pyarrow.fs.FileType.File)


@contextmanager
def s3_server(root: Path, bucket: str = "forge") -> Iterator[ObjectStore]:
    port = free_port()
    log = (root / "moto.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        store = ObjectStore(f"127.0.0.1:{port}", bucket)
        wait_for(lambda: store.filesystem().create_dir(bucket) is None, "the S3 server", timeout=60)
        yield store
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
