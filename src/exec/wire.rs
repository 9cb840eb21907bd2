//! The lines the manager and a watchdog process exchange over the watchdog's standard input
//! (requests) and standard output (reports). One message per line; text after the keyword is
//! taken verbatim (the child's output lines are relayed with any characters but newlines).

/// Manager → watchdog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// Kill the group at this `CLOCK_MONOTONIC` instant (ns): `deadline <ns>`.
    Deadline(u64),
    /// Stop gracefully: the stop signal now, `SIGKILL` after the stop timeout: `stop`.
    Stop,
    /// `SIGKILL` the group now, for this reason (one word, reported as the child's `killed`):
    /// `kill <reason>` (`kill` alone: `killed`).
    Kill(String),
}

/// The reason of a bare `kill` line.
const KILLED: &str = "killed";

impl Request {
    /// The line (with its newline).
    pub(crate) fn to_line(&self) -> String {
        match self {
            Self::Deadline(ns) => format!("deadline {ns}\n"),
            Self::Stop => "stop\n".to_owned(),
            Self::Kill(reason) => format!("kill {}\n", one_word(reason)),
        }
    }

    /// Parses a line (without its newline); `None` for anything else.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        match line.split_once(' ') {
            Some(("deadline", ns)) => ns.parse().ok().map(Self::Deadline),
            None if line == "stop" => Some(Self::Stop),
            None if line == "kill" => Some(Self::Kill(KILLED.to_owned())),
            Some(("kill", reason)) if !reason.is_empty() => Some(Self::Kill(one_word(reason))),
            _ => None,
        }
    }
}

/// `text` as one word (spaces and newlines become `_`; empty: `killed`).
fn one_word(text: &str) -> String {
    if text.is_empty() {
        return KILLED.to_owned();
    }
    text.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// Watchdog → manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The child runs with this process id (= its process group): `started <pid>`.
    Started(u32),
    /// A line the child wrote to its standard output: `out <text>`.
    Out(String),
    /// A line the child wrote to its standard error: `err <text>`.
    Err(String),
    /// The child could not be started: `failed <message>`.
    Failed(String),
    /// The child and its whole group are gone: `exited <code> <killed or -> <status>`.
    Exited {
        /// The exit code (128 + signal when signalled).
        code: i32,
        /// `exit N` or `signal N`.
        status: String,
        /// Why the watchdog killed the group, if it did.
        killed: Option<String>,
    },
}

impl Report {
    /// The line (with its newline).
    pub(crate) fn to_line(&self) -> String {
        match self {
            Self::Started(pid) => format!("started {pid}\n"),
            Self::Out(t) => format!("out {t}\n"),
            Self::Err(t) => format!("err {t}\n"),
            Self::Failed(m) => format!("failed {}\n", m.replace('\n', " ")),
            Self::Exited {
                code,
                status,
                killed,
            } => format!(
                "exited {code} {} {status}\n",
                killed.as_deref().unwrap_or("-")
            ),
        }
    }

    /// Parses a line (without its newline); `None` for anything else.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "started" => rest.parse().ok().map(Self::Started),
            "out" => Some(Self::Out(rest.to_owned())),
            "err" => Some(Self::Err(rest.to_owned())),
            "failed" => Some(Self::Failed(rest.to_owned())),
            "exited" => {
                let mut parts = rest.splitn(3, ' ');
                let code = parts.next()?.parse().ok()?;
                let killed = match parts.next()? {
                    "-" => None,
                    k => Some(k.to_owned()),
                };
                let status = parts.next()?.to_owned();
                Some(Self::Exited {
                    code,
                    status,
                    killed,
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        for r in [
            Request::Deadline(123_456_789),
            Request::Stop,
            Request::Kill("loss:evicted".into()),
        ] {
            assert_eq!(Request::parse(r.to_line().trim_end()), Some(r));
        }
        assert_eq!(Request::parse("kill"), Some(Request::Kill("killed".into())));
        assert_eq!(
            Request::Kill("a b\nc".into()).to_line(),
            "kill a_b_c\n",
            "a reason is one word"
        );
        for r in [
            Report::Started(42),
            Report::Out("hello  world ".into()),
            Report::Err(String::new()),
            Report::Failed("cannot start \"x\": No such file".into()),
            Report::Exited {
                code: 137,
                status: "signal 9".into(),
                killed: Some("deadline".into()),
            },
            Report::Exited {
                code: 0,
                status: "exit 0".into(),
                killed: None,
            },
        ] {
            assert_eq!(
                Report::parse(r.to_line().strip_suffix('\n').unwrap_or_default()),
                Some(r)
            );
        }
        assert_eq!(Request::parse("deadline soon"), None);
        assert_eq!(Report::parse("exited x - exit 0"), None);
        assert_eq!(Report::parse("bogus"), None);
    }
}
