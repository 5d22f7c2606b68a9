//! One digest of what a credential table holds, secrets included, so that
//! the watcher of the credential files can tell a change of content from a
//! file merely rewritten, without keeping a second copy of any secret.

use ring::digest;

/// A SHA-256 over length-prefixed fields: `("ab", "c")` and `("a", "bc")`
/// give different digests.
pub(crate) struct Fingerprint(digest::Context);

impl Fingerprint {
    /// An empty fingerprint.
    pub(crate) fn new() -> Self {
        Fingerprint(digest::Context::new(&digest::SHA256))
    }

    /// Adds one field.
    pub(crate) fn field(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        let bytes = bytes.as_ref();
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Adds a field that may be absent (told apart from an empty one).
    pub(crate) fn optional(&mut self, bytes: Option<impl AsRef<[u8]>>) -> &mut Self {
        match bytes {
            Some(bytes) => self.field([1]).field(bytes),
            None => self.field([0]),
        }
    }

    /// The digest.
    pub(crate) fn finish(self) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(self.0.finish().as_ref());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(fields: &[Option<&str>]) -> [u8; 32] {
        let mut print = Fingerprint::new();
        for field in fields {
            print.optional(*field);
        }
        print.finish()
    }

    #[test]
    fn fields_are_told_apart_by_length_and_presence() {
        assert_eq!(of(&[Some("ab"), Some("c")]), of(&[Some("ab"), Some("c")]));
        assert_ne!(of(&[Some("ab"), Some("c")]), of(&[Some("a"), Some("bc")]));
        assert_ne!(of(&[None]), of(&[Some("")]));
        assert_ne!(of(&[Some("")]), of(&[]));
    }
}
