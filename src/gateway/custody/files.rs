//! Credential custody's two tables, read with serde from TOML: the store's
//! credentials (`upstream_credentials`) and the gateway's clients
//! (`[[identity]]`), each from a file of its own (`--upstream-credentials`,
//! `--identities`) or from the configuration file (`--config`: its
//! `[upstream_credentials]`, a route's `upstream_credentials = { ... }`, its
//! `[[identity]]` tables). Secrets come only from files or environment
//! variables named in them, never from the TOML itself, so a file that
//! names them can be shown, checked in or mounted without the secrets; each
//! is read once per load into a [`Secret`], whose `Debug` and `Display`
//! print `***`.

use std::path::{Path, PathBuf};

use serde::de::IntoDeserializer;
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::super::config::TableSource;
use super::fingerprint::Fingerprint;
use crate::client_tls::Secret;

/// A custody table that could not be loaded; the message names the file
/// and, where there is one, the line (`FILE:LINE: what`).
#[derive(Debug, thiserror::Error)]
#[error("{path}{}: {detail}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub(crate) struct FileError {
    path: String,
    line: Option<usize>,
    detail: String,
}

impl FileError {
    pub(crate) fn new(path: &Path, detail: impl Into<String>) -> Self {
        FileError {
            path: path.display().to_string(),
            line: None,
            detail: detail.into(),
        }
    }

    fn at(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }

    /// The line it is about, if one.
    pub(crate) fn line(&self) -> Option<usize> {
        self.line
    }

    /// What is wrong, without the file and line.
    pub(crate) fn detail(&self) -> &str {
        &self.detail
    }
}

/// The line (from 1) of byte `offset` of `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A TOML file, read and parsed with the place of every value.
struct Document {
    path: PathBuf,
    text: String,
}

impl Document {
    fn read(path: &Path) -> Result<Self, FileError> {
        let text = crate::client_tls::read_text_bounded(path)
            .map_err(|e| FileError::new(path, format!("cannot read: {e}")))?;
        Ok(Document {
            path: path.to_owned(),
            text,
        })
    }

    fn parse(&self) -> Result<Spanned<DeTable<'_>>, FileError> {
        DeTable::parse(&self.text).map_err(|e| self.toml_error(&e))
    }

    fn error(&self, span: std::ops::Range<usize>, detail: impl Into<String>) -> FileError {
        FileError::new(&self.path, detail).at(Some(line_of(&self.text, span.start)))
    }

    fn toml_error(&self, error: &toml::de::Error) -> FileError {
        let line = error.span().map(|span| line_of(&self.text, span.start));
        FileError::new(&self.path, error.message().trim_end().to_owned()).at(line)
    }

    /// `value` read as a `T`; an error names its line.
    fn deserialize<'a, T: Deserialize<'a>>(
        &self,
        value: &Spanned<DeValue<'a>>,
    ) -> Result<T, FileError> {
        T::deserialize(value.clone().into_deserializer()).map_err(|e| {
            let mut error = self.toml_error(&e);
            if error.line.is_none() {
                error.line = Some(line_of(&self.text, value.span().start));
            }
            error
        })
    }
}

/// The table holding what `source` names: the file's root, or in the
/// configuration file its root or the route named.
fn container<'d, 'i>(
    doc: &Document,
    root: &'d Spanned<DeTable<'i>>,
    source: &TableSource,
) -> Result<&'d DeTable<'i>, FileError> {
    let TableSource::Config {
        route: Some(name), ..
    } = source
    else {
        return Ok(root.get_ref());
    };
    let routes = root
        .get_ref()
        .get("route")
        .and_then(|routes| routes.get_ref().as_array());
    routes
        .into_iter()
        .flatten()
        .find_map(|route| {
            let table = route.get_ref().as_table()?;
            (table.get("name").and_then(|n| n.get_ref().as_str()) == Some(name)).then_some(table)
        })
        .ok_or_else(|| FileError::new(&doc.path, format!("no [[route]] named {name:?}")))
}

/// Where a secret is: a file (its content, line end removed) or an
/// environment variable.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretSource {
    file: Option<PathBuf>,
    env: Option<String>,
}

/// The store's credentials, as the gateway signs with them.
#[derive(Debug, Clone)]
pub(crate) enum UpstreamCredentials {
    /// SigV4 (S3 and S3-compatible stores).
    AwsSigV4 {
        access_key_id: String,
        secret_access_key: Secret,
        region: String,
        service: String,
        session_token: Option<Secret>,
    },
    /// HTTP Basic.
    Basic { user: String, password: Secret },
    /// A bearer token.
    Bearer { token: Secret },
    /// Azure Blob's Shared Key: the store's account and its key.
    AzureSharedKey {
        account: String,
        key: crate::dialect::shared_key::AccountKey,
    },
}

impl UpstreamCredentials {
    /// What they hold, secrets included, as one digest: a reload compares
    /// it with the files' new content. An Azure key, which the gateway
    /// keeps only as an HMAC key, is represented by its signature of a
    /// fixed text.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        let mut print = Fingerprint::new();
        match self {
            UpstreamCredentials::AwsSigV4 {
                access_key_id,
                secret_access_key,
                region,
                service,
                session_token,
            } => print
                .field("aws-sigv4")
                .field(access_key_id)
                .field(secret_access_key.expose())
                .field(region)
                .field(service)
                .optional(session_token.as_ref().map(Secret::expose)),
            UpstreamCredentials::Basic { user, password } => {
                print.field("basic").field(user).field(password.expose())
            }
            UpstreamCredentials::Bearer { token } => print.field("bearer").field(token.expose()),
            UpstreamCredentials::AzureSharedKey { account, key } => print
                .field("azure-shared-key")
                .field(account)
                .field(key.sign("fencegate: the fingerprint of an account key")),
        };
        print.finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamFile {
    kind: String,
    access_key_id: Option<String>,
    secret_access_key_file: Option<PathBuf>,
    secret_access_key_env: Option<String>,
    region: Option<String>,
    service: Option<String>,
    session_token_file: Option<PathBuf>,
    session_token_env: Option<String>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    account: Option<String>,
    key_file: Option<PathBuf>,
    key_env: Option<String>,
}

/// Reads the store's credentials from `source`: a file of its own, or
/// the configuration file's `upstream_credentials` table (the route's, for
/// a route).
pub(crate) fn read_upstream(source: &TableSource) -> Result<UpstreamCredentials, FileError> {
    let doc = Document::read(source.path())?;
    let root = doc.parse()?;
    let value = match source {
        TableSource::File(_) => Spanned::new(root.span(), DeValue::Table(root.get_ref().clone())),
        TableSource::Config { .. } => container(&doc, &root, source)?
            .get("upstream_credentials")
            .cloned()
            .ok_or_else(|| FileError::new(&doc.path, "no upstream_credentials table"))?,
    };
    let line = Some(line_of(&doc.text, value.span().start));
    let file: UpstreamFile = doc.deserialize(&value)?;
    upstream_from(&doc.path, file).map_err(|e| if e.line.is_none() { e.at(line) } else { e })
}

fn upstream_from(path: &Path, file: UpstreamFile) -> Result<UpstreamCredentials, FileError> {
    let secret = |what: &str, file: Option<PathBuf>, env: Option<String>| {
        read_secret(path, what, &SecretSource { file, env })
    };
    let need = |what: &str, value: Option<String>| {
        value.ok_or_else(|| FileError::new(path, format!("kind = {:?} needs {what}", file.kind)))
    };
    match file.kind.as_str() {
        "aws-sigv4" => Ok(UpstreamCredentials::AwsSigV4 {
            access_key_id: need("access_key_id", file.access_key_id.clone())?,
            secret_access_key: secret(
                "secret_access_key",
                file.secret_access_key_file,
                file.secret_access_key_env,
            )?,
            region: need("region", file.region.clone())?,
            service: file.service.clone().unwrap_or_else(|| "s3".to_owned()),
            session_token: if file.session_token_file.is_some() || file.session_token_env.is_some()
            {
                Some(secret(
                    "session_token",
                    file.session_token_file,
                    file.session_token_env,
                )?)
            } else {
                None
            },
        }),
        "basic" => Ok(UpstreamCredentials::Basic {
            user: need("user", file.user.clone())?,
            password: secret("password", file.password_file, file.password_env)?,
        }),
        "bearer" => Ok(UpstreamCredentials::Bearer {
            token: secret("token", file.token_file, file.token_env)?,
        }),
        "azure-shared-key" => {
            let account = need("account", file.account.clone())?;
            if !crate::dialect::shared_key::is_account_name(&account) {
                return Err(FileError::new(
                    path,
                    format!("account {account:?}: an Azure account name is 3 to 24 lowercase letters and digits"),
                ));
            }
            let key = secret("key", file.key_file, file.key_env)?;
            let key = crate::dialect::shared_key::AccountKey::from_base64(key.expose())
                .map_err(|_| FileError::new(path, "the account key is not base64"))?;
            Ok(UpstreamCredentials::AzureSharedKey { account, key })
        }
        other => Err(FileError::new(
            path,
            format!(
                "unknown kind {other:?}; expected aws-sigv4, azure-shared-key, basic or bearer"
            ),
        )),
    }
}

/// How much an identity may do to the objects under a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Access {
    /// Read objects and list them.
    Read,
    /// Read, write and delete objects.
    Write,
    /// Write, and the bucket-level writes that change who may read or what
    /// the store does by itself (ACLs, policies, lifecycle...).
    Admin,
}

impl Access {
    /// What the access lets an identity do, for messages.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Admin => "administer",
        }
    }
}

/// One entry of an identity's `allow` list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Allow {
    /// Every object whose path starts with it (`/billing/`).
    pub(crate) prefix: String,
    pub(crate) access: Access,
}

/// One of the gateway's clients.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// In the access log, fence-raise lines and metrics.
    pub(crate) name: String,
    /// s3: the access key id it signs with; webdav/http: the Basic user
    /// name; `None`: a bearer token (or the keyless `anonymous`).
    pub(crate) access_key_id: Option<String>,
    /// Its secret key, password or bearer token; `None` only for the
    /// keyless `anonymous`.
    pub(crate) secret: Option<Secret>,
    pub(crate) allow: Vec<Allow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityEntry {
    name: String,
    access_key_id: Option<String>,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    #[serde(default)]
    allow: Vec<Allow>,
}

/// Reads the gateway's clients from `source`: the `[[identity]]` tables
/// of a file of their own or of the configuration file. Every identity has
/// a unique name and key id, a secret (but the keyless `anonymous`), and
/// prefixes that start with `/`.
pub(crate) fn read_identities(source: &TableSource) -> Result<Vec<Identity>, FileError> {
    let (identities, mut problems) = identities_and_problems(source);
    match problems.is_empty() {
        true => Ok(identities),
        false => Err(problems.remove(0)),
    }
}

/// Every identity of `source` that loads, and what is wrong with each
/// that does not (`check-config` shows them all at once).
pub(crate) fn identities_and_problems(source: &TableSource) -> (Vec<Identity>, Vec<FileError>) {
    let doc = match Document::read(source.path()) {
        Ok(doc) => doc,
        Err(error) => return (Vec::new(), vec![error]),
    };
    let root = match doc.parse() {
        Ok(root) => root,
        Err(error) => return (Vec::new(), vec![error]),
    };
    let table = match container(&doc, &root, source) {
        Ok(table) => table,
        Err(error) => return (Vec::new(), vec![error]),
    };
    let mut problems = Vec::new();
    if let TableSource::File(_) = source {
        for (key, _) in table.iter().filter(|(key, _)| key.get_ref() != "identity") {
            problems.push(doc.error(
                key.span(),
                format!(
                    "unknown key {:?}: an identities file holds [[identity]] tables",
                    key.get_ref()
                ),
            ));
        }
    }
    let entries = match table.get("identity") {
        None => Vec::new(),
        Some(value) => match value.get_ref().as_array() {
            Some(entries) => entries.iter().cloned().collect(),
            None => {
                problems.push(doc.error(value.span(), "identity must be [[identity]] tables"));
                Vec::new()
            }
        },
    };
    let path = doc.path.as_path();
    let mut identities: Vec<Identity> = Vec::with_capacity(entries.len());
    for value in entries {
        let line = Some(line_of(&doc.text, value.span().start));
        let read = doc
            .deserialize::<IdentityEntry>(&value)
            .and_then(|entry| identity_from(path, entry, &identities).map_err(|e| e.at(line)));
        match read {
            Ok(identity) => identities.push(identity),
            Err(error) => problems.push(error),
        }
    }
    (identities, problems)
}

fn identity_from(
    path: &Path,
    entry: IdentityEntry,
    identities: &[Identity],
) -> Result<Identity, FileError> {
    let keyless = entry.secret_file.is_none() && entry.secret_env.is_none();
    if entry.name.is_empty()
        || entry.name.len() > 64
        || !entry.name.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(FileError::new(
            path,
            format!(
                "identity name {:?}: 1 to 64 visible ASCII characters",
                entry.name
            ),
        ));
    }
    if identities.iter().any(|known| known.name == entry.name) {
        return Err(FileError::new(
            path,
            format!("identity {:?} twice", entry.name),
        ));
    }
    if let Some(id) = &entry.access_key_id {
        if identities
            .iter()
            .any(|known| known.access_key_id.as_ref() == Some(id))
        {
            return Err(FileError::new(
                path,
                format!(
                    "access_key_id {id:?} of identity {:?} is another identity's",
                    entry.name
                ),
            ));
        }
    }
    if keyless && !(entry.name == "anonymous" && entry.access_key_id.is_none()) {
        return Err(FileError::new(
            path,
            format!(
                "identity {:?} has no secret_file or secret_env (only an identity named \"anonymous\" without a key may have none)",
                entry.name
            ),
        ));
    }
    for allow in &entry.allow {
        if !allow.prefix.starts_with('/') {
            return Err(FileError::new(
                path,
                format!(
                    "identity {:?}: prefix {:?} must start with /",
                    entry.name, allow.prefix
                ),
            ));
        }
    }
    let secret = if keyless {
        None
    } else {
        Some(read_secret(
            path,
            &format!("the secret of identity {:?}", entry.name),
            &SecretSource {
                file: entry.secret_file,
                env: entry.secret_env,
            },
        )?)
    };
    Ok(Identity {
        name: entry.name,
        access_key_id: entry.access_key_id,
        secret,
        allow: entry.allow,
    })
}

/// The secret `what` from a file (relative to `config`'s folder) or an
/// environment variable: exactly one of the two. A control character in it
/// is refused: HMAC pads a short key with NULs, so two secrets that differ
/// by trailing NULs would sign alike.
fn read_secret(config: &Path, what: &str, source: &SecretSource) -> Result<Secret, FileError> {
    let secret = read_secret_text(config, what, source)?;
    if secret.expose().bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(FileError::new(
            config,
            format!("{what} holds a control character"),
        ));
    }
    Ok(secret)
}

fn read_secret_text(config: &Path, what: &str, source: &SecretSource) -> Result<Secret, FileError> {
    match (&source.file, &source.env) {
        (Some(file), None) => {
            let file = match config.parent() {
                Some(dir) if file.is_relative() => dir.join(file),
                _ => file.clone(),
            };
            Secret::from_file(&file).map_err(|e| FileError::new(config, format!("{what}: {e}")))
        }
        (None, Some(var)) => match std::env::var(var) {
            Ok(value) if !value.is_empty() => Ok(Secret::new(value)),
            _ => Err(FileError::new(
                config,
                format!("{what}: the environment variable {var} is not set or empty"),
            )),
        },
        (Some(_), Some(_)) => Err(FileError::new(
            config,
            format!("{what}: a file or an environment variable, not both"),
        )),
        (None, None) => Err(FileError::new(config, format!("{what} is missing"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn identities_load_with_their_secrets_and_refuse_what_is_unclear() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "billing.secret", "s3cret\n");
        write(dir.path(), "nul.secret", "s3cret\0\n");
        let path = write(
            dir.path(),
            "ids.toml",
            r#"
[[identity]]
name = "billing-worker"
access_key_id = "FGBILLING01"
secret_file = "billing.secret"
allow = [ { prefix = "/billing/", access = "write" }, { prefix = "/shared/", access = "read" } ]

[[identity]]
name = "anonymous"
allow = [ { prefix = "/public/", access = "read" } ]
"#,
        );
        let ids = read_identities(&TableSource::File(path.clone())).unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0].secret.as_ref().unwrap().expose(), "s3cret");
        assert_eq!(format!("{:?}", ids[0]).matches("s3cret").count(), 0);
        assert_eq!(ids[0].allow[1].access, Access::Read);
        assert!(ids[1].secret.is_none());

        for (text, needle) in [
            ("[[identity]]\nname = \"x\"\n", "no secret_file"),
            ("[[identity]]\nname = \"x\"\nsecret_file = \"missing\"\n", "cannot read"),
            ("[[identity]]\nname = \"x\"\nsecret_env = \"FENCEGATE_TEST_UNSET_VAR\"\n", "not set"),
            (
                "[[identity]]\nname = \"x\"\nsecret_file = \"billing.secret\"\nallow = [{prefix = \"billing/\", access = \"write\"}]\n",
                "must start with /",
            ),
            (
                "[[identity]]\nname = \"x\"\nsecret_file = \"billing.secret\"\nallow = [{prefix = \"/b/\", access = \"owner\"}]\n",
                "bad.toml:4:",
            ),
            ("[[identity]]\nname = \"x\"\nsecret = \"inline\"\n", "unknown field"),
            (
                "[[identity]]\nname = \"x\"\nsecret_file = \"nul.secret\"\n",
                "control character",
            ),
        ] {
            let path = write(dir.path(), "bad.toml", text);
            let error = read_identities(&TableSource::File(path.clone())).unwrap_err().to_string();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
    }

    #[test]
    fn upstream_credentials_of_each_kind() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "key", "wJalr\n");
        let path = write(
            dir.path(),
            "up.toml",
            "kind = \"aws-sigv4\"\naccess_key_id = \"AKIA\"\nsecret_access_key_file = \"key\"\nregion = \"eu-west-1\"\n",
        );
        match read_upstream(&TableSource::File(path.clone())).unwrap() {
            UpstreamCredentials::AwsSigV4 {
                secret_access_key,
                region,
                service,
                ..
            } => {
                assert_eq!(secret_access_key.expose(), "wJalr");
                assert_eq!((region.as_str(), service.as_str()), ("eu-west-1", "s3"));
            }
            other => panic!("{other:?}"),
        }
        let path = write(
            dir.path(),
            "basic.toml",
            "kind = \"basic\"\nuser = \"fencegate\"\npassword_file = \"key\"\n",
        );
        assert!(matches!(
            read_upstream(&TableSource::File(path.clone())).unwrap(),
            UpstreamCredentials::Basic { .. }
        ));
        let path = write(dir.path(), "bad.toml", "kind = \"aws-sigv4\"\n");
        assert!(read_upstream(&TableSource::File(path.clone()))
            .unwrap_err()
            .to_string()
            .contains("needs access_key_id"));
    }
}
