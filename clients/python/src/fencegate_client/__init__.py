"""fencegate-client: fencing tokens from lock services, attached to the
requests that go through a fencegate gateway, and the gateway's refusals as
exceptions."""

from .attach import (
    AZURE_TOKEN_HEADER,
    TOKEN_HEADER,
    AzureFencingPolicy,
    Boto3TokenHook,
    FencedSession,
    TokenHolder,
    TokenSource,
    current_token,
    fence_boto3,
    headers,
    presigned_url,
)
from .errors import (
    FencingError,
    GatewayError,
    LockLost,
    MissingToken,
    StaleToken,
    VersionConflict,
    VersionUnknown,
    fencing_error,
    parse_answer,
    raise_for_fencing,
)
from .fenced import fenced, fenced_boto3
from .locks import EtcdLock, FencedLock, LockNotHeld, LockTimeout, PostgresLock, RedisLock, ZooKeeperLock
from .retry import retry_chained

__version__ = "0.1.0"

__all__ = [
    "AZURE_TOKEN_HEADER",
    "TOKEN_HEADER",
    "AzureFencingPolicy",
    "Boto3TokenHook",
    "EtcdLock",
    "FencedLock",
    "FencedSession",
    "FencingError",
    "GatewayError",
    "LockLost",
    "LockNotHeld",
    "LockTimeout",
    "MissingToken",
    "PostgresLock",
    "RedisLock",
    "StaleToken",
    "TokenHolder",
    "TokenSource",
    "VersionConflict",
    "VersionUnknown",
    "ZooKeeperLock",
    "current_token",
    "fence_boto3",
    "fenced",
    "fenced_boto3",
    "fencing_error",
    "headers",
    "parse_answer",
    "presigned_url",
    "raise_for_fencing",
    "retry_chained",
]
