use super::*;
use proptest::prelude::*;

const SECRET: &[u8] = b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const AMZ_DATE: &str = "20130524T000000Z";
const HOST: &str = "examplebucket.s3.amazonaws.com";
const SCOPE: &str = "20130524/us-east-1/s3/aws4_request";

fn names(list: &str) -> SignedHeaders {
    SignedHeaders::parse(list).unwrap()
}

/// A header lookup over `(name, value)` pairs; names lowercase.
fn lookup<'a>(headers: &'a [(&'a str, &'a str)]) -> impl Fn(&str, &mut Vec<&'a [u8]>) + 'a {
    move |name, out| {
        out.extend(
            headers
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.as_bytes()),
        )
    }
}

fn key() -> SigningKey {
    signing_key(SECRET, "20130524", "us-east-1", "s3")
}

/// Signs an AWS example and returns the signature in hex.
fn sign_example(
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, &str)],
    signed: &str,
    payload_hash: &str,
) -> String {
    let canonical = canonical_request(
        method,
        path,
        query,
        &|_| false,
        &lookup(headers),
        &names(signed),
        payload_hash,
    )
    .unwrap();
    hex(&signature(
        &key(),
        &string_to_sign(AMZ_DATE, SCOPE, &canonical),
    ))
}

// AWS examples: "Signature Calculations for the Authorization Header:
// Transferring Payload in a Single Chunk" (Amazon S3 API reference).

#[test]
fn aws_example_get_object() {
    let headers = [
        ("host", HOST),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY_SHA256),
        ("x-amz-date", AMZ_DATE),
    ];
    let signed = names("host;range;x-amz-content-sha256;x-amz-date");
    let canonical = canonical_request(
        "GET",
        "/test.txt",
        "",
        &|_| false,
        &lookup(&headers),
        &signed,
        EMPTY_SHA256,
    )
    .unwrap();
    assert_eq!(
        canonical,
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
         x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
         x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n\
         e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let to_sign = string_to_sign(AMZ_DATE, SCOPE, &canonical);
    assert_eq!(
        to_sign,
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
         7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
    );
    assert_eq!(
        hex(&signature(&key(), &to_sign)),
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
}

#[test]
fn aws_example_put_object() {
    let body_hash = sha256_hex(b"Welcome to Amazon S3.");
    assert_eq!(
        body_hash,
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
    );
    let headers = [
        ("date", "Fri, 24 May 2013 00:00:00 GMT"),
        ("host", HOST),
        ("x-amz-content-sha256", body_hash.as_str()),
        ("x-amz-date", AMZ_DATE),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
    ];
    let signed = "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class";
    let expected = "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd";
    // As sent (`$` encoded) and as a client might send it raw: both are
    // the canonical `/test%24file.text`.
    for path in ["/test%24file.text", "/test$file.text"] {
        assert_eq!(
            sign_example("PUT", path, "", &headers, signed, &body_hash),
            expected
        );
    }
}

#[test]
fn aws_example_get_lifecycle() {
    let headers = [
        ("host", HOST),
        ("x-amz-content-sha256", EMPTY_SHA256),
        ("x-amz-date", AMZ_DATE),
    ];
    let signed = "host;x-amz-content-sha256;x-amz-date";
    assert_eq!(
        sign_example("GET", "/", "lifecycle", &headers, signed, EMPTY_SHA256),
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
    );
}

#[test]
fn aws_example_list_objects() {
    let headers = [
        ("host", HOST),
        ("x-amz-content-sha256", EMPTY_SHA256),
        ("x-amz-date", AMZ_DATE),
    ];
    let signed = "host;x-amz-content-sha256;x-amz-date";
    let expected = "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
    // The order of the parameters as sent does not matter.
    for query in ["max-keys=2&prefix=J", "prefix=J&max-keys=2"] {
        assert_eq!(
            sign_example("GET", "/", query, &headers, signed, EMPTY_SHA256),
            expected
        );
    }
}

#[test]
fn aws_example_presigned_get() {
    let query = "X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    let presigned = parse_presigned(query).unwrap().unwrap();
    assert_eq!(presigned.credential.access_key_id(), "AKIAIOSFODNN7EXAMPLE");
    assert_eq!(presigned.credential.scope(), SCOPE);
    assert_eq!(presigned.amz_date, AMZ_DATE);
    assert_eq!(presigned.expires, 86_400);
    assert_eq!(presigned.signed_headers.as_str(), "host");
    assert_eq!(presigned.security_token, None);

    let headers = [("host", HOST)];
    let canonical = canonical_request(
        "GET",
        "/test.txt",
        query,
        &is_signature_param,
        &lookup(&headers),
        &presigned.signed_headers,
        UNSIGNED_PAYLOAD,
    )
    .unwrap();
    assert_eq!(
        canonical,
        "GET\n/test.txt\nX-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
         &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n\
         host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD"
    );
    let to_sign = string_to_sign(
        &presigned.amz_date,
        presigned.credential.scope(),
        &canonical,
    );
    let key = presigned.credential.signing_key(SECRET);
    assert!(verify_signature(&key, &to_sign, &presigned.signature));
    assert_eq!(
        hex(&signature(&key, &to_sign)),
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    );

    // Within its day; expired after it; not yet valid well before.
    let at = parse_amz_date(AMZ_DATE).unwrap();
    assert_eq!(presigned.check_time(at + 86_400), Ok(()));
    assert_eq!(presigned.check_time(at + 86_401), Err(SigV4Error::Expired));
    assert_eq!(presigned.check_time(at - MAX_CLOCK_SKEW), Ok(()));
    assert_eq!(
        presigned.check_time(at - MAX_CLOCK_SKEW - 1),
        Err(SigV4Error::NotYetValid)
    );
}

/// The seed signature of AWS's example "Signature Calculations for the
/// Authorization Header: Transferring Payload in Multiple Chunks". The
/// example's request is path-style: `PUT /examplebucket/chunkObject.txt`
/// to `Host: s3.amazonaws.com`.
#[test]
fn aws_example_streaming_seed() {
    let headers = [
        ("content-encoding", "aws-chunked"),
        ("content-length", "66824"),
        ("host", "s3.amazonaws.com"),
        ("x-amz-content-sha256", STREAMING_PAYLOAD),
        ("x-amz-date", AMZ_DATE),
        ("x-amz-decoded-content-length", "66560"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
    ];
    let signed = "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;\
                  x-amz-decoded-content-length;x-amz-storage-class";
    assert_eq!(
        sign_example(
            "PUT",
            "/examplebucket/chunkObject.txt",
            "",
            &headers,
            signed,
            STREAMING_PAYLOAD
        ),
        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    );
}

/// The seed signature of AWS's example "Signature calculations for
/// trailing headers (chunked uploads)".
#[test]
fn aws_example_streaming_trailer_seed() {
    let headers = [
        ("content-encoding", "aws-chunked"),
        ("host", "s3.amazonaws.com"),
        ("x-amz-content-sha256", STREAMING_PAYLOAD_TRAILER),
        ("x-amz-date", AMZ_DATE),
        ("x-amz-decoded-content-length", "66560"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ("x-amz-trailer", "x-amz-checksum-crc32c"),
    ];
    let signed = "content-encoding;host;x-amz-content-sha256;x-amz-date;\
                  x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer";
    assert_eq!(
        sign_example(
            "PUT",
            "/examplebucket/chunkObject.txt",
            "",
            &headers,
            signed,
            STREAMING_PAYLOAD_TRAILER
        ),
        "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
    );
}

#[test]
fn another_secret_does_not_verify() {
    let headers = [
        ("host", HOST),
        ("range", "bytes=0-9"),
        ("x-amz-content-sha256", EMPTY_SHA256),
        ("x-amz-date", AMZ_DATE),
    ];
    let signed = names("host;range;x-amz-content-sha256;x-amz-date");
    let canonical = canonical_request(
        "GET",
        "/test.txt",
        "",
        &|_| false,
        &lookup(&headers),
        &signed,
        EMPTY_SHA256,
    )
    .unwrap();
    let to_sign = string_to_sign(AMZ_DATE, SCOPE, &canonical);
    let claimed = signature(&key(), &to_sign);
    assert!(verify_signature(&key(), &to_sign, &claimed));
    let other = signing_key(
        b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ",
        "20130524",
        "us-east-1",
        "s3",
    );
    assert!(!verify_signature(&other, &to_sign, &claimed));
    // Same secret, another scope: another key.
    let elsewhere = signing_key(SECRET, "20130524", "eu-west-1", "s3");
    assert!(!verify_signature(&elsewhere, &to_sign, &claimed));
    let mut flipped = claimed;
    flipped[31] ^= 1;
    assert!(!verify_signature(&key(), &to_sign, &flipped));
    assert_eq!(format!("{:?}", key()), "SigningKey(..)");
}

const AUTH: &str =
    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
    SignedHeaders=host;range;x-amz-date, \
    Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";

#[test]
fn parses_authorization() {
    let auth = parse_authorization(AUTH.as_bytes()).unwrap();
    assert_eq!(
        auth.credential,
        Credential::new("AKIAIOSFODNN7EXAMPLE", "20130524", "us-east-1", "s3")
    );
    assert_eq!(
        auth.signed_headers.iter().collect::<Vec<_>>(),
        ["host", "range", "x-amz-date"]
    );
    assert_eq!(
        hex(&auth.signature),
        "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
    );
    // What it writes, it reads back the same.
    assert_eq!(auth.header_value(), AUTH);
    assert_eq!(
        parse_authorization(auth.header_value().as_bytes()).unwrap(),
        auth
    );

    // No spaces, other orders, tabs and surrounding white space.
    let sig = "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
    let cred = "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";
    let heads = "SignedHeaders=host;range;x-amz-date";
    for value in [
        format!("AWS4-HMAC-SHA256 {cred},{heads},{sig}"),
        format!("AWS4-HMAC-SHA256 {sig}, {cred}, {heads}"),
        format!("AWS4-HMAC-SHA256   {heads} ,\t{sig},  {cred}  "),
        format!("  AWS4-HMAC-SHA256\t{cred}, {heads}, {sig}"),
    ] {
        assert_eq!(
            parse_authorization(value.as_bytes()).unwrap(),
            auth,
            "{value}"
        );
    }
    // Uppercase hex is still the same signature.
    let upper = AUTH.replace("fe5f80f77d5fa3beca038a", "FE5F80F77D5FA3BECA038A");
    assert_eq!(parse_authorization(upper.as_bytes()).unwrap(), auth);
}

#[test]
fn refuses_malformed_authorization() {
    use SigV4Error::*;
    let sig = "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
    let cred = "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";
    let heads = "SignedHeaders=host;range;x-amz-date";
    let cases: Vec<(String, SigV4Error)> = vec![
        (String::new(), MalformedAuthorization("it is empty")),
        ("   ".into(), MalformedAuthorization("it is empty")),
        (
            "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=".into(),
            UnsupportedAlgorithm("AWS".into()),
        ),
        (
            format!("AWS4-ECDSA-P256-SHA256 {cred}, {heads}, {sig}"),
            UnsupportedAlgorithm("AWS4-ECDSA-P256-SHA256".into()),
        ),
        ("Bearer abc".into(), UnsupportedAlgorithm("Bearer".into())),
        ("aws4-hmac-sha256 x=y".into(), UnsupportedAlgorithm("aws4-hmac-sha256".into())),
        ("\"quoted\" x".into(), MalformedAuthorization("it does not start with an algorithm name")),
        ("AWS4-HMAC-SHA256".into(), MissingComponent("Credential")),
        (format!("AWS4-HMAC-SHA256 {cred}, {heads}"), MissingComponent("Signature")),
        (format!("AWS4-HMAC-SHA256 {cred}, {sig}"), MissingComponent("SignedHeaders")),
        (format!("AWS4-HMAC-SHA256 {heads}, {sig}"), MissingComponent("Credential")),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}, {sig}"),
            DuplicateComponent("Signature"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {cred}, {heads}, {sig}"),
            DuplicateComponent("Credential"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {heads}, {heads}, {sig}"),
            DuplicateComponent("SignedHeaders"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}, Extra=1"),
            UnknownComponent("Extra".into()),
        ),
        (
            format!("AWS4-HMAC-SHA256 credential=AKID/20130524/us-east-1/s3/aws4_request, {heads}, {sig}"),
            UnknownComponent("credential".into()),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig},"),
            MalformedAuthorization("a component is not of the form key=value"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred} {heads}, {sig}"),
            MalformedAuthorization(
                "a component's value has a space in it (are the components separated by commas?)",
            ),
        ),
        (format!("AWS4-HMAC-SHA256 {cred}, {heads}, Signature=abc"), MalformedSignature),
        (format!("AWS4-HMAC-SHA256 {cred}, {heads}, {sig}0"), MalformedSignature),
        (
            format!("AWS4-HMAC-SHA256 {cred}, {heads}, Signature={}", "g".repeat(64)),
            MalformedSignature,
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=, {sig}"),
            MalformedSignedHeaders("it is empty"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=range;host, {sig}"),
            MalformedSignedHeaders("the names are not sorted or are repeated"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=host;host, {sig}"),
            MalformedSignedHeaders("the names are not sorted or are repeated"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=Host;range, {sig}"),
            MalformedSignedHeaders("a name is empty, not lowercase or not a header name"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=host;;range, {sig}"),
            MalformedSignedHeaders("a name is empty, not lowercase or not a header name"),
        ),
        (
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=range;x-amz-date, {sig}"),
            MalformedSignedHeaders("host is not signed"),
        ),
        (
            format!("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3, {heads}, {sig}"),
            MalformedCredential("it does not have five parts"),
        ),
        (
            format!("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_requesT, {heads}, {sig}"),
            MalformedCredential("it does not end in aws4_request"),
        ),
        (
            format!("AWS4-HMAC-SHA256 Credential=AKID/20130532/us-east-1/s3/aws4_request, {heads}, {sig}"),
            MalformedCredential("the date is not a real YYYYMMDD"),
        ),
        (
            format!("AWS4-HMAC-SHA256 Credential=/20130524/us-east-1/s3/aws4_request, {heads}, {sig}"),
            MalformedCredential("the access key id is empty or not text"),
        ),
        (
            format!("AWS4-HMAC-SHA256 Credential=AKID/20130524//s3/aws4_request, {heads}, {sig}"),
            MalformedCredential("the region is empty or not text"),
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(
            parse_authorization(value.as_bytes()),
            Err(expected),
            "{value:?}"
        );
    }
    assert_eq!(
        parse_authorization(b"AWS4-HMAC-SHA256 \xff"),
        Err(MalformedAuthorization("it is not valid UTF-8"))
    );
    // What an error quotes of the request is bounded.
    let long = format!("X{}", "y".repeat(10_000));
    let Err(UnsupportedAlgorithm(quoted)) = parse_authorization(long.as_bytes()) else {
        panic!("expected UnsupportedAlgorithm");
    };
    assert!(quoted.len() < 80);
}

#[test]
fn credential_with_slash_in_access_key() {
    let credential = Credential::parse("tenant/user/20130524/us-east-1/s3/aws4_request").unwrap();
    assert_eq!(credential.access_key_id(), "tenant/user");
    assert_eq!(credential.scope(), SCOPE);
    assert_eq!(
        credential.to_string(),
        "tenant/user/20130524/us-east-1/s3/aws4_request"
    );
    assert_eq!(credential.check_date(AMZ_DATE), Ok(()));
    assert!(matches!(
        credential.check_date("20130525T000000Z"),
        Err(SigV4Error::CredentialDateMismatch { .. })
    ));
    assert!(credential.check_date("2013").is_err());
}

#[test]
fn presigned_parameters() {
    use SigV4Error::*;
    let full = "X-Amz-Algorithm=AWS4-HMAC-SHA256\
        &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
        &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
        &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    // Not presigned at all.
    for query in [
        "",
        "a=b",
        "versionId=3&uploads",
        "X-Amz-Security-Token=abc",
        "x-amz-date=1",
    ] {
        assert_eq!(parse_presigned(query), Ok(None), "{query}");
    }
    // One missing parameter is refused, whichever it is.
    for (drop, name) in [
        ("X-Amz-Algorithm", X_AMZ_ALGORITHM),
        ("X-Amz-Credential", X_AMZ_CREDENTIAL),
        ("X-Amz-Date", X_AMZ_DATE),
        ("X-Amz-Expires", X_AMZ_EXPIRES),
        ("X-Amz-SignedHeaders", X_AMZ_SIGNED_HEADERS),
        ("X-Amz-Signature", X_AMZ_SIGNATURE),
    ] {
        let query: Vec<&str> = full
            .split('&')
            .filter(|p| !p.starts_with(&format!("{drop}=")))
            .collect();
        assert_eq!(
            parse_presigned(&query.join("&")),
            Err(MissingQueryParameter(name)),
            "{drop}"
        );
    }
    assert_eq!(
        parse_presigned(&format!("{full}&X-Amz-Date=20130524T000000Z")),
        Err(DuplicateQueryParameter(X_AMZ_DATE))
    );
    assert_eq!(
        parse_presigned(&full.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256")),
        Err(UnsupportedAlgorithm("AWS4-ECDSA-P256-SHA256".into()))
    );
    for expires in ["604801", "-1", "", "1e3", " 5", "99999999999999999999"] {
        assert_eq!(
            parse_presigned(
                &full.replace("X-Amz-Expires=86400", &format!("X-Amz-Expires={expires}"))
            ),
            Err(MalformedExpires),
            "{expires}"
        );
    }
    let week = parse_presigned(&full.replace("X-Amz-Expires=86400", "X-Amz-Expires=604800"));
    assert_eq!(week.unwrap().unwrap().expires, 604_800);
    assert!(matches!(
        parse_presigned(
            &full.replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130525T000000Z")
        ),
        Err(CredentialDateMismatch { .. })
    ));
    assert!(matches!(
        parse_presigned(&full.replace("X-Amz-Date=20130524T000000Z", "X-Amz-Date=20130524")),
        Err(MalformedDate(_))
    ));
    assert_eq!(
        parse_presigned(&full.replace("X-Amz-Signature=aeee", "X-Amz-Signature=zeee")),
        Err(MalformedSignature)
    );
    assert_eq!(
        parse_presigned(&format!("{full}&a=%zz")),
        Ok(parse_presigned(full).unwrap()),
        "an unrelated parameter is not read"
    );
    assert_eq!(
        parse_presigned("X-Amz-Signature=%4"),
        Err(MalformedPercentEncoding)
    );
    let with_token = parse_presigned(&format!("{full}&X-Amz-Security-Token=a%2Bb%2Fc"))
        .unwrap()
        .unwrap();
    assert_eq!(with_token.security_token.as_deref(), Some("a+b/c"));
    // A name encoded needlessly is still the name.
    let encoded = full.replace("X-Amz-Expires", "X%2DAmz%2DExpires");
    assert_eq!(parse_presigned(&encoded).unwrap().unwrap().expires, 86_400);

    for name in [
        X_AMZ_ALGORITHM,
        X_AMZ_CREDENTIAL,
        X_AMZ_DATE,
        X_AMZ_EXPIRES,
        X_AMZ_SIGNED_HEADERS,
        X_AMZ_SIGNATURE,
        X_AMZ_SECURITY_TOKEN,
    ] {
        assert!(is_presign_param(name));
    }
    assert!(!is_presign_param("x-amz-signature"));
    assert!(!is_presign_param("versionId"));
    assert!(is_signature_param("X-Amz-Signature"));
    assert!(!is_signature_param("X-Amz-Credential"));
}

#[test]
fn canonical_paths() {
    let cases = [
        ("", "/"),
        ("/", "/"),
        ("/test.txt", "/test.txt"),
        ("/test%24file.text", "/test%24file.text"),
        ("/test$file.text", "/test%24file.text"),
        ("/%7e%7E~", "/~~~"),
        ("/a b", "/a%20b"),
        ("/a%20b+c", "/a%20b%2Bc"),
        ("/a%2Fb", "/a/b"),
        ("/a//b/../c/./d", "/a//b/../c/./d"),
        ("/é", "/%C3%A9"),
        ("/%c3%a9", "/%C3%A9"),
        ("/%00%ff", "/%00%FF"),
        ("/a?b#c", "/a%3Fb%23c"),
    ];
    for (path, expected) in cases {
        assert_eq!(canonical_path(path).unwrap(), expected, "{path}");
    }
    for bad in ["/%", "/%4", "/%zz", "/%4g", "/a%"] {
        assert_eq!(
            canonical_path(bad),
            Err(SigV4Error::MalformedPercentEncoding),
            "{bad}"
        );
    }
}

#[test]
fn canonical_queries() {
    let none = |_: &str| false;
    let cases = [
        ("", ""),
        ("lifecycle", "lifecycle="),
        ("b=2&a=1&a=0", "a=0&a=1&b=2"),
        ("a-b=2&a=1", "a=1&a-b=2"),
        ("a+b=c+d", "a%20b=c%20d"),
        ("x=%2b&y=%2B", "x=%2B&y=%2B"),
        ("prefix=a/b&delimiter=/", "delimiter=%2F&prefix=a%2Fb"),
        ("a=1&&b=&", "a=1&b="),
        ("=v", "=v"),
        ("k=a=b", "k=a%3Db"),
        ("k=%7e~", "k=~~"),
        ("k=é", "k=%C3%A9"),
        ("Z=1&a=1", "Z=1&a=1"),
        ("uploads&partNumber=1", "partNumber=1&uploads="),
    ];
    for (query, expected) in cases {
        assert_eq!(canonical_query(query, &none).unwrap(), expected, "{query}");
    }
    assert_eq!(
        canonical_query("a=1&X-Amz-Signature=abc&b=2", &is_signature_param).unwrap(),
        "a=1&b=2"
    );
    assert_eq!(
        canonical_query("a=1&X-Amz-Date=x&X%2DAmz-Signature=abc", &is_presign_param).unwrap(),
        "a=1"
    );
    assert_eq!(
        canonical_query("a=%", &none),
        Err(SigV4Error::MalformedPercentEncoding)
    );
}

#[test]
fn canonical_header_values() {
    let headers = [
        ("host", "h"),
        ("x-amz-meta-a", "  one   two\t\tthree  "),
        ("x-amz-meta-b", "first"),
        ("x-amz-meta-b", " second "),
        ("x-amz-meta-c", ""),
    ];
    let signed = names("host;x-amz-meta-a;x-amz-meta-b;x-amz-meta-c");
    let canonical = canonical_request(
        "PUT",
        "/k",
        "",
        &|_| false,
        &lookup(&headers),
        &signed,
        "UNSIGNED-PAYLOAD",
    )
    .unwrap();
    assert_eq!(
        canonical,
        "PUT\n/k\n\nhost:h\nx-amz-meta-a:one two three\nx-amz-meta-b:first,second\nx-amz-meta-c:\n\n\
         host;x-amz-meta-a;x-amz-meta-b;x-amz-meta-c\nUNSIGNED-PAYLOAD"
    );

    let missing = names("host;range");
    assert_eq!(
        canonical_request(
            "GET",
            "/",
            "",
            &|_| false,
            &lookup(&headers),
            &missing,
            EMPTY_SHA256
        ),
        Err(SigV4Error::MissingSignedHeader("range".into()))
    );
    for bad in ["a\nb", "a\rb", "a\0b", "a\x7fb"] {
        let headers = [("host", bad)];
        assert_eq!(
            canonical_request(
                "GET",
                "/",
                "",
                &|_| false,
                &lookup(&headers),
                &names("host"),
                EMPTY_SHA256
            ),
            Err(SigV4Error::InvalidHeaderValue("host".into())),
            "{bad:?}"
        );
    }
    assert_eq!(
        canonical_request(
            "GET",
            "/",
            "",
            &|_| false,
            &|_, out| out.push(b"\xff"),
            &names("host"),
            EMPTY_SHA256
        ),
        Err(SigV4Error::InvalidHeaderValue("host".into()))
    );
    // A list with a name that is not lowercase cannot be made at all.
    assert!(matches!(
        SignedHeaders::parse("Host"),
        Err(SigV4Error::MalformedSignedHeaders(_))
    ));
    assert!(matches!(
        SignedHeaders::from_names(["host", "X-Amz-Date"]),
        Err(SigV4Error::MalformedSignedHeaders(_))
    ));
}

#[test]
fn folding_eight_bytes_at_a_time_is_ascii_lowercase_exactly() {
    // Every byte against every byte, at each place of a word and of
    // the tail: equal exactly when `to_ascii_lowercase` says so.
    for at in [0, 7, 8, 12] {
        for listed in 0..=255u8 {
            for sent in 0..=255u8 {
                let mut l = *b"x-amz-content-s";
                let mut n = *b"X-Amz-Content-S";
                if !(listed as char).is_ascii_uppercase() {
                    l[at] = listed;
                }
                n[at] = sent;
                let expected = l.to_vec() == n.to_ascii_lowercase();
                assert_eq!(eq_folded(&l, &n), expected, "{listed} {sent} at {at}");
            }
        }
    }
    assert!(!eq_folded(b"host", b"hos"));
}

#[test]
fn a_name_is_found_in_any_case_in_short_and_long_lists() {
    // 1 to 40 names: the first 24 are indexed, a longer list is scanned.
    for count in 1..=40 {
        let mut made: Vec<String> = (0..count).map(|i| format!("x-n{i:02}")).collect();
        made.push("host".to_owned());
        let signed = SignedHeaders::from_names(made.iter().map(String::as_str)).unwrap();
        for (i, name) in signed.iter().enumerate() {
            assert_eq!(signed.position_ignore_case(name.as_bytes()), Some(i));
            let upper = name.to_ascii_uppercase();
            assert_eq!(signed.position_ignore_case(upper.as_bytes()), Some(i));
        }
        for absent in ["", "x-n", "x-n0", "x-n000", "hos", "hostx", "x-n40;"] {
            assert_eq!(
                signed.position_ignore_case(absent.as_bytes()),
                None,
                "{absent}"
            );
        }
    }
}

#[test]
fn fields_filed_by_name_give_the_same_canonical_request_as_lookups() {
    let signed = names("host;x-amz-date;x-amz-meta-a");
    let lines: [(&str, &[u8]); 5] = [
        ("X-Amz-Meta-A", b" one  two "),
        ("Host", b"b.example"),
        ("x-amz-meta-a", b"three"),
        ("X-Amz-Date", b"20130524T000000Z"),
        ("Other", b"not signed"),
    ];
    let filed: Vec<(usize, &[u8])> = lines
        .iter()
        .filter_map(|(name, value)| {
            signed
                .position_ignore_case(name.as_bytes())
                .map(|at| (at, *value))
        })
        .collect();
    let by_lookup = canonical_request(
        "PUT",
        "/k",
        "a=1",
        &|_| false,
        &|name, out| {
            out.extend(
                lines
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| *v),
            )
        },
        &signed,
        EMPTY_SHA256,
    )
    .unwrap();
    let by_position = canonical_request_of(
        "PUT",
        "/k",
        "a=1",
        &|_| false,
        &filed,
        &signed,
        EMPTY_SHA256,
    )
    .unwrap();
    assert_eq!(by_position, by_lookup);
    assert!(by_position.contains("\nx-amz-meta-a:one two,three\n"));
    // A signed name with no line is refused, as by lookups.
    assert_eq!(
        canonical_request_of(
            "PUT",
            "/k",
            "",
            &|_| false,
            &filed[..1],
            &signed,
            EMPTY_SHA256
        ),
        Err(SigV4Error::MissingSignedHeader("host".into()))
    );
}

#[test]
fn hex32_is_push_hex_for_every_byte() {
    for block in 0..8u8 {
        let bytes: [u8; 32] = std::array::from_fn(|i| block * 32 + i as u8);
        assert_eq!(&hex32(&bytes)[..], hex(&bytes).as_bytes());
    }
}

#[test]
fn a_string_to_sign_of_filed_fields_is_that_of_the_canonical_request() {
    let signed = names("host;x-amz-date");
    let fields = [(1, &b"20130524T000000Z"[..]), (0, &b"b.example"[..])];
    let canonical = canonical_request_of(
        "GET",
        "/k",
        "a=1",
        &|_| false,
        &fields,
        &signed,
        EMPTY_SHA256,
    )
    .unwrap();
    let parts = CanonicalParts {
        method: "GET",
        path: "/k",
        query: "a=1",
        skip_query: &|_| false,
        signed_headers: &signed,
        payload_hash: EMPTY_SHA256,
    };
    // A scope of the usual length (on the stack) and a long one (not).
    let long_scope = format!("20130524/{}/s3/aws4_request", "r".repeat(200));
    for scope in [SCOPE, long_scope.as_str()] {
        let to_sign = parts.string_to_sign_of(&fields, AMZ_DATE, scope).unwrap();
        assert_eq!(
            to_sign.as_bytes(),
            string_to_sign(AMZ_DATE, scope, &canonical).as_bytes()
        );
    }
    // A missing signed field is refused, as in the canonical request.
    assert_eq!(
        parts.string_to_sign_of(&fields[..1], AMZ_DATE, SCOPE).err(),
        Some(SigV4Error::MissingSignedHeader("host".into()))
    );
    // The thread's buffer is used again: a second string is the same.
    let again = parts.string_to_sign_of(&fields, AMZ_DATE, SCOPE).unwrap();
    assert_eq!(
        again.as_bytes(),
        string_to_sign(AMZ_DATE, SCOPE, &canonical).as_bytes()
    );
}

#[test]
fn the_string_to_sign_is_the_same_in_the_canonical_requests_buffer() {
    let canonical = "GET\n/\n\nhost:h\n\nhost\n".to_owned() + EMPTY_SHA256;
    assert_eq!(
        into_string_to_sign(AMZ_DATE, SCOPE, canonical.clone()),
        string_to_sign(AMZ_DATE, SCOPE, &canonical)
    );
}

#[test]
fn amz_headers_must_be_signed() {
    let signed = names("host;x-amz-content-sha256;x-amz-date");
    assert_eq!(
        check_amz_headers_signed(
            ["Host", "X-Amz-Date", "x-amz-content-sha256", "range"],
            &signed
        ),
        Ok(())
    );
    assert_eq!(
        check_amz_headers_signed(["host", "X-Amz-Copy-Source"], &signed),
        Err(SigV4Error::UnsignedHeader("X-Amz-Copy-Source".into()))
    );
}

#[test]
fn amz_dates() {
    assert_eq!(parse_amz_date("19700101T000000Z"), Ok(0));
    assert_eq!(parse_amz_date(AMZ_DATE), Ok(1_369_353_600));
    assert_eq!(parse_amz_date("20000229T235959Z"), Ok(951_868_799));
    assert_eq!(parse_amz_date("20380119T031408Z"), Ok(2_147_483_648));
    assert_eq!(format_amz_date(1_369_353_600), AMZ_DATE);
    assert_eq!(format_amz_date(0), "19700101T000000Z");
    assert_eq!(format_amz_date(951_868_799), "20000229T235959Z");
    for bad in [
        "",
        "20130524",
        "20130524T000000",
        "20130524T000000z",
        "20130524t000000Z",
        "2013-05-24T00:00:00Z",
        "20130524T240000Z",
        "20130524T006000Z",
        "20130524T000060Z",
        "20130229T000000Z",
        "19000229T000000Z",
        "20131301T000000Z",
        "20130001T000000Z",
        "20130500T000000Z",
        "19691231T235959Z",
        "2013052AT000000Z",
        "+0130524T000000Z",
        "20130524T00000+Z",
        "２0130524T000000Z",
    ] {
        assert!(
            matches!(parse_amz_date(bad), Err(SigV4Error::MalformedDate(_))),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse_amz_date("20240229T120000Z")
            .map(format_amz_date)
            .as_deref(),
        Ok("20240229T120000Z")
    );

    let at = parse_amz_date(AMZ_DATE).unwrap();
    assert_eq!(check_skew(AMZ_DATE, at + MAX_CLOCK_SKEW), Ok(()));
    assert_eq!(check_skew(AMZ_DATE, at - MAX_CLOCK_SKEW), Ok(()));
    assert_eq!(
        check_skew(AMZ_DATE, at + MAX_CLOCK_SKEW + 1),
        Err(SigV4Error::RequestTimeTooSkewed)
    );
    assert_eq!(
        check_skew(AMZ_DATE, at - MAX_CLOCK_SKEW - 1),
        Err(SigV4Error::RequestTimeTooSkewed)
    );
}

#[test]
fn hex_helpers() {
    assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
    assert_eq!(sha256_hex(b""), EMPTY_SHA256);
    assert_eq!(hex(&sha256(b"")), EMPTY_SHA256);
    let bytes = parse_hex32(EMPTY_SHA256.as_bytes()).unwrap();
    assert_eq!(hex(&bytes), EMPTY_SHA256);
    assert_eq!(parse_hex32(&EMPTY_SHA256.as_bytes()[1..]), None);
    assert_eq!(
        parse_hex32(EMPTY_SHA256.to_ascii_uppercase().as_bytes()),
        Some(bytes)
    );
    // Any byte that is not a hex digit, at any place, is refused.
    for at in [0, 1, 31, 62, 63] {
        for bad in [b'g', b'G', b' ', b'/', b':', b'@', b'`', 0x80, 0xff] {
            let mut text = EMPTY_SHA256.as_bytes().to_vec();
            text[at] = bad;
            assert_eq!(parse_hex32(&text), None, "{bad} at {at}");
        }
    }
}

// Property-style checks against an independent encoder (the
// percent-encoding crate) standing in for a client's signer.

const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
const UNRESERVED_AND_SLASH: &percent_encoding::AsciiSet = &UNRESERVED.remove(b'/');

/// How a client might put one byte of a path or query on the wire:
/// `style` 0 raw where the byte may go raw, 1 `%xx`, 2 `%XX`. In a
/// query a space may also go as `+` (style 0).
fn client_encode(bytes: &[u8], styles: &[u8], in_query: bool) -> String {
    let mut out = String::new();
    for (i, &b) in bytes.iter().enumerate() {
        let style = styles.get(i).copied().unwrap_or(0);
        let raw_ok = b.is_ascii_alphanumeric()
            || b"-_.~!$'()*,;:@".contains(&b)
            || (b == b'/')
            || (!in_query && b"&=+".contains(&b))
            || (in_query && b == b'?');
        match style {
            0 if in_query && b == b' ' => out.push('+'),
            0 if raw_ok => out.push(char::from(b)),
            1 => out.push_str(&format!("%{b:02x}")),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn reference_path(key: &[u8]) -> String {
    format!(
        "/{}",
        percent_encoding::percent_encode(key, UNRESERVED_AND_SLASH)
    )
}

fn reference_query(params: &[(Vec<u8>, Vec<u8>)]) -> String {
    let mut pairs: Vec<(String, String)> = params
        .iter()
        .map(|(n, v)| {
            (
                percent_encoding::percent_encode(n, UNRESERVED).to_string(),
                percent_encoding::percent_encode(v, UNRESERVED).to_string(),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn wire_query(params: &[(Vec<u8>, Vec<u8>)], styles: &[u8], order: &[usize]) -> String {
    order
        .iter()
        .map(|&i| {
            let (n, v) = &params[i];
            format!(
                "{}={}",
                client_encode(n, styles, true),
                client_encode(v, &styles[1..], true)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn byte_string(max: usize) -> impl Strategy<Value = Vec<u8>> {
    // Mostly the characters that matter (reserved, space, '%', '+',
    // '/', multi-byte), some of anything.
    let interesting =
        prop::sample::select(b" %+/=&?#~-_.!*'();:@,$[]aZ09\xc3\xa9\x00\xff".to_vec());
    prop::collection::vec(prop_oneof![3 => interesting, 1 => any::<u8>()], 0..max)
}

fn params() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    prop::collection::vec(
        (
            byte_string(8).prop_filter("a name", |n| !n.is_empty()),
            byte_string(12),
        ),
        0..6,
    )
}

proptest! {
    #[test]
    fn path_encodings_agree(
        key in byte_string(40),
        styles_a in prop::collection::vec(0u8..3, 40),
        styles_b in prop::collection::vec(0u8..3, 40),
    ) {
        let reference = reference_path(&key);
        let a = format!("/{}", client_encode(&key, &styles_a, false));
        let b = format!("/{}", client_encode(&key, &styles_b, false));
        prop_assert_eq!(canonical_path(&a).unwrap(), reference.clone());
        prop_assert_eq!(canonical_path(&b).unwrap(), reference.clone());
        // Canonical is a fixed point.
        prop_assert_eq!(canonical_path(&reference).unwrap(), reference);
    }

    #[test]
    fn query_encodings_agree(
        params in params(),
        styles_a in prop::collection::vec(0u8..3, 16),
        styles_b in prop::collection::vec(0u8..3, 16),
        order in Just((0..6usize).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        let in_order: Vec<usize> = (0..params.len()).collect();
        let shuffled: Vec<usize> = order.into_iter().filter(|&i| i < params.len()).collect();
        let a = wire_query(&params, &styles_a, &in_order);
        let b = wire_query(&params, &styles_b, &shuffled);
        let reference = reference_query(&params);
        prop_assert_eq!(canonical_query(&a, &|_| false).unwrap(), reference.clone());
        prop_assert_eq!(canonical_query(&b, &|_| false).unwrap(), reference.clone());
        prop_assert_eq!(canonical_query(&reference, &|_| false).unwrap(), reference);
    }

    /// A client signs the request as it sends it; the gateway, given the
    /// same request however it was encoded, verifies it; given another
    /// key or query, it does not.
    #[test]
    fn sign_then_verify(
        key_bytes in byte_string(30),
        params in params(),
        styles_a in prop::collection::vec(0u8..3, 40),
        styles_b in prop::collection::vec(0u8..3, 40),
        meta in "[ -~]{0,20}",
    ) {
        let headers = [
            ("host", HOST),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", AMZ_DATE),
            ("x-amz-meta-note", meta.as_str()),
        ];
        let signed = names("host;x-amz-content-sha256;x-amz-date;x-amz-meta-note");
        let order: Vec<usize> = (0..params.len()).collect();
        let build = |path: &str, query: &str| {
            let canonical = canonical_request(
                "PUT", path, query, &|_| false, &lookup(&headers), &signed, EMPTY_SHA256,
            ).unwrap();
            string_to_sign(AMZ_DATE, SCOPE, &canonical)
        };
        let client_path = reference_path(&key_bytes);
        let client_query = reference_query(&params);
        let claimed = signature(&key(), &build(&client_path, &client_query));

        let path_b = format!("/{}", client_encode(&key_bytes, &styles_b, false));
        let mut reversed = order.clone();
        reversed.reverse();
        let query_b = wire_query(&params, &styles_a, &reversed);
        prop_assert!(verify_signature(&key(), &build(&path_b, &query_b), &claimed));

        let other = signing_key(b"another secret", "20130524", "us-east-1", "s3");
        prop_assert!(!verify_signature(&other, &build(&path_b, &query_b), &claimed));
        let moved = format!("{client_path}x");
        prop_assert!(!verify_signature(&key(), &build(&moved, &client_query), &claimed));
        let extra = if client_query.is_empty() { "x=1".to_owned() } else { format!("{client_query}&x=1") };
        prop_assert!(!verify_signature(&key(), &build(&client_path, &extra), &claimed));
    }

    #[test]
    fn amz_date_round_trip(secs in 0u64..253_402_300_800) {
        let text = format_amz_date(secs);
        prop_assert_eq!(parse_amz_date(&text), Ok(secs));
    }

    #[test]
    fn authorization_round_trip(
        akid in "[A-Z0-9]{1,24}",
        region in "[a-z0-9-]{1,16}",
        extra in prop::collection::btree_set("x-amz-[a-z-]{1,10}", 0..4),
        sig in any::<[u8; 32]>(),
    ) {
        let signed_headers = SignedHeaders::from_names(
            std::iter::once("host").chain(extra.iter().map(String::as_str)),
        )
        .unwrap();
        let auth = Authorization {
            credential: Credential::new(&akid, "20240229", &region, "s3"),
            signed_headers,
            signature: sig,
        };
        prop_assert_eq!(parse_authorization(auth.header_value().as_bytes()), Ok(auth));
    }
}
