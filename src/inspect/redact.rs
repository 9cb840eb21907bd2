//! The redacted form of fencing tokens shown by the API, the dashboard and the CLI.

use crate::token::FencingToken;

/// A short, non-reversible form of a token: the term and four hex digits of a hash of the full
/// token, e.g. `41·…a1b2`. Enough to tell terms and tokens apart on a screen; useless for
/// passing a fence.
#[must_use]
pub fn redact_token(token: &FencingToken) -> String {
    let hash = fmix64(fnv1a(token.expose().as_bytes()));
    format!("{}·…{:04x}", token.term(), hash >> 48)
}

/// MurmurHash3's finaliser: every input bit affects the top bits kept above.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// 64-bit FNV-1a: stable across Rust versions and platforms (unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn shows_the_term_and_a_short_hash_only() {
        let nonce = Uuid::new_v4();
        let token = FencingToken::new(1_700_000_000_000_000_000, 41, nonce);
        let shown = redact_token(&token);
        assert!(shown.starts_with("41·…"), "{shown}");
        assert_eq!(shown.chars().count(), "41·…".chars().count() + 4);
        assert!(!shown.contains(&token.expose()));
        assert!(!shown.contains(&nonce.simple().to_string()[..8]));
        // Stable, and different for another nonce (with overwhelming probability).
        assert_eq!(shown, redact_token(&token));
        // Tokens differing in one bit of the nonce look different.
        let shown: std::collections::HashSet<String> = (0..32)
            .map(|i| redact_token(&FencingToken::new(7, 41, Uuid::from_u128(1 << i))))
            .collect();
        assert!(shown.len() >= 31, "{shown:?}");
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
