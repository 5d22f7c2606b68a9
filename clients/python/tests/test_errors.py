"""The gateway's answers read as the kit's exceptions (JSON from a real
gateway, and the SPEC's documented shapes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from fencegate_client import (
    FencedSession,
    GatewayError,
    MissingToken,
    StaleToken,
    TokenHolder,
    VersionConflict,
    VersionUnknown,
    headers,
    parse_answer,
    raise_for_fencing,
)
from fencegate_client.errors import from_fields


def test_json_answers_of_a_real_gateway(gateway: Callable[..., Any]) -> None:
    gw = gateway()
    url = f"{gw.url}/bucket/report.csv"
    holder = TokenHolder(34)
    session = FencedSession(holder)
    assert session.put(url, data=b"34", timeout=10).status_code in (200, 201, 204)
    holder.token = 33
    with pytest.raises(StaleToken) as raised:
        session.put(url, data=b"33", timeout=10)
    assert (raised.value.token, raised.value.highest, raised.value.resource) == (33, 34, "/bucket/report.csv")
    assert raised.value.reason == "below_highest" and raised.value.status == 409
    with pytest.raises(MissingToken):
        raise_for_fencing(requests.delete(url, timeout=10))
    with pytest.raises(GatewayError) as bad:
        raise_for_fencing(requests.put(url, headers={"X-Fencing-Token": "-1"}, timeout=10))
    assert bad.value.code == "invalid_token"
    # the session never sends the header twice
    assert session.put(url, data=b"35", headers=headers(35), timeout=10).status_code in (200, 201, 204)
    raise_for_fencing(requests.get(url, timeout=10))  # a 200: nothing raised


def test_documented_shapes() -> None:
    conflict = from_fields(
        parse_answer('{"error":"version_conflict","resource":"/b","object":"/b/k","token":7,"retry":true}'), 409
    )
    assert isinstance(conflict, VersionConflict) and conflict.retry is True and conflict.token == 7
    unknown = from_fields(
        parse_answer(b"<Error><Code>version_unknown</Code><Resource>/b</Resource><Object>/b/k</Object></Error>"), 428
    )
    assert isinstance(unknown, VersionUnknown) and unknown.object == "/b/k"
    stale = from_fields(parse_answer('{"error":"stale_token"}'), 409, {"x-fencing-highest": "40"})
    assert isinstance(stale, StaleToken) and stale.highest == 40
    assert from_fields(parse_answer('{"error":"NoSuchKey"}'), 404) is None
    assert parse_answer("not json") == {}


def test_token_values_are_checked() -> None:
    assert headers(0) == {"X-Fencing-Token": "0"}
    assert headers(2**64 - 1)["X-Fencing-Token"] == "18446744073709551615"
    assert headers(TokenHolder()) == {}
    for bad in (-1, 2**64, True):
        with pytest.raises(ValueError):
            headers(bad)
