use super::*;
use crate::client_tls::Secret;
use crate::gateway::custody::files::Allow;

fn basic(password: &str) -> UpstreamCredentials {
    UpstreamCredentials::Basic {
        user: "fencegate".into(),
        password: Secret::new(password),
    }
}

fn identity(name: &str, allow: &[(&str, Access)]) -> Identity {
    Identity {
        name: name.into(),
        access_key_id: Some(name.into()),
        secret: Some(Secret::new("s")),
        allow: allow
            .iter()
            .map(|(prefix, access)| Allow {
                prefix: (*prefix).into(),
                access: *access,
            })
            .collect(),
    }
}

const STORE: &str = "opaquelocktoken:1ef369e0-3fb9-48ce-9818-4dfc268e86e3";

fn bound(root: &str) -> Bound {
    Bound {
        store: STORE.into(),
        root_hash: root_hash(root),
    }
}

#[test]
fn a_sealed_token_verifies_under_its_key_for_its_identity_only() {
    let keys = LockKeys::new(&basic("p1"));
    let token = seal(&keys.sealing_key(), STORE, "a", "/dav/team/x");
    // An opaquelocktoken URI: the store's UUID, then a path (RFC 4918
    // appendix C), short enough for litmus' 200-byte If field.
    assert!(
        token.starts_with("opaquelocktoken:1ef369e0-3fb9-48ce-9818-4dfc268e86e3/"),
        "{token}"
    );
    assert_eq!(token.len(), 85, "{token}");
    assert_eq!(keys.verify(&token, "a"), Some(bound("/dav/team/x")));
    // Another identity's, under the same key: it does not verify.
    assert_eq!(keys.verify(&token, "b"), None);
    // Another instance with the same store credentials verifies it.
    let twin = LockKeys::new(&basic("p1"));
    assert_eq!(twin.verify(&token, "a"), Some(bound("/dav/team/x")));
    // Another store password, the raw store token, a token changed
    // anywhere: none verifies.
    let other = LockKeys::new(&basic("p2"));
    assert_eq!(other.verify(&token, "a"), None);
    assert_eq!(keys.verify(STORE, "a"), None);
    let forged = seal(&other.sealing_key(), STORE, "a", "/dav/team/x");
    assert_eq!(keys.verify(&forged, "a"), None);
    let moved = seal(&keys.sealing_key(), STORE, "a", "/dav/team/y");
    let (_, moved_mac) = unseal(&moved).unwrap();
    let (original, _) = unseal(&token).unwrap();
    assert_ne!(original.root_hash, root_hash("/dav/team/y"));
    assert_ne!(moved_mac, unseal(&token).unwrap().1);
    for broken in [
        format!("{token}/more"),
        format!("{token}x"),
        token.replacen('1', "2", 1),
        token.replacen('-', "", 1),
        token.replace("opaquelocktoken:", "urn:"),
    ] {
        assert_eq!(keys.verify(&broken, "a"), None, "{broken}");
    }
    // A store token of another shape is carried whole.
    let odd = "urn:uuid:some-store/token";
    let token = seal(&keys.sealing_key(), odd, "a", "/r");
    assert!(
        token.starts_with("opaquelocktoken:00000000-0000-0000-0000-000000000000/"),
        "{token}"
    );
    let verified = keys.verify(&token, "a").unwrap();
    assert_eq!(verified.store, odd);
    assert_eq!(keys.verify(&token, "b"), None);
}

#[test]
fn after_a_rotation_the_previous_key_still_verifies_not_the_one_before() {
    let keys = LockKeys::new(&basic("p1"));
    let first = seal(&keys.sealing_key(), STORE, "a", "/r");
    keys.rotate(&basic("p2"));
    let second = seal(&keys.sealing_key(), STORE, "a", "/r");
    assert_ne!(first, second);
    assert!(keys.verify(&first, "a").is_some());
    assert!(keys.verify(&second, "a").is_some());
    keys.rotate(&basic("p3"));
    assert!(keys.verify(&first, "a").is_none());
    assert!(keys.verify(&second, "a").is_some());
}

#[test]
fn every_kind_of_credentials_gives_its_own_key() {
    let bearer = UpstreamCredentials::Bearer {
        token: Secret::new("p1"),
    };
    let s3 = UpstreamCredentials::AwsSigV4 {
        access_key_id: "AKIA".into(),
        secret_access_key: Secret::new("p1"),
        region: "us-east-1".into(),
        service: "s3".into(),
        session_token: None,
    };
    let token = seal(&LockKeys::new(&basic("p1")).sealing_key(), STORE, "a", "/r");
    assert!(LockKeys::new(&bearer).verify(&token, "a").is_none());
    assert!(LockKeys::new(&s3).verify(&token, "a").is_none());
    let token = seal(&LockKeys::new(&s3).sealing_key(), STORE, "a", "/r");
    assert!(LockKeys::new(&s3).verify(&token, "a").is_some());
}

#[test]
fn if_fields_are_read_by_their_grammar() {
    fn ok(text: &str) -> IfField<'_> {
        read_if(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }
    let read = ok("(<opaquelocktoken:a>)");
    assert_eq!(read.tokens, vec![(2, "opaquelocktoken:a")]);
    assert!(read.tags.is_empty());
    let read = ok(" (<urn:x> [\"etag\"]) (Not <DAV:no-lock>)\t([W/\"w\"])");
    assert_eq!(
        read.tokens.iter().map(|t| t.1).collect::<Vec<_>>(),
        ["urn:x", "DAV:no-lock"]
    );
    let read = ok("<http://h/dav/a> (<urn:x>) (not[\"e\"]) </dav/b> (<urn:y>)");
    assert_eq!(read.tags, ["http://h/dav/a", "/dav/b"]);
    assert_eq!(read.tokens.len(), 2);
    for bad in [
        "",
        "   ",
        "(<urn:x>",
        "()",
        "(<urn:x>) <http://h/a> (<urn:y>)",
        "<http://h/a>",
        "<http://h/a> (<urn:x>) (<urn:y>) junk",
        "(<urn:x>) junk",
        "(urn:x)",
        "([etag])",
        "([\"e])",
        "([\"e\")",
        "(<>)",
        "(<urn:x y>)",
        "(<urn:<x>)",
        "(Not)",
        "(<urn:x>)(",
        // Apache ends a list at the first `)`, inside a tag or not: a raw
        // token hidden in what would be read as a tag (red-team, class 6).
        "([\"x])(<opaquelocktoken:raw>)([\"])",
        "([\"a(b\"])",
        "([\"<urn:x>\"])",
        "([W/\"a]b\"])",
    ] {
        assert!(read_if(bad).is_err(), "{bad:?} was read");
    }
}

fn request(method: &str, path: &str, fields: &[(&str, &str)]) -> http::Request<()> {
    let mut builder = http::Request::builder().method(method).uri(path);
    for (name, value) in fields {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap()
}

/// The fields `admit` set.
type SetFields = Vec<(HeaderName, HeaderValue)>;

fn admit_one(
    keys: &LockKeys,
    who: &Identity,
    request: &http::Request<()>,
) -> Result<(Option<LockAnswer>, SetFields), LockRefusal> {
    let path = normalize_path(request.uri().path()).unwrap();
    let mut set = Vec::new();
    let answer = admit(keys, who, request, &path, |n, v| set.push((n, v)))?;
    Ok((answer, set))
}

#[test]
fn tokens_submitted_are_the_identitys_and_go_on_as_the_stores() {
    let keys = LockKeys::new(&basic("p"));
    let a = identity("a", &[("/dav/a/", Access::Write), ("/dav/", Access::Read)]);
    let b = identity("b", &[("/dav/", Access::Write)]);
    let narrowed = identity("a", &[("/dav/a/c/", Access::Write)]);
    let token = seal(&keys.sealing_key(), STORE, "a", "/dav/a/c");

    // Its own, untagged and tagged, with Not and DAV:no-lock beside.
    let field = format!("(<{token}> [\"e\"]) (Not <DAV:no-lock>)");
    let (answer, set) =
        admit_one(&keys, &a, &request("PUT", "/dav/a/f", &[("if", &field)])).unwrap();
    assert!(answer.is_none());
    assert_eq!(set.len(), 1);
    assert_eq!(
        set[0].1.to_str().unwrap(),
        format!("(<{STORE}> [\"e\"]) (Not <DAV:no-lock>)")
    );
    let field = format!("</dav/a/f> (<{token}>)");
    let (_, set) = admit_one(&keys, &a, &request("PUT", "/dav/a/f", &[("if", &field)])).unwrap();
    assert_eq!(
        set[0].1.to_str().unwrap(),
        format!("</dav/a/f> (<{STORE}>)")
    );
    // Only entity tags: nothing to rewrite.
    let (_, set) = admit_one(
        &keys,
        &a,
        &request("PUT", "/dav/a/f", &[("if", "([\"e\"])")]),
    )
    .unwrap();
    assert!(set.is_empty());

    // Another identity's, anywhere and under Not: 403.
    for field in [
        format!("(<{token}>)"),
        format!("(Not <{token}>)"),
        format!("(<DAV:no-lock>) (<{token}>)"),
        format!("</dav/a/f> (<{token}>)"),
    ] {
        let refused = admit_one(&keys, &b, &request("PUT", "/dav/a/f", &[("if", &field)]));
        assert!(
            matches!(refused, Err(LockRefusal::NotYours { .. })),
            "{field}"
        );
    }
    // The store's raw token, from the identity itself: 403.
    let refused = admit_one(
        &keys,
        &a,
        &request("PUT", "/dav/a/f", &[("if", &format!("(<{STORE}>)"))]),
    );
    assert!(matches!(refused, Err(LockRefusal::NotYours { .. })));
    // A tagged resource it may not read: 403; an If it cannot read: 400.
    let field = format!("</other/x> (<{token}>)");
    let refused = admit_one(&keys, &a, &request("PUT", "/dav/a/f", &[("if", &field)]));
    assert!(matches!(refused, Err(LockRefusal::NotYours { object, .. }) if object == "/other/x"));
    let refused = admit_one(&keys, &a, &request("PUT", "/dav/a/f", &[("if", "(<x")]));
    assert!(matches!(refused, Err(LockRefusal::Malformed(_))));

    // UNLOCK: its own token, the lock's root writable, at or above the
    // request's path.
    let coded = format!("<{token}>");
    for path in ["/dav/a/c", "/dav/a/c/", "/dav/a/c/f", "/dav/a/c/d/e"] {
        assert!(
            admit_one(
                &keys,
                &a,
                &request("UNLOCK", path, &[("lock-token", &coded)])
            )
            .is_ok(),
            "{path}"
        );
    }
    let refused = admit_one(
        &keys,
        &a,
        &request("UNLOCK", "/dav/a/other", &[("lock-token", &coded)]),
    );
    assert!(matches!(refused, Err(LockRefusal::NotYours { .. })));
    let (_, set) = admit_one(
        &keys,
        &a,
        &request("UNLOCK", "/dav/a/c/f", &[("lock-token", &coded)]),
    )
    .unwrap();
    assert_eq!(set[0].0, LOCK_TOKEN);
    assert_eq!(set[0].1.to_str().unwrap(), format!("<{STORE}>"));
    let refused = admit_one(
        &keys,
        &b,
        &request("UNLOCK", "/dav/a/c", &[("lock-token", &coded)]),
    );
    assert!(matches!(refused, Err(LockRefusal::NotYours { .. })));
    // Its own token, but its grants narrowed since: the root is no longer
    // its to unlock.
    let refused = admit_one(
        &keys,
        &narrowed,
        &request("UNLOCK", "/dav/a/c/f", &[("lock-token", &coded)]),
    );
    assert!(matches!(refused, Err(LockRefusal::NotYours { object, .. }) if object == "/dav/a/c"));
    for bad in ["", "<>", "urn:x", "<a> <b>"] {
        let refused = admit_one(
            &keys,
            &a,
            &request("UNLOCK", "/dav/a/f", &[("lock-token", bad)]),
        );
        assert!(matches!(refused, Err(LockRefusal::Malformed(_))), "{bad:?}");
    }

    // LOCK: its answer binds the request's path; a refresh knows its lock.
    let (answer, _) = admit_one(
        &keys,
        &a,
        &request("LOCK", "/dav/a/f/", &[("if", &format!("(<{token}>)"))]),
    )
    .unwrap();
    let answer = answer.unwrap();
    assert_eq!(answer.root, "/dav/a/f");
    assert_eq!(answer.identity, "a");
    assert_eq!(answer.known, vec![(STORE.to_owned(), token.clone())]);
}

#[test]
fn store_tokens_are_swapped_where_they_stand_whole() {
    let body = format!("<D:href>{STORE}</D:href> <D:href>{STORE}/longer</D:href> {STORE}\n{STORE}");
    let swapped = swap_tokens(body.as_bytes(), &[(STORE.into(), "T".into())]);
    assert_eq!(
        std::str::from_utf8(&swapped).unwrap(),
        format!("<D:href>T</D:href> <D:href>{STORE}/longer</D:href> T\nT")
    );
}

#[tokio::test]
async fn a_lock_answer_hands_out_the_gateways_token() {
    let keys = LockKeys::new(&basic("p"));
    let answer = LockAnswer {
        key: keys.sealing_key(),
        identity: "a".into(),
        root: "/dav/a/f".into(),
        known: Vec::new(),
    };
    let body = format!(
        "<?xml version=\"1.0\"?><D:prop xmlns:D=\"DAV:\"><D:lockdiscovery><D:activelock><D:locktoken><D:href>{STORE}</D:href></D:locktoken></D:activelock></D:lockdiscovery></D:prop>"
    );
    let response = Response::builder()
        .status(200)
        .header("lock-token", format!("<{STORE}>"))
        .header("content-length", body.len())
        .body(FromProxy::from(axum::body::Body::from(body)))
        .unwrap();
    let response = bind_answer(response, &answer).await.unwrap();
    let header = response.headers()["lock-token"]
        .to_str()
        .unwrap()
        .to_owned();
    let token = header.trim_start_matches('<').trim_end_matches('>');
    assert_eq!(keys.verify(token, "a"), Some(bound("/dav/a/f")));
    let length: usize = response.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(bytes.len(), length);
    let text = std::str::from_utf8(&bytes).unwrap();
    // The gateway's token starts with the store's UUID: the store's token
    // does not stand whole anywhere.
    assert!(
        text.contains(&format!(">{token}<")) && !text.contains(&format!("{STORE}<")),
        "{text}"
    );

    // A failed LOCK is relayed as it came.
    let response = Response::builder()
        .status(423)
        .body(FromProxy::from(axum::body::Body::from("locked")))
        .unwrap();
    let response = bind_answer(response, &answer).await.unwrap();
    assert_eq!(response.status(), 423);
}

proptest::proptest! {
    /// Any field value, however broken: read or refused, never a panic;
    /// what is read names tokens that stand where it says.
    #[test]
    fn any_if_field_is_read_or_refused(text in "[ \t()<>\\[\\]\"W/Nnot:a-z0-9-]{0,40}|\\PC{0,40}") {
        if let Ok(read) = read_if(&text) {
            for (start, token) in read.tokens {
                proptest::prop_assert_eq!(&text[start..start + token.len()], token);
                proptest::prop_assert_eq!(&text[start - 1..start], "<");
            }
        }
    }
}
