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
