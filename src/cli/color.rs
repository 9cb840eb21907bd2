//! Whether log lines on stderr carry ANSI colour: only when stderr is a terminal, and never
//! when `NO_COLOR` is set to a non-empty value (<https://no-color.org>). clap decides the same
//! way for help and usage errors.

use std::ffi::OsString;
use std::io::IsTerminal as _;

/// Environment variable that turns colour off when set and not empty.
pub(crate) const ENV_NO_COLOR: &str = "NO_COLOR";

/// Whether the process's log lines on stderr may be coloured.
pub(crate) fn stderr_ansi() -> bool {
    ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os(ENV_NO_COLOR),
    )
}

/// Colour on a terminal unless `no_color` is set and not empty.
fn ansi(terminal: bool, no_color: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::ansi;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(ansi(true, None));
        assert!(
            ansi(true, Some("".into())),
            "an empty NO_COLOR does not count"
        );
        assert!(!ansi(true, Some("1".into())));
        assert!(!ansi(false, None));
        assert!(!ansi(false, Some("1".into())));
    }
}
