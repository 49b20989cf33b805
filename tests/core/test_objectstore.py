"""The object store's settings: one reading of the environment becomes Spark's S3A settings
and delta-rs' options for the same store, and the secrets in it are never shown."""

from dataflow_core.objectstore import LOG_STORE_CLASS, S3Settings, bucket_path, is_object_store

ENV = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/", "AWS_REGION": "eu-west-1",
       "AWS_ACCESS_KEY_ID": "AKIA-ID", "AWS_SECRET_ACCESS_KEY": "very-secret"}


def test_one_reading_serves_spark_and_delta_rs_alike():
    settings = S3Settings.from_env(ENV)
    spark = settings.spark_conf()
    rs = settings.storage_options()
    assert spark["spark.hadoop.fs.s3a.endpoint"] == rs["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert spark["spark.hadoop.fs.s3a.endpoint.region"] == rs["AWS_REGION"] == "eu-west-1"
    assert spark["spark.hadoop.fs.s3a.path.style.access"] == "true" and rs["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    assert spark["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false" and rs["AWS_ALLOW_HTTP"] == "true"
    assert settings.credentials_conf()["fs.s3a.secret.key"] == rs["AWS_SECRET_ACCESS_KEY"] == "very-secret"
    assert not any("very-secret" in value or "AKIA-ID" in value for value in spark.values())  # never a launch setting
    assert spark["spark.delta.logStore.s3a.impl"] == spark["spark.delta.logStore.s3.impl"] == LOG_STORE_CLASS


def test_aws_itself_needs_no_endpoint_and_is_addressed_by_virtual_host():
    settings = S3Settings.from_env({})
    assert settings.endpoint is None and settings.region == "us-east-1"
    assert "spark.hadoop.fs.s3a.endpoint" not in settings.spark_conf()
    assert "spark.hadoop.fs.s3a.access.key" not in settings.spark_conf()  # S3A's own credential chain
    assert settings.storage_options()["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true"


def test_secrets_are_not_shown():
    shown = repr(S3Settings.from_env({**ENV, "AWS_SESSION_TOKEN": "token-value"}))
    assert "very-secret" not in shown and "AKIA-ID" not in shown and "token-value" not in shown
    assert "127.0.0.1:9000" in shown


def test_only_s3_uris_are_object_stores():
    assert is_object_store("s3a://lake/wh") and is_object_store("s3://lake")
    assert not is_object_store("/tmp/warehouse") and not is_object_store("file:/tmp/w") and not is_object_store(None)
    assert bucket_path("s3a://lake/wh/") == "lake/wh"
