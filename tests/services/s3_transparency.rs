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

/// The S3 issue's class 4 without custody (issue 48, item 5): an upload
/// id belongs to the object it was created for, also when the client
/// signs its own requests and the gateway cannot rewrite the id. The
/// gateway records, where the fences live (etcd here, shared by two
/// instances), which object each id it saw created writes. A stale holder
/// that created an upload on K, once K's fence moved past its token,
/// cannot send a part, complete, abort or list it through J's path (whose
/// fence its token passes): 404 `NoSuchUpload` in S3's shape, nothing
/// forwarded, and K at moto keeps the fresh content (moto writes the key
/// the upload was created for, whatever the path). An id the gateway
/// never saw created is refused; the ordinary flow through the right path
/// goes through at either instance, and after a restart.
#[test]
fn class4_without_custody_an_upload_id_is_refused_through_another_keys_path() {
    use support::moto::S3_AUTH;
    use support::{http, EtcdCluster, Resp};
    let moto = moto();
    let bucket = "bound-uploads";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let instance = |name: &str| {
        GatewayProcess::start(&[
            "--upstream",
            &moto.url(),
            "--store",
            "s3",
            "--state",
            "etcd",
            "--etcd-endpoints",
            &endpoints,
            "--etcd-prefix",
            "/class4-uploads/",
            "--instance-name",
            name,
        ])
    };
    let mut first = instance("first");
    let second = instance("second");
    let k = format!("/{bucket}/ledger-k");
    let j = format!("/{bucket}/ledger-j");
    let element = |text: &str, name: &str| -> Option<String> {
        let (_, rest) = text.split_once(&format!("<{name}>"))?;
        let (inside, _) = rest.split_once(&format!("</{name}>"))?;
        Some(inside.to_owned())
    };
    let send =
        |gw: &GatewayProcess, method: &str, target: &str, token: Option<u64>, body: &[u8]| {
            let token = token.map(|t| t.to_string());
            let mut headers = vec![S3_AUTH];
            if let Some(token) = &token {
                headers.push(("X-Fencing-Token", token));
            }
            gw.req(method, target, &headers, body)
        };
    let create = |gw: &GatewayProcess, object: &str, token: u64| -> String {
        let created = send(gw, "POST", &format!("{object}?uploads"), Some(token), b"");
        assert_eq!(
            created.status,
            200,
            "create on {object}: {}",
            created.text()
        );
        element(&created.text(), "UploadId")
            .unwrap_or_else(|| panic!("no UploadId in {}", created.text()))
    };
    let part = |gw: &GatewayProcess, object: &str, id: &str, token: u64, body: &[u8]| {
        let target = format!("{object}?partNumber=1&uploadId={id}");
        send(gw, "PUT", &target, Some(token), body)
    };
    let complete = |gw: &GatewayProcess, object: &str, id: &str, token: u64, etag: &str| {
        let body = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        );
        send(
            gw,
            "POST",
            &format!("{object}?uploadId={id}"),
            Some(token),
            body.as_bytes(),
        )
    };
    let no_such_upload = |resp: Resp, what: &str| {
        assert_eq!(resp.status, 404, "{what}: {}", resp.text());
        assert!(
            resp.text().contains("<Code>NoSuchUpload</Code>"),
            "{what}: {}",
            resp.text()
        );
    };
    let stored = |object: &str| -> Option<Vec<u8>> {
        let resp = http(moto.addr, "GET", object, &[S3_AUTH], b"");
        (resp.status == 200).then_some(resp.body)
    };

    // The stale holder (token 5) creates an upload on K and sends its
    // part through K's own path, while its token is K's highest.
    let stale_id = create(&first, &k, 5);
    let sent = part(&first, &k, &stale_id, 5, b"stale content");
    assert_eq!(sent.status, 200, "the stale holder's part: {}", sent.text());
    let etag = sent.header("etag").unwrap_or_default().to_owned();
    // The next holder writes K at 7.
    let fresh = send(&second, "PUT", &k, Some(7), b"fresh content");
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    // Through K's path the stale holder is refused by the fence.
    let resp = complete(&first, &k, &stale_id, 5, &etag);
    assert_eq!(resp.status, 409, "{}", resp.text());
    // Through J's path (its token passes J's fence): refused at either
    // instance, whatever the operation, nothing forwarded.
    for gw in [&first, &second] {
        no_such_upload(
            part(gw, &j, &stale_id, 5, b"stale part"),
            "a part through J",
        );
        no_such_upload(
            complete(gw, &j, &stale_id, 5, &etag),
            "a completion through J",
        );
        let target = format!("{j}?uploadId={stale_id}");
        no_such_upload(
            send(gw, "DELETE", &target, Some(5), b""),
            "an abort through J",
        );
        no_such_upload(
            send(gw, "GET", &target, None, b""),
            "a parts listing through J",
        );
        let copy = format!("{j}?partNumber=1&uploadId={stale_id}");
        let copied = gw.req(
            "PUT",
            &copy,
            &[
                S3_AUTH,
                ("X-Fencing-Token", "5"),
                ("x-amz-copy-source", &k[1..]),
            ],
            b"",
        );
        no_such_upload(copied, "a part copy through J");
    }
    assert_eq!(stored(&k).as_deref(), Some(&b"fresh content"[..]));
    assert_eq!(stored(&j), None, "J was written");
    // The upload is still there at moto (nothing aborted it).
    let listed = http(
        moto.addr,
        "GET",
        &format!("/{bucket}?uploads"),
        &[S3_AUTH],
        b"",
    );
    assert!(listed.text().contains(&stale_id), "{}", listed.text());

    // An upload the gateway never saw created (begun at the store
    // directly, as one begun before the deploy): refused.
    let direct = http(moto.addr, "POST", &format!("{j}?uploads"), &[S3_AUTH], b"");
    let direct_id = element(&direct.text(), "UploadId").expect("moto's UploadId");
    no_such_upload(
        part(&first, &j, &direct_id, 9, b"unseen"),
        "an id never seen",
    );

    // The ordinary flow through the right path: created at one instance,
    // a part and the completion at the other.
    let id = create(&first, &k, 8);
    let sent = part(&second, &k, &id, 8, b"multipart at 8");
    assert_eq!(sent.status, 200, "{}", sent.text());
    let etag = sent.header("etag").unwrap_or_default().to_owned();
    let listing = send(&second, "GET", &format!("{k}?uploadId={id}"), None, b"");
    assert_eq!(listing.status, 200, "ListParts: {}", listing.text());
    let done = complete(&second, &k, &id, 8, &etag);
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(stored(&k).as_deref(), Some(&b"multipart at 8"[..]));
    // Completed: its id is bound no more.
    no_such_upload(
        part(&first, &k, &id, 8, b"again"),
        "a completed upload's id",
    );

    // Created before a restart of the instance, used after it; an abort
    // through its own path.
    let id = create(&first, &j, 3);
    first.restart();
    no_such_upload(
        part(&first, &k, &id, 9, b"through K"),
        "J's upload through K after a restart",
    );
    let sent = part(&first, &j, &id, 3, b"after the restart");
    assert_eq!(sent.status, 200, "{}", sent.text());
    let aborted = send(
        &second,
        "DELETE",
        &format!("{j}?uploadId={id}"),
        Some(3),
        b"",
    );
    assert_eq!(aborted.status, 204, "{}", aborted.text());
    assert_eq!(stored(&j), None, "J was written");

    // On disk state (the default) the binding outlives a restart too.
    let mut disk = GatewayProcess::start(&["--upstream", &moto.url(), "--store", "s3"]);
    let id = create(&disk, &k, 20);
    disk.restart();
    no_such_upload(
        part(&disk, &j, &id, 20, b"through J"),
        "K's upload through J after a restart on disk",
    );
    let sent = part(&disk, &k, &id, 20, b"on disk");
    assert_eq!(sent.status, 200, "{}", sent.text());
    let aborted = send(
        &disk,
        "DELETE",
        &format!("{k}?uploadId={id}"),
        Some(20),
        b"",
    );
    assert_eq!(aborted.status, 204, "{}", aborted.text());
    // Aborted: its id is bound no more.
    no_such_upload(part(&disk, &k, &id, 20, b"again"), "an aborted upload's id");
}

/// Issue 48, item 5, the failure side: when the binding of a new upload
/// cannot be recorded where the fences live (etcd stopped just after a
/// claim the instance still holds), the client gets 503
/// `fence_store_unavailable` in S3's shape and no upload id: the upload
/// is left at the store, orphaned, never usable through the gateway.
#[test]
fn class4_without_custody_an_upload_whose_binding_cannot_be_recorded_is_503() {
    use support::moto::S3_AUTH;
    use support::{http, EtcdCluster};
    let moto = moto();
    let bucket = "unbound-uploads";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let etcd = EtcdCluster::start(1);
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto.url(),
        "--store",
        "s3",
        "--state",
        "etcd",
        "--etcd-endpoints",
        &etcd.endpoints(),
        "--etcd-prefix",
        "/class4-unbound/",
    ]);
    let object = format!("/{bucket}/ledger");
    let headers = [S3_AUTH, ("X-Fencing-Token", "5")];
    let written = gw.req("PUT", &object, &headers, b"at 5");
    assert_eq!(written.status, 200, "{}", written.text());
    // The claim of token 5 on the key lingers at this instance: the
    // creation is admitted without etcd, and its binding finds etcd gone.
    etcd.pause(0, true);
    let created = gw.req("POST", &format!("{object}?uploads"), &headers, b"");
    etcd.pause(0, false);
    assert_eq!(created.status, 503, "{}", created.text());
    let text = created.text();
    assert!(
        text.contains("<Code>fence_store_unavailable</Code>") && !text.contains("<UploadId>"),
        "{text}"
    );
    // Which step met etcd's absence depends on time: the claim of token 5
    // lingers about 2 s at this instance, and a slow machine may take
    // longer between the two requests. Either way no upload id reached
    // the client; what the store holds tells which step it was.
    let listed = http(
        moto.addr,
        "GET",
        &format!("/{bucket}?uploads"),
        &[S3_AUTH],
        b"",
    );
    let orphaned = listed.text().contains("<Key>ledger</Key>");
    if gw
        .stderr()
        .contains("an upload's binding could not be made")
    {
        // The store made the upload; the gateway handed out no id for it.
        assert!(orphaned, "{}", listed.text());
    } else {
        // The claim itself found etcd gone: refused before the store.
        assert!(!orphaned, "{}", listed.text());
        eprintln!(
            "class4 503: the claim's linger had passed, so the creation was refused at its claim, before the store; the binding's own failure was not reached this run"
        );
    }
}

/// Issue 48, item 5, with `--allow-unfenced-writes`: what the gateway
/// cannot fence goes on, so an upload id it never saw created (begun at
/// the store directly) is forwarded through its own path; one it bound to
/// another key is still refused. Keys are compared as S3 reads them
/// (`a%20b+c` is `a b+c`).
#[test]
fn class4_without_custody_allow_unfenced_writes_passes_unbound_ids_never_ones_bound_elsewhere() {
    use support::http;
    use support::moto::S3_AUTH;
    let moto = moto();
    let bucket = "open-uploads";
    let made = http(moto.addr, "PUT", &format!("/{bucket}"), &[S3_AUTH], b"");
    assert_eq!(made.status, 200, "CreateBucket at moto: {}", made.text());
    let gw = GatewayProcess::start(&[
        "--upstream",
        &moto.url(),
        "--store",
        "s3",
        "--allow-unfenced-writes",
    ]);
    let upload_id = |text: &str| -> String {
        let (_, rest) = text.split_once("<UploadId>").expect("an UploadId");
        rest.split_once("</UploadId>")
            .expect("its end")
            .0
            .to_owned()
    };
    let k = format!("/{bucket}/a%20b+c");
    let j = format!("/{bucket}/other");
    let token = [S3_AUTH, ("X-Fencing-Token", "4")];
    // Bound through the gateway (tokens or not): refused through J.
    let created = gw.req("POST", &format!("{k}?uploads"), &[S3_AUTH], b"");
    assert_eq!(created.status, 200, "{}", created.text());
    let bound = upload_id(&created.text());
    let through_j = gw.req(
        "PUT",
        &format!("{j}?partNumber=1&uploadId={bound}"),
        &token,
        b"through J",
    );
    assert_eq!(through_j.status, 404, "{}", through_j.text());
    assert!(through_j.text().contains("<Code>NoSuchUpload</Code>"));
    // Through its own key's path, however spelled: served.
    let own = gw.req(
        "PUT",
        &format!("/{bucket}/a%20b%2Bc?partNumber=1&uploadId={bound}"),
        &token,
        b"own",
    );
    assert_eq!(own.status, 200, "{}", own.text());
    // Begun at the store directly: no binding, forwarded as before.
    let direct = http(moto.addr, "POST", &format!("{j}?uploads"), &[S3_AUTH], b"");
    let unbound = upload_id(&direct.text());
    let part = gw.req(
        "PUT",
        &format!("{j}?partNumber=1&uploadId={unbound}"),
        &token,
        b"unbound",
    );
    assert_eq!(part.status, 200, "{}", part.text());
    let aborted = gw.req("DELETE", &format!("{j}?uploadId={unbound}"), &token, b"");
    assert_eq!(aborted.status, 204, "{}", aborted.text());
}
