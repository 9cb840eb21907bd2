//! Plain-text tables for terminals.

/// Renders rows under a header, columns padded to their widest cell (right-aligned where
/// `right[i]`), two spaces apart, trailing spaces trimmed.
pub(crate) fn render(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(columns) {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i > 0 {
                line.push_str("  ");
            }
            if right.get(i).copied().unwrap_or(false) {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A duration in milliseconds for people: `0.4s`, `12s`, `5m12s`, `3h05m`, `2d04h`.
pub(crate) fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..10 => format!("{}.{}s", s, (ms % 1000) / 100),
        10..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let t = render(
            &["ROLE", "TERM"],
            &[false, true],
            &[
                vec!["a".into(), "7".into()],
                vec!["long-name".into(), "123".into()],
            ],
        );
        assert_eq!(t, "ROLE       TERM\na             7\nlong-name   123\n");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(420), "0.4s");
        assert_eq!(age(12_000), "12s");
        assert_eq!(age(312_000), "5m12s");
        assert_eq!(age(3 * 3600 * 1000 + 5 * 60 * 1000), "3h05m");
        assert_eq!(age(52 * 3600 * 1000), "2d04h");
    }
}
