//! Transparency with S3 (SPEC, "What is never forwarded": a request through
//! the gateway gets the answer it would get from the backend directly): the
//! same boto3 session (`tests/clients/boto3_transparency.py`: puts with
//! metadata, `Content-MD5` right and wrong, checksums, an empty body, a key
//! with spaces and percent signs, gets, ranges, conditional gets, `HEAD`s,
//! copies, listings, `DeleteObjects`, a two-part multipart upload, missing
//! keys and buckets) against moto's S3 server directly and through the
//! gateway with `--allow-unfenced-writes`: every operation must get the same
//! status, error code, ETags, lengths, ranges and bodies.

#[path = "../support/mod.rs"]
mod support;

use support::moto::{moto, run_client};
use support::GatewayProcess;

#[test]
fn every_s3_operation_gets_the_same_answer_through_the_gateway() {
    let moto = moto();
    let gateway = GatewayProcess::start(&["--upstream", &moto.url(), "--allow-unfenced-writes"]);
    let direct = run_client(
        "boto3_transparency.py",
        &[&moto.url(), "transparency-direct"],
        String::new,
    );
    let through = run_client(
        "boto3_transparency.py",
        &[&gateway.data_url(), "transparency-through"],
        || gateway.stderr(),
    );
    let (direct, through) = (
        direct.as_object().expect("an object"),
        through.as_object().expect("an object"),
    );
    let differences: Vec<String> = direct
        .iter()
        .filter(|(name, outcome)| through.get(*name) != Some(*outcome))
        .map(|(name, outcome)| {
            format!(
                "{name}: direct {outcome}, through the gateway {}",
                through
                    .get(name)
                    .map_or("(missing)".to_owned(), |o| o.to_string())
            )
        })
        .collect();
    assert!(
        differences.is_empty() && direct.len() == through.len(),
        "S3 answers differ through the gateway:\n{}",
        differences.join("\n")
    );
    if std::env::var_os("S3_TRANSPARENCY_SHOW").is_some() {
        eprintln!(
            "{}",
            serde_json::to_string_pretty(direct).unwrap_or_default()
        );
    }
    // The session did what it says (not two identical failures).
    assert_eq!(direct["put"]["status"], 200);
    assert_eq!(direct["get_missing"]["error"], "NoSuchKey");
    assert_eq!(direct["get_if_none_match"]["status"], 304);
    assert_eq!(direct["get_range"]["status"], 206);
    assert_eq!(direct["multipart_get"]["body_len"], 5 * 1024 * 1024 + 4);
}

/// Routes issue, class 6: one S3 object, one fence, whatever the
/// addressing. Without custody, under `--store s3 --s3-domain localhost`,
/// moto reads `Host: BUCKET.localhost` as virtual-hosted; the gateway reads
/// it the same way (the fence of `/BUCKET/key`, as its path-style twin's)
/// and forwards it as sent. A port never changes a key, in the host scopes
/// too; a host the domain does not cover is refused.
#[test]
fn a_virtual_hosted_object_and_its_path_style_twin_share_one_fence() {
    use support::moto::S3_AUTH;
    use support::{http, Resp};
    let moto = moto();
    let bucket = "one-fence";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let stored = |key: &str| -> Option<Vec<u8>> {
        let resp = http(
            moto.addr,
            "GET",
            &format!("/{bucket}/{key}"),
            &[S3_AUTH],
            b"",
        );
        (resp.status == 200).then_some(resp.body)
    };
    for scope in ["path", "host+path"] {
        let gw = GatewayProcess::start(&[
            "--upstream",
            &moto.url(),
            "--store",
            "s3",
            "--s3-domain",
            "localhost",
            "--scope",
            scope,
        ]);
        let port = gw.data_addr().port();
        let virtual_host = format!("{bucket}.localhost:{port}");
        let service = format!("localhost:{port}");
        let key = format!("ledger-{}", scope.replace('+', "-"));
        let send = |host: &str, target: &str, token: u64, body: &[u8]| -> Resp {
            let token = token.to_string();
            gw.req(
                "PUT",
                target,
                &[("Host", host), ("X-Fencing-Token", &token), S3_AUTH],
                body,
            )
        };
        // Virtual-hosted at 34, forwarded as sent: moto stores the key.
        let resp = send(&virtual_host, &format!("/{key}"), 34, b"virtual at 34");
        assert_eq!(resp.status, 200, "{scope}: {}", resp.text());
        assert_eq!(stored(&key).as_deref(), Some(&b"virtual at 34"[..]));
        // Its path-style twin at 33, with or without the port, or by the
        // gateway's address: stale.
        for host in [service.as_str(), "localhost", "LOCALHOST.", "127.0.0.1"] {
            let resp = send(host, &format!("/{bucket}/{key}"), 33, b"path-style at 33");
            assert_eq!(resp.status, 409, "{scope} {host}: {}", resp.text());
            assert!(resp.text().contains("stale_token"), "{}", resp.text());
        }
        // And the other way round: path-style at 36, virtual-hosted at 35
        // on another port.
        let resp = send(
            &service,
            &format!("/{bucket}/{key}"),
            36,
            b"path-style at 36",
        );
        assert_eq!(resp.status, 200, "{scope}: {}", resp.text());
        let other_port = format!("{bucket}.localhost:1");
        let resp = send(&other_port, &format!("/{key}"), 35, b"virtual at 35");
        assert_eq!(resp.status, 409, "{scope}: {}", resp.text());
        assert_eq!(stored(&key).as_deref(), Some(&b"path-style at 36"[..]));
        // A host the domain does not cover: which bucket moto reads is
        // not known; refused in S3's dialect, never forwarded.
        let resp = send(
            "elsewhere.example",
            &format!("/{bucket}/{key}"),
            40,
            b"elsewhere",
        );
        assert_eq!(resp.status, 400, "{scope}: {}", resp.text());
        assert!(
            resp.text().contains("<Code>invalid_path</Code>"),
            "{}",
            resp.text()
        );
        // A dotted bucket in the host: moto reads its first label (this
        // bucket), AWS the whole; refused, as the gateway cannot tell.
        let dotted = format!("{bucket}.x.localhost:{port}");
        let resp = send(&dotted, &format!("/{key}"), 33, b"dotted at 33");
        assert_eq!(resp.status, 400, "{scope}: {}", resp.text());
        assert!(
            resp.text().contains("<Code>invalid_path</Code>"),
            "{}",
            resp.text()
        );
        assert_eq!(stored(&key).as_deref(), Some(&b"path-style at 36"[..]));
        // Hosts moto reads other than as BUCKET.domain (path-style for a
        // name starting with 'localhost', a bucket in the case sent, 'www.'
        // dropped): refused, never forwarded.
        for odd in [
            format!("localhost-{bucket}.localhost:{port}"),
            format!("{}.localhost:{port}", bucket.to_uppercase()),
            format!("www.localhost:{port}"),
        ] {
            let resp = send(&odd, &format!("/{bucket}/{key}"), 33, b"odd at 33");
            assert_eq!(resp.status, 400, "{scope} {odd}: {}", resp.text());
        }
        assert_eq!(stored(&key).as_deref(), Some(&b"path-style at 36"[..]));
    }
    // Without --s3-domain, a host that could name a bucket is refused: moto
    // reads 'BUCKET.localhost' virtual-hosted, and the gateway, not told
    // the store's domain, would fence the path's key (a stale token wrote
    // another object under the fence of '/KEY'). An IP literal or a name
    // of one label is path-style at every store.
    let gw = GatewayProcess::start(&["--upstream", &moto.url(), "--store", "s3"]);
    let port = gw.data_addr().port();
    let key = "ledger-no-domain";
    let put = |host: &str, target: &str, token: u64, body: &[u8]| -> Resp {
        let token = token.to_string();
        gw.req(
            "PUT",
            target,
            &[("Host", host), ("X-Fencing-Token", &token), S3_AUTH],
            body,
        )
    };
    let target = format!("/{bucket}/{key}");
    for (host, token) in [
        (format!("127.0.0.1:{port}"), 50),
        (format!("localhost:{port}"), 51),
    ] {
        let resp = put(&host, &target, token, b"path-style");
        assert_eq!(resp.status, 200, "{host}: {}", resp.text());
    }
    let resp = put(&format!("localhost:{port}"), &target, 49, b"stale");
    assert_eq!(resp.status, 409, "{}", resp.text());
    // '/KEY' never fenced: the gateway would have admitted token 1 there.
    let resp = put(
        &format!("{bucket}.localhost:{port}"),
        &format!("/{key}"),
        1,
        b"stale",
    );
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert!(resp.text().contains("--s3-domain"), "{}", resp.text());
    assert_eq!(stored(key).as_deref(), Some(&b"path-style"[..]));
}

/// S3 deny-by-default issue, item 1, without custody: a write the
/// operation table does not list (a sub-resource, a parameter or an
/// `x-amz-*` field its row does not take) cannot be fenced for what it
/// changes: 400 `unfenceable_write` in S3's dialect, nothing forwarded.
/// Reads go on; `--allow-unfenced-writes` forwards such a write unfenced.
#[test]
fn without_custody_a_write_no_row_lists_is_refused_unforwarded() {
    use support::http;
    use support::moto::S3_AUTH;
    let moto = moto();
    let bucket = "no-row";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let gw = GatewayProcess::start(&["--upstream", &moto.url(), "--store", "s3"]);
    let object = format!("/{bucket}/ledger");
    let token = [("X-Fencing-Token", "7"), S3_AUTH];
    let resp = gw.req("PUT", &object, &token, b"row");
    assert_eq!(resp.status, 200, "PutObject: {}", resp.text());
    let mut odd_field = token.to_vec();
    odd_field.push(("x-amz-frobnicate", "1"));
    for (method, target, headers) in [
        ("PUT", format!("{object}?torrent"), &token[..]),
        ("DELETE", format!("/{bucket}?frobnicate"), &token[..]),
        ("PUT", object.clone(), &odd_field[..]),
        ("POST", format!("/{bucket}?unknown-post"), &token[..]),
    ] {
        let resp = gw.req(method, &target, headers, b"other");
        assert_eq!(resp.status, 400, "{method} {target}: {}", resp.text());
        let text = resp.text();
        assert!(text.contains("<Code>unfenceable_write</Code>"), "{text}");
    }
    let stored = http(moto.addr, "GET", &object, &[S3_AUTH], b"");
    assert_eq!(stored.body, b"row", "{}", stored.text());
    // A read no row lists goes on: it changes nothing fenced.
    let read = gw.req("GET", &format!("{object}?frobnicate"), &token, b"");
    assert_eq!(read.status, 200, "{}", read.text());
    // With --allow-unfenced-writes the gateway forwards what it cannot
    // fence, as before.
    let open = GatewayProcess::start(&[
        "--upstream",
        &moto.url(),
        "--store",
        "s3",
        "--allow-unfenced-writes",
    ]);
    let resp = open.req("PUT", &object, &odd_field, b"unfenced");
    assert_eq!(resp.status, 200, "{}", resp.text());
}
