#!/usr/bin/env python3
"""An S3 stand-in that checks every SigV4 signature it receives, written from
AWS's documentation alone (not from the gateway's code): the independent
verifier of the gateway's re-signing under credential custody.

    sigv4_store.py ACCESS_KEY_ID SECRET [REGION]   serve on 127.0.0.1:0
    sigv4_store.py --selftest                      AWS's published vectors

moto, the usual stand-in, checks the header signature only: neither the
chunk signatures of an aws-chunked body, nor its trailer signature, nor a
body against its `x-amz-content-sha256`. This store knows one key and checks
all of them, for every request, over the request exactly as received:

- the `Authorization` header (header form only): `host`, `x-amz-date`,
  `x-amz-content-sha256` and every `x-amz-*` header present signed,
  `x-amz-date` within 15 minutes of the store's clock and on the scope's
  day, the canonical request (method, canonical URI from the raw path,
  canonical query, the signed headers' values, `x-amz-content-sha256` as
  given), the string to sign and the key chain of "Signature Calculations
  for the Authorization Header";
- a hex payload hash: the SHA-256 of the body;
- `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`: the aws-chunked body inside
  the HTTP body, each chunk's signature in chain from the header's
  ("Transferring Payload in Multiple Chunks"), `x-amz-decoded-content-length`,
  and the trailer and its signature ("Including Trailing Headers"), with a
  CRC32 / SHA-1 / SHA-256 checksum trailer checked against the data;
- `UNSIGNED-PAYLOAD`, `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: the body is not
  verified (an unsigned aws-chunked body is still decoded when it can be).

Answers: 200 with `{"verified": true, "payload": ..., "chunks": N,
"decoded": <hex sha256 of the decoded data>, "trailer": {...}, ...}` (and
`ETag: "x"`), or 403 with `{"verified": false, "why": "..."}`; `HEAD` is 200
with no body and `ETag: "x"` (404 for a path containing `absent`, for a
chained write's `If-None-Match: *`; 403 empty if it does not verify). Every
verdict is kept, in order, and served (unsigned) at `GET /_verdicts`.

Not covered (no test needs them): presigned URLs, SigV4a, and a `+` in a
query, kept literal here (`%2B`), which the documentation does not settle.

Prints `listening on PORT` once serving. Python 3 standard library only.
"""

import base64
import calendar
import hashlib
import hmac
import json
import re
import sys
import threading
import time
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
UNSIGNED = "UNSIGNED-PAYLOAD"
UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


class Refused(Exception):
    """The request does not verify; the message says why."""


# ---------------------------------------------------------------------------
# SigV4, from AWS's documentation
# ---------------------------------------------------------------------------


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def hmac_sha256(key, text):
    if isinstance(text, str):
        text = text.encode("utf-8")
    return hmac.new(key, text, hashlib.sha256).digest()


def signing_key(secret, date, region, service):
    """kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region),
    service), "aws4_request")."""
    k_date = hmac_sha256(("AWS4" + secret).encode("utf-8"), date)
    k_region = hmac_sha256(k_date, region)
    k_service = hmac_sha256(k_region, service)
    return hmac_sha256(k_service, "aws4_request")


def uri_encode(raw, keep_slash):
    """URI-encode every byte but the unreserved characters A-Z a-z 0-9 - _ .
    ~ (and `/` in a path), with upper-case hex."""
    return urllib.parse.quote(raw, safe="/" if keep_slash else "")


def canonical_uri(raw_path):
    """The path as S3 reads it (each `%XX` decoded once), URI-encoded once
    (S3 does not double-encode); empty is `/`."""
    if not raw_path:
        return "/"
    decoded = urllib.parse.unquote_to_bytes(raw_path)
    return uri_encode(decoded, keep_slash=True)


def canonical_query(raw_query, skip=()):
    """Each parameter's name and value decoded, then URI-encoded (`/` too);
    sorted by encoded name, then value; `name=` when there is no value."""
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        name = urllib.parse.unquote_to_bytes(name)
        value = urllib.parse.unquote_to_bytes(value)
        if name.decode("utf-8", "replace") in skip:
            continue
        pairs.append(
            (uri_encode(name, keep_slash=False), uri_encode(value, keep_slash=False))
        )
    pairs.sort()
    return "&".join(f"{n}={v}" for n, v in pairs)


def canonical_header_value(values):
    """Values trimmed, inner runs of spaces collapsed to one, several joined
    by `,`."""
    return ",".join(re.sub(r"[ \t]+", " ", v.strip(" \t")) for v in values)


def canonical_request(method, raw_path, raw_query, header_values, signed, payload):
    """`header_values(name)` gives every value of a lowercase header name
    (None if absent)."""
    lines = [method, canonical_uri(raw_path), canonical_query(raw_query)]
    for name in signed:
        values = header_values(name)
        if not values:
            raise Refused(f"signed header {name!r} is not in the request")
        lines.append(f"{name}:{canonical_header_value(values)}")
    return "\n".join(lines) + "\n\n" + ";".join(signed) + "\n" + payload


def string_to_sign(amz_date, scope, canonical):
    return "\n".join(
        [ALGORITHM, amz_date, scope, sha256_hex(canonical.encode("utf-8"))]
    )


def chunk_string_to_sign(amz_date, scope, previous, data_sha256):
    return "\n".join(
        [
            ALGORITHM + "-PAYLOAD",
            amz_date,
            scope,
            previous,
            EMPTY_SHA256,
            data_sha256,
        ]
    )


def trailer_string_to_sign(amz_date, scope, previous, trailer_fields):
    """Each trailer field `name:value\\n` (name lower-cased, value trimmed),
    hashed."""
    canonical = "".join(f"{n.lower()}:{v.strip()}\n" for n, v in trailer_fields)
    return "\n".join(
        [
            ALGORITHM + "-TRAILER",
            amz_date,
            scope,
            previous,
            sha256_hex(canonical.encode("utf-8")),
        ]
    )


def parse_authorization(value):
    """`AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
    SignedHeaders=a;b, Signature=HEX` into its three parts."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise Refused(f"unsupported authorization scheme {algorithm!r}")
    fields = {}
    for part in rest.split(","):
        name, eq, val = part.strip().partition("=")
        if not eq or name in fields:
            raise Refused(f"malformed Authorization component {part.strip()!r}")
        fields[name] = val
    missing = {"Credential", "SignedHeaders", "Signature"} - fields.keys()
    if missing or len(fields) != 3:
        raise Refused(f"Authorization components {sorted(fields)}")
    credential = fields["Credential"].split("/")
    if len(credential) != 5 or credential[4] != "aws4_request":
        raise Refused(f"malformed credential {fields['Credential']!r}")
    signed = fields["SignedHeaders"].split(";")
    if signed != sorted(signed) or any(s != s.lower() or not s for s in signed):
        raise Refused(f"SignedHeaders not sorted lowercase names: {signed}")
    if len(set(signed)) != len(signed):
        raise Refused(f"SignedHeaders with duplicates: {signed}")
    signature = fields["Signature"]
    if not HEX64.match(signature):
        raise Refused(f"signature {signature!r} is not 64 lowercase hex digits")
    return credential, signed, signature


# ---------------------------------------------------------------------------
# aws-chunked bodies
# ---------------------------------------------------------------------------


class Reader:
    def __init__(self, data):
        self.data = data
        self.at = 0

    def line(self, what):
        end = self.data.find(b"\r\n", self.at)
        if end < 0:
            raise Refused(f"{what}: no CRLF before the end of the body (at {self.at})")
        text = self.data[self.at : end]
        self.at = end + 2
        return text

    def take(self, n, what):
        if self.at + n > len(self.data):
            raise Refused(f"{what}: body ends {self.at + n - len(self.data)} bytes short")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def crlf(self, what):
        if self.take(2, what) != b"\r\n":
            raise Refused(f"{what}: not followed by CRLF")

    def rest(self):
        return len(self.data) - self.at


def checksum_of(name, data):
    """The base64 value of a checksum trailer, or None for one not checked
    here (crc32c, crc64nvme need what the standard library lacks)."""
    if name == "x-amz-checksum-crc32":
        return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
    if name == "x-amz-checksum-sha1":
        return base64.b64encode(hashlib.sha1(data).digest()).decode()
    if name == "x-amz-checksum-sha256":
        return base64.b64encode(hashlib.sha256(data).digest()).decode()
    return None


def decode_aws_chunked(body, signed, key, amz_date, scope, seed, trailer_expected):
    """Walks `body` (aws-chunked): every chunk `HEX;chunk-signature=SIG\\r\\n
    DATA\\r\\n` (no DATA nor its CRLF for the final, empty chunk), then either
    `\\r\\n` or, with trailers, `name:value\\r\\n`..., `x-amz-trailer-signature:
    SIG\\r\\n`, `\\r\\n`. With `signed`, checks each signature in chain from
    `seed`. Returns (decoded data, chunk sizes, trailer fields, trailer
    signature checked)."""
    reader = Reader(body)
    previous = seed
    decoded = bytearray()
    sizes = []
    while True:
        header = reader.line(f"chunk {len(sizes)} header").decode("latin-1")
        size_text, _, extension = header.partition(";")
        if not re.fullmatch(r"[0-9a-fA-F]{1,16}", size_text):
            raise Refused(f"chunk {len(sizes)}: bad size {size_text!r} in {header!r}")
        size = int(size_text, 16)
        if signed:
            match = re.fullmatch(r"chunk-signature=([0-9a-f]{64})", extension)
            if not match:
                raise Refused(f"chunk {len(sizes)}: no chunk-signature in {header!r}")
            claimed = match.group(1)
        elif extension:
            raise Refused(f"chunk {len(sizes)}: extension {extension!r} in an unsigned body")
        data = reader.take(size, f"chunk {len(sizes)} data") if size else b""
        if signed:
            to_sign = chunk_string_to_sign(amz_date, scope, previous, sha256_hex(data))
            expected = hmac_sha256(key, to_sign).hex()
            if not hmac.compare_digest(expected, claimed):
                raise Refused(
                    f"chunk {len(sizes)} (size {size}): signature {claimed} "
                    f"is not {expected}; previous {previous}"
                )
            previous = claimed
        sizes.append(size)
        if size == 0:
            break
        decoded += data
        reader.crlf(f"chunk {len(sizes) - 1} data")
    fields = []
    trailer_checked = False
    if trailer_expected:
        claimed = None
        while True:
            line = reader.line("trailer").decode("latin-1")
            if line == "":
                break
            name, colon, value = line.partition(":")
            if not colon:
                raise Refused(f"trailer line {line!r} without a colon")
            if name.lower() == "x-amz-trailer-signature":
                claimed = value.strip()
                continue
            if claimed is not None:
                raise Refused(f"trailer field {name!r} after the trailer signature")
            fields.append((name, value))
        if signed:
            if claimed is None:
                raise Refused("no x-amz-trailer-signature line")
            to_sign = trailer_string_to_sign(amz_date, scope, previous, fields)
            expected = hmac_sha256(key, to_sign).hex()
            if not hmac.compare_digest(expected, claimed):
                raise Refused(
                    f"trailer signature {claimed} is not {expected}; previous {previous}; "
                    f"fields {fields}"
                )
            trailer_checked = True
        elif claimed is not None:
            raise Refused("a trailer signature in an unsigned-trailer body")
    else:
        reader.crlf("final chunk")
    if reader.rest():
        raise Refused(f"{reader.rest()} bytes after the end of the aws-chunked body")
    return bytes(decoded), sizes, fields, trailer_checked


# ---------------------------------------------------------------------------
# One request
# ---------------------------------------------------------------------------


def verify(store, method, target, headers, body, framing):
    """The verdict on one request (a dict); raises Refused."""
    verdict = {
        "method": method,
        "target": target,
        "framing": framing,
        "body_length": len(body),
    }

    def header_values(name):
        return headers.get(name)

    raw_path, _, raw_query = target.partition("?")
    if raw_path.startswith("http://") or raw_path.startswith("https://"):
        raise Refused(f"absolute-form target {target!r}")
    authorization = headers.get("authorization")
    if not authorization:
        if "x-amz-signature" in raw_query.lower():
            raise Refused("presigned URL: this store checks header signatures only")
        raise Refused("no Authorization header")
    if len(authorization) > 1:
        raise Refused("several Authorization headers")
    credential, signed, signature = parse_authorization(authorization[0])
    access_key, date, region, service, _ = credential
    verdict["access_key"] = access_key
    verdict["signed_headers"] = signed
    if access_key != store.access_key:
        raise Refused(f"unknown access key {access_key!r} (InvalidAccessKeyId)")
    if region != store.region or service != "s3":
        raise Refused(f"scope {region}/{service} is not {store.region}/s3")
    amz_dates = headers.get("x-amz-date")
    if not amz_dates or len(amz_dates) != 1:
        raise Refused("no single x-amz-date header")
    amz_date = amz_dates[0].strip()
    if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date):
        raise Refused(f"x-amz-date {amz_date!r} is not YYYYMMDDTHHMMSSZ")
    if date != amz_date[:8]:
        raise Refused(f"scope date {date} is not x-amz-date's {amz_date[:8]}")
    if store.max_skew is not None:
        signed_at = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        if abs(time.time() - signed_at) > store.max_skew:
            raise Refused(
                f"x-amz-date {amz_date} is more than 15 minutes off (RequestTimeTooSkewed)"
            )
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed:
            raise Refused(f"{required} is not signed (SignedHeaders={';'.join(signed)})")
    unsigned_amz = sorted(n for n in headers if n.startswith("x-amz-") and n not in signed)
    if unsigned_amz:
        raise Refused(f"x-amz-* headers present but not signed: {unsigned_amz}")
    payloads = headers.get("x-amz-content-sha256") or []
    if len(payloads) != 1:
        raise Refused(f"{len(payloads)} x-amz-content-sha256 headers, not one")
    payload = payloads[0].strip()
    verdict["payload"] = payload
    canonical = canonical_request(
        method, raw_path, raw_query, header_values, signed, payload
    )
    verdict["canonical_uri"] = canonical_uri(raw_path)
    verdict["canonical_query"] = canonical_query(raw_query)
    scope = f"{date}/{region}/{service}/aws4_request"
    key = signing_key(store.secret, date, region, service)
    expected = hmac_sha256(key, string_to_sign(amz_date, scope, canonical)).hex()
    if not hmac.compare_digest(expected, signature):
        raise Refused(
            f"header signature {signature} is not {expected} "
            f"(SignatureDoesNotMatch); canonical request:\n{canonical}"
        )
    verdict["header_signature"] = True

    # The payload.
    verdict["chunks"] = 0
    verdict["trailer"] = None
    verdict["body_verified"] = False
    if HEX64.match(payload):
        actual = sha256_hex(body)
        if actual != payload:
            raise Refused(f"body hash {actual} is not x-amz-content-sha256 {payload}")
        verdict["body_verified"] = True
        verdict["decoded"] = actual
        return verdict
    if payload == UNSIGNED:
        verdict["decoded"] = sha256_hex(body)
        return verdict
    if payload in (STREAMING, STREAMING_TRAILER, UNSIGNED_TRAILER):
        signed_body = payload != UNSIGNED_TRAILER
        with_trailer = payload != STREAMING
        verdict["content_encoding"] = ",".join(headers.get("content-encoding") or [])
        decoded_lengths = headers.get("x-amz-decoded-content-length")
        if not decoded_lengths or len(decoded_lengths) != 1:
            raise Refused("aws-chunked without one x-amz-decoded-content-length")
        announced = [
            t.strip().lower()
            for t in ",".join(headers.get("x-amz-trailer") or []).split(",")
            if t.strip()
        ]
        if with_trailer and not announced:
            raise Refused(f"{payload} without x-amz-trailer")
        try:
            decoded, sizes, fields, trailer_checked = decode_aws_chunked(
                body, signed_body, key, amz_date, scope, signature, with_trailer
            )
        except Refused:
            if signed_body:
                raise
            verdict["decoded"] = None
            return verdict
        if int(decoded_lengths[0]) != len(decoded):
            raise Refused(
                f"x-amz-decoded-content-length {decoded_lengths[0]} but "
                f"{len(decoded)} bytes decoded"
            )
        verdict["chunks"] = len(sizes)
        verdict["chunk_sizes"] = sizes
        verdict["decoded"] = sha256_hex(decoded)
        verdict["decoded_length"] = len(decoded)
        verdict["body_verified"] = signed_body
        if with_trailer:
            names = [n.strip().lower() for n, _ in fields]
            if sorted(names) != sorted(announced):
                raise Refused(f"trailer fields {names} are not x-amz-trailer's {announced}")
            verdict["trailer"] = {n.strip().lower(): v.strip() for n, v in fields}
            verdict["trailer_signature"] = trailer_checked
            checked = {}
            for name, value in verdict["trailer"].items():
                want = checksum_of(name, decoded)
                if want is not None and want != value:
                    raise Refused(f"trailer {name}: {value} but the data's is {want} (BadDigest)")
                checked[name] = want is not None
            verdict["checksums_checked"] = checked
        return verdict
    raise Refused(f"x-amz-content-sha256 {payload!r} is neither a hash nor a known form")


class Store:
    def __init__(self, access_key, secret, region, max_skew=15 * 60):
        self.access_key = access_key
        self.secret = secret
        self.region = region
        # Seconds x-amz-date may be off the store's clock (None: any, for
        # the 2013 examples).
        self.max_skew = max_skew
        self.verdicts = []
        self.lock = threading.Lock()

    def record(self, verdict):
        with self.lock:
            self.verdicts.append(verdict)

    def all(self):
        with self.lock:
            return list(self.verdicts)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sigv4-store"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's name)
        pass

    def __getattr__(self, name):
        # Every method: do_PUT, do_GET, do_HEAD, do_POST, do_DELETE, ...
        if name.startswith("do_"):
            return self.handle_any
        raise AttributeError(name)

    def read_body(self):
        transfer = ",".join(self.headers.get_all("Transfer-Encoding") or []).lower()
        if "chunked" in transfer:
            body = bytearray()
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(body), "chunked"
                body += self.rfile.read(size)
                self.rfile.readline(65537)
        lengths = self.headers.get_all("Content-Length") or []
        if lengths:
            return self.rfile.read(int(lengths[0])), "content-length"
        return b"", "none"

    def answer(self, status, payload, head):
        body = b"" if head else json.dumps(payload).encode()
        self.send_response(status)
        if status == 200:
            self.send_header("ETag", '"x"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def handle_any(self):
        store = self.server.store
        body, framing = self.read_body()
        head = self.command == "HEAD"
        if (
            self.command == "GET"
            and self.path == "/_verdicts"
            and not self.headers.get_all("Authorization")
        ):
            self.answer(200, store.all(), head=False)
            return
        headers = {}
        for name, value in self.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        try:
            verdict = verify(store, self.command, self.path, headers, body, framing)
            verdict["verified"] = True
            verdict["headers"] = {n: ",".join(v) for n, v in headers.items()}
            store.record(verdict)
            if head and "absent" in self.path:
                # An object that does not exist (for a chained write's
                # `If-None-Match: *`): 404, after the signature verified.
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.answer(200, verdict, head)
        except Exception as refused:  # a malformed request is a refusal too
            why = str(refused) if isinstance(refused, Refused) else f"error: {refused!r}"
            verdict = {
                "verified": False,
                "why": why,
                "method": self.command,
                "target": self.path,
                "framing": framing,
                "headers": {n: ",".join(v) for n, v in headers.items()},
            }
            store.record(verdict)
            print(f"REFUSED {self.command} {self.path}: {why}", file=sys.stderr, flush=True)
            self.answer(403, verdict, head)


# ---------------------------------------------------------------------------
# AWS's published examples
# ---------------------------------------------------------------------------

EXAMPLE_KEY = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def selftest():
    """AWS's examples (S3 API reference, "Examples of Signature Calculations",
    "Transferring Payload in Multiple Chunks"), and the trailer vector of
    AWS's CRT signer tests. Returns a list of failures."""
    failures = []
    store = Store(EXAMPLE_KEY[0], EXAMPLE_KEY[1], "us-east-1", max_skew=None)
    scope = "20130524/us-east-1/s3/aws4_request"

    def auth(signed, signature):
        return (
            f"{ALGORITHM} Credential={EXAMPLE_KEY[0]}/{scope},"
            f"SignedHeaders={signed},Signature={signature}"
        )

    # GET Object, with a Range.
    headers = {
        "host": ["examplebucket.s3.amazonaws.com"],
        "range": ["bytes=0-9"],
        "x-amz-content-sha256": [EMPTY_SHA256],
        "x-amz-date": ["20130524T000000Z"],
        "authorization": [
            auth(
                "host;range;x-amz-content-sha256;x-amz-date",
                "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
            )
        ],
    }
    try:
        verify(store, "GET", "/test.txt", headers, b"", "none")
    except Refused as e:
        failures.append(f"GET /test.txt: {e}")
    headers["range"] = ["bytes=0-8"]
    try:
        verify(store, "GET", "/test.txt", headers, b"", "none")
        failures.append("GET /test.txt with another Range verified")
    except Refused:
        pass

    # PUT Object, the body's hash.
    body = b"Welcome to Amazon S3."
    headers = {
        "host": ["examplebucket.s3.amazonaws.com"],
        "date": ["Fri, 24 May 2013 00:00:00 GMT"],
        "x-amz-date": ["20130524T000000Z"],
        "x-amz-storage-class": ["REDUCED_REDUNDANCY"],
        "x-amz-content-sha256": [sha256_hex(body)],
        "authorization": [
            auth(
                "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
            )
        ],
    }
    try:
        verify(store, "PUT", "/test%24file.text", headers, body, "content-length")
    except Refused as e:
        failures.append(f"PUT /test$file.text: {e}")
    try:
        verify(store, "PUT", "/test%24file.text", headers, body + b"!", "content-length")
        failures.append("PUT /test$file.text with another body verified")
    except Refused:
        pass

    # GET Bucket lifecycle, GET Bucket (list objects): the query.
    for target, signature in [
        ("/?lifecycle", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
        (
            "/?max-keys=2&prefix=J",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        ),
    ]:
        headers = {
            "host": ["examplebucket.s3.amazonaws.com"],
            "x-amz-date": ["20130524T000000Z"],
            "x-amz-content-sha256": [EMPTY_SHA256],
            "authorization": [auth("host;x-amz-content-sha256;x-amz-date", signature)],
        }
        try:
            verify(store, "GET", target, headers, b"", "none")
        except Refused as e:
            failures.append(f"GET {target}: {e}")

    # The chunked upload: 65536 + 1024 bytes of "a", then the final chunk.
    chunks = [
        (65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
        (1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"),
        (0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"),
    ]

    def chunked_body(trailer):
        out = bytearray()
        for size, signature in chunks:
            out += f"{size:x};chunk-signature={signature}\r\n".encode()
            if size:
                out += b"a" * size + b"\r\n"
        return bytes(out) + trailer + b"\r\n"

    body = chunked_body(b"")
    headers = {
        "host": ["s3.amazonaws.com"],
        "x-amz-date": ["20130524T000000Z"],
        "x-amz-storage-class": ["REDUCED_REDUNDANCY"],
        "x-amz-content-sha256": [STREAMING],
        "content-encoding": ["aws-chunked"],
        "x-amz-decoded-content-length": ["66560"],
        "content-length": [str(len(body))],
        "authorization": [
            auth(
                "content-encoding;content-length;host;x-amz-content-sha256;"
                "x-amz-date;x-amz-decoded-content-length;x-amz-storage-class",
                "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            )
        ],
    }
    if len(body) != 66824:
        failures.append(f"the example chunked body is {len(body)} bytes, not 66824")
    try:
        verdict = verify(store, "PUT", "/examplebucket/chunkObject.txt", headers, body, "cl")
        if verdict["chunks"] != 3 or verdict["decoded"] != sha256_hex(b"a" * 66560):
            failures.append(f"chunked example decoded wrong: {verdict}")
    except Refused as e:
        failures.append(f"chunked example: {e}")
    tampered = bytearray(body)
    tampered[-100] = ord("b")
    try:
        verify(store, "PUT", "/examplebucket/chunkObject.txt", headers, bytes(tampered), "cl")
        failures.append("a tampered chunk verified")
    except Refused:
        pass

    # The trailer after the same chain (aws-c-auth / aws-crt-swift's
    # ChunkSignerTests: trailing headers first, second, third).
    key = signing_key(EXAMPLE_KEY[1], "20130524", "us-east-1", "s3")
    trailer = [("first", "1st"), ("second", "2nd"), ("third", "3rd")]
    got = hmac_sha256(
        key, trailer_string_to_sign("20130524T000000Z", scope, chunks[2][1], trailer)
    ).hex()
    if got != "df5735bd9f3295cd9386572292562fefc93ba94e80a0a1ddcbd652c4e0a75e6c":
        failures.append(f"trailer vector: {got}")
    return failures


def main():
    if sys.argv[1:] == ["--selftest"]:
        failures = selftest()
        for failure in failures:
            print("SELFTEST FAILED:", failure, file=sys.stderr)
        print("selftest ok" if not failures else "selftest failed", flush=True)
        sys.exit(1 if failures else 0)
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    failures = selftest()
    if failures:
        print("SELFTEST FAILED:", failures, file=sys.stderr)
        sys.exit(1)
    region = sys.argv[3] if len(sys.argv) == 4 else "us-east-1"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.store = Store(sys.argv[1], sys.argv[2], region)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
