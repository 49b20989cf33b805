"""The object store's settings, in one place: read once from the environment, handed to Spark's
S3A connector, to delta-rs (`dataflow sql`, the pane explorer) and to pyarrow (listing tables).

Why the environment: every process that touches the warehouse (the CLI, a micro-batch's
driver, an Airflow task, a Spark worker launched by `make stack`) inherits it, and the names are
the AWS SDKs' own, so a shell already set up for S3 needs nothing more:

- `AWS_ENDPOINT_URL`: an S3-compatible server (e.g. `http://127.0.0.1:9000`); unset for AWS
- `AWS_REGION` (or `AWS_DEFAULT_REGION`; default us-east-1)
- `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`: unset, S3A and delta-rs
  fall back to their own credential chains (instance profiles, ...)
- `DATAFLOW_S3_PATH_STYLE`: `true`/`false`; by default path-style (`host/bucket/key`) with an
  endpoint, as most S3-compatible servers need, virtual-hosted without (AWS)
- `DATAFLOW_S3_LOG_STORE`: Delta's log store class for S3 tables, by default the product's
  (LOG_STORE_CLASS), which needs a store that honours `If-None-Match: *`; on one that does not,
  `io.delta.storage.S3SingleDriverLogStore` works, safe with ONE writing driver per table only
  (docs/deployment.md)

Secrets never reach a message or a command line: `S3Settings`' repr leaves them out, they
are set in the running JVM's Hadoop configuration (`credentials_conf`), never as a launch
setting (which pyspark passes to spark-submit as `--conf`, visible to `ps`), and delta-rs and
pyarrow get them in process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlparse

SCHEMES = ("s3a://", "s3://")
LOG_STORE_CLASS = "io.dataflow.s3.ConditionalPutLogStore"
"""Delta's log store for `s3a://` tables in every session (built by `dataflow_core.spark.platform.s3a`)."""


def is_object_store(uri: str | os.PathLike[str] | None) -> bool:
    """True for a warehouse on S3 (`s3a://` or `s3://`), whose code paths differ from a
    local folder's: no local file system classes, the S3A jars, the conditional log store."""
    return str(uri or "").startswith(SCHEMES)


@dataclass(frozen=True)
class S3Settings:
    """Endpoint, region, path style and credentials of the object store."""

    endpoint: str | None
    region: str
    path_style: bool
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    log_store: str = LOG_STORE_CLASS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "S3Settings":
        env = os.environ if env is None else env
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        style = env.get("DATAFLOW_S3_PATH_STYLE", "").strip().lower()
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            path_style=style in ("1", "true", "yes") if style else endpoint is not None,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            log_store=env.get("DATAFLOW_S3_LOG_STORE") or LOG_STORE_CLASS,
        )

    @property
    def secure(self) -> bool:
        return self.endpoint is None or urlparse(self.endpoint).scheme != "http"

    def hadoop_conf(self) -> dict[str, str]:
        """S3A's settings (without the `spark.hadoop.` prefix) but its credentials
        (`credentials_conf`)."""
        conf = {
            "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": str(self.path_style).lower(),
            "fs.s3a.connection.ssl.enabled": str(self.secure).lower(),
            # S3A's conditional create (If-None-Match: *) is what the log store commits with:
            # on by default in Hadoop 3.5, set so that a site default cannot turn it off unseen
            "fs.s3a.create.conditional.enabled": "true",
        }
        if self.endpoint:
            conf["fs.s3a.endpoint"] = self.endpoint
        if self.access_key and self.secret_key and self.session_token:
            conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        return conf

    def credentials_conf(self) -> dict[str, str]:
        """S3A's credentials (without the `spark.hadoop.` prefix), for `session.set_credentials`
        to put into the running JVM's Hadoop configuration: a setting given before the JVM
        starts becomes a `--conf` argument of spark-submit, which any local user reads with
        `ps`. Empty without keys: S3A's own credential chain (instance profiles, ...) serves."""
        if not (self.access_key and self.secret_key):
            return {}
        conf = {"fs.s3a.access.key": self.access_key, "fs.s3a.secret.key": self.secret_key}
        if self.session_token:
            conf["fs.s3a.session.token"] = self.session_token
        return conf

    def spark_conf(self) -> dict[str, str]:
        """The session's settings: S3A's (as `spark.hadoop.*`, so executors get them too) and
        Delta's log store for the `s3a` and `s3` schemes."""
        conf = {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}
        conf["spark.hadoop.fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"  # s3:// is S3A too
        conf["spark.delta.logStore.s3a.impl"] = self.log_store
        conf["spark.delta.logStore.s3.impl"] = self.log_store
        return conf

    def storage_options(self) -> dict[str, str]:
        """delta-rs' `storage_options` for the same objects."""
        options = {"AWS_REGION": self.region}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            if not self.secure:
                options["AWS_ALLOW_HTTP"] = "true"
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        if self.access_key and self.secret_key:
            options["AWS_ACCESS_KEY_ID"] = self.access_key
            options["AWS_SECRET_ACCESS_KEY"] = self.secret_key
            if self.session_token:
                options["AWS_SESSION_TOKEN"] = self.session_token
        return options

    def pyarrow_fs(self, allow_bucket_creation: bool = False):
        """A pyarrow S3 file system on the same store (to list the warehouse's tables)."""
        from pyarrow import fs as pafs

        kwargs = {"region": self.region, "force_virtual_addressing": not self.path_style,
                  "allow_bucket_creation": allow_bucket_creation}
        if self.endpoint:
            parsed = urlparse(self.endpoint)
            kwargs["endpoint_override"] = parsed.netloc or self.endpoint
            kwargs["scheme"] = parsed.scheme or "https"
        if self.access_key and self.secret_key:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key, session_token=self.session_token)
        return pafs.S3FileSystem(**kwargs)


def bucket_path(uri: str) -> str:
    """`bucket/prefix` of an `s3a://` or `s3://` URI (how pyarrow names it)."""
    for scheme in SCHEMES:
        if uri.startswith(scheme):
            return uri[len(scheme):].rstrip("/")
    raise ValueError(f"not an S3 URI: {uri}")


def create_bucket(uri: str) -> None:
    """Make the bucket of an `s3a://` warehouse unless it exists (docker-compose.yml's
    airflow-init: `python -m dataflow_core.objectstore s3a://bucket/prefix`)."""
    bucket = bucket_path(uri).split("/", 1)[0]
    S3Settings.from_env().pyarrow_fs(allow_bucket_creation=True).create_dir(bucket)


if __name__ == "__main__":
    import sys

    create_bucket(sys.argv[1] if len(sys.argv) > 1 else os.environ["DATAFLOW_WAREHOUSE"])
