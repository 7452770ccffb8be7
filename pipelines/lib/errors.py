"""Configuration errors: a wrong or missing setting is named, with its value and what went wrong.

Resources catch the specific errors a library raises where they talk to a service and raise
`ConfigurationError` from them, so an operator reads "bucket 'x' (FLYWHEEL_LANDING_BUCKET) does
not exist", not a traceback from deep inside boto3, MLflow or SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

# Defined with the settings, below the services; named here too, where they have always been.
from pipelines.settings import S3_ENDPOINT_SETTING, ConfigurationError, Setting


def redact(url: str) -> str:
    """`url` with the password of its user, if any, replaced by `***`."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in user:
        return url
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def reason(error: BaseException) -> str:
    """Why a connection failed, in a few words: the innermost OS error ('connection refused')."""
    oserrors = [
        e
        for e in causes(error)
        if isinstance(e, OSError) and (e.strerror or isinstance(e, TimeoutError))
    ]
    if not oserrors:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return (oserrors[-1].strerror or "timed out").lower()


def causes(error: BaseException) -> list[BaseException]:
    """`error` and what caused it, outermost first: each one's cause, else its context."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and not any(current is seen for seen in chain):
        chain.append(current)
        # urllib keeps the socket's error in `reason`, botocore in `kwargs["error"]` (its
        # retries re-raise it, so its context may be whatever was being handled then).
        kwargs = getattr(current, "kwargs", None)
        kept = kwargs.get("error") if isinstance(kwargs, dict) else None
        for inner in (getattr(current, "reason", None), kept, current.__cause__):
            if isinstance(inner, BaseException):
                break
        else:
            inner = current.__context__
        current = inner
    return chain


def s3_location(endpoint_url: str | None) -> str:
    """Where S3 requests go, naming the setting that chose it."""
    if endpoint_url:
        return f"S3 endpoint {redact(endpoint_url)} ({S3_ENDPOINT_SETTING})"
    return f"AWS S3 ({S3_ENDPOINT_SETTING} unset)"


@contextmanager
def s3_errors(bucket: str, setting: str, endpoint_url: str | None) -> Iterator[None]:
    """Turn what boto3 raises for a wrong bucket, endpoint or credentials into ConfigurationError.

    `setting` names the environment variable the bucket comes from; other errors pass unchanged.
    """
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ParamValidationError,
    )

    where, named = s3_location(endpoint_url), f"bucket {bucket!r} ({setting})"
    try:
        yield
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            raise ConfigurationError(f"{named} does not exist at {where}") from e
        if code == "InvalidBucketName":
            raise ConfigurationError(f"{named} is not a valid bucket name") from e
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"):
            raise ConfigurationError(
                f"{where} refuses {named} to the AWS credentials "
                f"(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): {code}"
            ) from e
        raise
    except (EndpointConnectionError, ConnectTimeoutError) as e:
        raise ConfigurationError(f"{where} is unreachable: {reason(e)}") from e
    except NoCredentialsError as e:
        raise ConfigurationError(
            f"no AWS credentials for {where}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE)"
        ) from e
    except ParamValidationError as e:
        if "bucket" not in str(e).lower():
            raise
        raise ConfigurationError(f"{named} is not a valid bucket name") from e


def probe_bucket(
    bucket: str,
    setting: str,
    endpoint_url: str | None,
    timeout_s: float,
    key: tuple[str | None, str | None] = (None, None),
    prefix: str = "",
) -> None:
    """List `bucket` (under `prefix`: a key may list no more) once, with `timeout_s` to connect
    and to answer and no retries, as the client of `key` (its id and secret; None: the default
    credentials) would."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=timeout_s, read_timeout=timeout_s, retries={"total_max_attempts": 1}
    )
    # A session of its own: boto3's default one is not safe to share between sensor threads.
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        config=config,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
    )
    with s3_errors(bucket, setting, endpoint_url):
        client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)


def secret(field: object) -> str:
    """The value of a resource's secret field, which the definitions set to a `dg.EnvVar`: the
    UI then shows the variable's name, never its value.

    Dagster puts the variable's value in the field when it initializes the resource for a run;
    a resource used as it was built (the preflight, the simulator's command line, a test
    reading the warehouse) still holds the EnvVar, whose value is read here, with an error
    naming the variable when it is unset. Any other field is its own value.
    """
    from dagster import EnvVar

    return Setting(field.env_var_name).required() if isinstance(field, EnvVar) else field
