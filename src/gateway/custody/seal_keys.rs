//! The keys custody seals its own handles with: WebDAV lock tokens
//! (`dav_locks.rs`) and S3 upload ids (`s3/uploads.rs`). Each is an
//! HMAC-SHA256 key derived (PBKDF2) from the store's credentials, which
//! every instance in front of the store holds: a handle sealed by one
//! instance verifies at every other, and after a restart, with no shared
//! state. Each use derives its own key (its salt), so a handle of one kind
//! never verifies as another. After a rotation of the store's credentials
//! the key before it still verifies (one is kept), so a rolling reload
//! breaks no handle already handed out.

use std::sync::{Arc, RwLock};

use ring::{hmac, pbkdf2};

use super::files::UpstreamCredentials;

/// PBKDF2's rounds: a handle and its MAC are known to every identity, so
/// the key is made slow to guess from a weak store password.
const KEY_ROUNDS: std::num::NonZeroU32 = match std::num::NonZeroU32::new(20_000) {
    Some(rounds) => rounds,
    None => std::num::NonZeroU32::MIN,
};

/// The sealing keys of one use: the one derived from the store's
/// credentials in force, and the one before the last rotation.
pub(crate) struct SealKeys {
    /// The salt that sets this use's keys apart from every other's.
    salt: &'static [u8],
    keys: RwLock<Arc<KeyPair>>,
}

/// The key in force and the one before it.
pub(crate) struct KeyPair {
    current: hmac::Key,
    previous: Option<hmac::Key>,
}

impl KeyPair {
    /// The key in force, then the one before it (if any): the order a
    /// handle is checked in.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &hmac::Key> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
    }
}

impl std::fmt::Debug for SealKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKeys(..)")
    }
}

impl SealKeys {
    /// The keys of `credentials` for the use `salt` names.
    pub(crate) fn new(credentials: &UpstreamCredentials, salt: &'static [u8]) -> SealKeys {
        SealKeys {
            salt,
            keys: RwLock::new(Arc::new(KeyPair {
                current: derive(credentials, salt),
                previous: None,
            })),
        }
    }

    /// Seals with `credentials` from now on (a reload of their file); the
    /// key in force until now still verifies.
    pub(crate) fn rotate(&self, credentials: &UpstreamCredentials) {
        let current = derive(credentials, self.salt);
        if let Ok(mut keys) = self.keys.write() {
            let previous = Some(keys.current.clone());
            *keys = Arc::new(KeyPair { current, previous });
        }
    }

    /// The keys in force now.
    pub(crate) fn pair(&self) -> Arc<KeyPair> {
        match self.keys.read() {
            Ok(keys) => Arc::clone(&keys),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The key handles are sealed with now.
    pub(crate) fn sealing_key(&self) -> hmac::Key {
        self.pair().current.clone()
    }
}

/// The sealing key of `credentials` for `salt`: PBKDF2 over the store's
/// password or token (the plain stores' kinds), or over the digest of the
/// others' (S3's and Azure's keys, with their key ids and scopes).
fn derive(credentials: &UpstreamCredentials, salt: &[u8]) -> hmac::Key {
    let secret = match credentials {
        UpstreamCredentials::Basic { user, password } => {
            let mut secret = b"basic\0".to_vec();
            secret.extend_from_slice(&(user.len() as u64).to_be_bytes());
            secret.extend_from_slice(user.as_bytes());
            secret.extend_from_slice(password.expose().as_bytes());
            secret
        }
        UpstreamCredentials::Bearer { token } => {
            let mut secret = b"bearer\0".to_vec();
            secret.extend_from_slice(token.expose().as_bytes());
            secret
        }
        UpstreamCredentials::AwsSigV4 { .. } | UpstreamCredentials::AzureSharedKey { .. } => {
            let mut secret = b"digest\0".to_vec();
            secret.extend_from_slice(&credentials.fingerprint());
            secret
        }
    };
    let mut key = [0u8; 32];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        KEY_ROUNDS,
        salt,
        &secret,
        &mut key,
    );
    hmac::Key::new(hmac::HMAC_SHA256, &key)
}
