//! A client's side of SigV4 for the custody tests: a request signed in the
//! header form with `fencegate::dialect::sigv4` (itself checked against
//! AWS's example vectors, and against boto3 and an independent verifier
//! through the gateway): every field signed but those named unsigned, with
//! `host`, `x-amz-date` and `x-amz-content-sha256` (the body's hash unless
//! a field gives the payload form).

use fencegate::dialect::sigv4;

use super::{GatewayProcess, Resp};

/// Signs as the identity `key` (access key id, secret) at `at`.
pub struct Signer<'a> {
    pub key: (&'a str, &'a str),
    /// Seconds since the Unix epoch the request claims.
    pub at: u64,
}

impl Signer<'_> {
    /// Signing now.
    pub fn now<'a>(key: (&'a str, &'a str)) -> Signer<'a> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Signer { key, at }
    }

    /// `x-amz-date`.
    pub fn amz_date(&self) -> String {
        sigv4::format_amz_date(self.at)
    }

    /// The credential scope (us-east-1, s3).
    pub fn scope(&self) -> String {
        format!("{}/us-east-1/s3/aws4_request", &self.amz_date()[..8])
    }

    /// The identity's signing key for the scope.
    pub fn signing_key(&self) -> sigv4::SigningKey {
        sigv4::signing_key(
            self.key.1.as_bytes(),
            &self.amz_date()[..8],
            "us-east-1",
            "s3",
        )
    }

    /// The fields of a request to `host` (unless `fields` names a host),
    /// signed, `Authorization` last.
    pub fn headers(
        &self,
        host: &str,
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
        unsigned: &[&str],
        body: &[u8],
    ) -> Vec<(String, String)> {
        let amz_date = self.amz_date();
        let given = |name: &str| fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
        let payload = given("x-amz-content-sha256")
            .map_or_else(|| sigv4::sha256_hex(body), |(_, v)| v.to_string());
        let mut all: Vec<(String, String)> = Vec::new();
        if given("host").is_none() {
            all.push(("host".into(), host.to_owned()));
        }
        all.push(("x-amz-date".into(), amz_date.clone()));
        if given("x-amz-content-sha256").is_none() {
            all.push(("x-amz-content-sha256".into(), payload.clone()));
        }
        all.extend(
            fields
                .iter()
                .map(|(n, v)| (n.to_lowercase(), v.to_string())),
        );
        let mut signed: Vec<String> = all
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !unsigned.contains(&n.as_str()))
            .collect();
        signed.sort();
        signed.dedup();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let canonical = sigv4::canonical_request(
            method,
            path,
            query,
            &|_| false,
            &|name, out| {
                out.extend(
                    all.iter()
                        .filter(|(n, _)| n == name)
                        .map(|(_, v)| v.as_bytes()),
                )
            },
            &sigv4::SignedHeaders::from_names(signed.iter().map(String::as_str)).unwrap(),
            &payload,
        )
        .unwrap();
        let scope = self.scope();
        let to_sign = sigv4::string_to_sign(&amz_date, &scope, &canonical);
        let signature = sigv4::hex(&sigv4::signature(&self.signing_key(), &to_sign));
        let mut out = all;
        out.push((
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
                self.key.0,
                signed.join(";")
            ),
        ));
        out
    }

    /// Sends the request, every field signed, to the gateway.
    pub fn send(
        &self,
        gw: &GatewayProcess,
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        self.send_unsigned(gw, method, target, fields, &[], body)
    }

    /// Sends the request to the gateway with the fields named in
    /// `unsigned` left out of the signature.
    pub fn send_unsigned(
        &self,
        gw: &GatewayProcess,
        method: &str,
        target: &str,
        fields: &[(&str, &str)],
        unsigned: &[&str],
        body: &[u8],
    ) -> Resp {
        let host = gw.data_addr().to_string();
        let headers = self.headers(&host, method, target, fields, unsigned, body);
        let refs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        gw.req(method, target, &refs, body)
    }
}
