//! The worker's request identity: Restate signs each request it sends with its private key,
//! and a worker given the public key answers only signed ones. Restate names a public key
//! `publickeyv1_` and the base58 of its 32 bytes; `openssl pkey -pubout` writes the same key
//! as a PEM file, which is read here too.

use base64::Engine as _;

/// Restate's prefix of a public key.
pub const PREFIX: &str = "publickeyv1_";

/// What an Ed25519 public key's DER (SubjectPublicKeyInfo) holds before its 32 bytes.
const ED25519_SPKI: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Why a text is not a request-identity public key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityKeyError {
    /// A private key was given where the public one belongs.
    #[error("this is a private key: give the worker the public one (`openssl pkey -in KEY.pem -pubout -out KEY.pub`); the private key stays with the Restate server")]
    Private,
    /// A PEM public key that is not Ed25519.
    #[error("the PEM public key is not an Ed25519 key (make one with `openssl genpkey -algorithm ed25519`)")]
    NotEd25519,
    /// Neither form.
    #[error("expected {PREFIX}… (as the Restate server logs it) or a PEM public key: {given}")]
    Unreadable {
        /// The first line of what was given, cut short.
        given: String,
    },
    /// A PEM public key whose base64 does not decode.
    #[error("expected {PREFIX}… (as the Restate server logs it) or a PEM public key: its base64 does not read: {0}")]
    Base64(#[source] base64::DecodeError),
    /// A key in Restate's form that the Restate SDK does not take (not base58, not 32 bytes).
    #[error("expected {PREFIX}… (as the Restate server logs it) or a PEM public key: {source}")]
    Rejected {
        /// The key as given.
        key: String,
        /// The SDK's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The key in `text` in Restate's `publickeyv1_…` form: `text` is that form already, or an
/// Ed25519 public key in PEM (`-----BEGIN PUBLIC KEY-----`).
pub fn public_key(text: &str) -> Result<String, IdentityKeyError> {
    let text = text.trim();
    if text.starts_with(PREFIX) {
        return check(text).map(|()| text.to_owned());
    }
    if text.contains("PRIVATE KEY-----") {
        return Err(IdentityKeyError::Private);
    }
    let body = text
        .strip_prefix("-----BEGIN PUBLIC KEY-----")
        .and_then(|rest| rest.strip_suffix("-----END PUBLIC KEY-----"))
        .ok_or_else(|| IdentityKeyError::Unreadable {
            given: first_line(text),
        })?;
    let body: String = body.split_whitespace().collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(IdentityKeyError::Base64)?;
    match der.strip_prefix(&ED25519_SPKI[..]) {
        Some(key) if key.len() == 32 => Ok(format!("{PREFIX}{}", bs58::encode(key).into_string())),
        _ => Err(IdentityKeyError::NotEd25519),
    }
}

/// Whether `key` is one the SDK takes (its 32 bytes in base58 after the prefix).
fn check(key: &str) -> Result<(), IdentityKeyError> {
    restate_sdk::prelude::Endpoint::builder()
        .identity_key(key)
        .map(drop)
        .map_err(|e| rejected(key, e))
}

/// The SDK's refusal of `key` (its error type is not public, hence the box).
pub(crate) fn rejected(
    key: &str,
    source: impl std::error::Error + Send + Sync + 'static,
) -> IdentityKeyError {
    IdentityKeyError::Rejected {
        key: key.to_owned(),
        source: Box::new(source),
    }
}

/// The first line of `text`, cut short, for messages.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let cut: String = line.chars().take(40).collect();
    if cut.len() < line.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A pair made with `openssl genpkey -algorithm ed25519`; Restate 1.7.12 logged this
    /// kid for its private half.
    const PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAtHIij5wFhN99aCfqfCDg4O0etVkkf6z/RcupuMZToaw=\n-----END PUBLIC KEY-----\n";
    const KID: &str = "publickeyv1_D9PKycNmspfFmatGP6QYENBmFPd1oZgRGrSB4yZVnd2T";

    #[test]
    fn a_pem_public_key_reads_as_the_kid_restate_logs() {
        assert_eq!(public_key(PUBLIC_PEM).unwrap(), KID);
        assert_eq!(public_key(&format!("  {KID}\n")).unwrap(), KID);
    }

    #[test]
    fn a_private_key_or_anything_else_is_refused_saying_why() {
        let private = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIOLOzYndzcbcmn5FSNIHVJyfx3QTclNO2Bf7libn71E+\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            public_key(private),
            Err(IdentityKeyError::Private)
        ));
        assert!(matches!(
            public_key("publickeyv1_notbase58!"),
            Err(IdentityKeyError::Rejected { .. })
        ));
        assert!(matches!(
            public_key("ssh-ed25519 AAAA"),
            Err(IdentityKeyError::Unreadable { .. })
        ));
        // An RSA key's DER does not start as an Ed25519 one does.
        let rsa = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf\n9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END PUBLIC KEY-----\n";
        assert!(matches!(public_key(rsa), Err(IdentityKeyError::NotEd25519)));
    }
}
