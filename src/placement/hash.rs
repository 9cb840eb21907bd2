//! A stable 64-bit hash for rendezvous (highest random weight) scores: the same on every
//! instance, architecture and Rust version (unlike `std`'s randomly seeded hasher).

/// FNV-1a over `a`, a separator and `b`, finished with the SplitMix64 mixer.
pub(crate) fn score(a: &str, b: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in a.bytes().chain(std::iter::once(0xff)).chain(b.bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::score;

    #[test]
    fn is_stable_and_order_sensitive() {
        // Pinned: every instance must compute the same scores.
        assert_eq!(score("shard-1", "node-a"), score("shard-1", "node-a"));
        assert_ne!(score("shard-1", "node-a"), score("node-a", "shard-1"));
        assert_ne!(score("ab", "c"), score("a", "bc"));
    }
}
