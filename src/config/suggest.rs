//! "Did you mean …?": the known name nearest to a misspelt one, by edit distance.

/// The edit distance between `a` and `b` (optimal string alignment: insertions, deletions,
/// substitutions and swaps of neighbours each cost 1), ignoring ASCII case.
pub(super) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Rows i-2, i-1 and i of the distance table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    let mut row: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            row[j] = d;
        }
        std::mem::swap(&mut before, &mut last);
        std::mem::swap(&mut last, &mut row);
    }
    last[b.len()]
}

/// The name of `known` nearest to `name`, when it is close enough to be a slip: at most one
/// edit for names up to 4 characters, two up to 8, three beyond. Keys longer than 64
/// characters are never compared (no name is that long).
pub(super) fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    if len > 64 {
        return None;
    }
    let allowed = match len {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    known
        .into_iter()
        .map(|k| (distance(name, k), k))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_count_slips() {
        assert_eq!(distance("campain", "campaign"), 1);
        assert_eq!(distance("tll", "ttl"), 1);
        assert_eq!(distance("nmae", "name"), 1);
        assert_eq!(distance("TTL", "ttl"), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn nearest_suggests_only_close_names() {
        let fields = ["name", "campaign", "priority", "ttl", "heartbeat"];
        assert_eq!(nearest("campain", fields), Some("campaign"));
        assert_eq!(nearest("heartbaet", fields), Some("heartbeat"));
        assert_eq!(nearest("tll", fields), Some("ttl"));
        assert_eq!(nearest("colour", fields), None);
        assert_eq!(nearest("x", ["ttl"]), None);
        assert_eq!(nearest(&"a".repeat(1000), fields), None);
    }
}
