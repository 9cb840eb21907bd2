//! Tests of parsing and file loading.

use std::path::Path;

use super::*;
use proptest::prelude::*;

#[test]
fn unknown_keys_are_rejected_with_location() {
    let (line, column, message) = parse_err("nats:\n  servers: []\n  servrs: [x]\n");
    assert_eq!((line, column), (Some(3), Some(3)));
    assert!(message.contains("unknown field `servrs`"), "{message}");
    let (line, _, message) = parse_err("roles:\n  - name: a\n    tll: 3s\n");
    assert_eq!(line, Some(3));
    assert!(message.contains("`tll`"), "{message}");
    // Keys written inline (a role's timing overrides, the health policy next to `command`)
    // are expected ones, and errors in them keep their location.
    assert!(
        message.contains("ttl") && message.contains("campaign_jitter"),
        "{message}"
    );
    let (line, _, message) = parse_err("health:\n  interval: 1s\n  comand: [x]\n");
    assert_eq!(line, Some(3));
    assert!(
        message.contains("`comand`") && message.contains("command"),
        "{message}"
    );
    let (line, _, message) = parse_err("roles:\n  - name: a\n    heartbeat: soon\n");
    assert_eq!(line, Some(3));
    assert!(message.contains("duration"), "{message}");
    let (line, _, message) = parse_err("timing: {}\nbogus: 1\n");
    assert_eq!(line, Some(2));
    assert!(message.contains("`bogus`"), "{message}");
    let err = Config::from_yaml_str("bogus: 1\n").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid configuration at line 1, column 1: unknown field `bogus`"),
        "{err}"
    );
}

#[test]
fn malformed_yaml_gives_parse_error_with_location() {
    let cases = [
        ("nats:\n  servers: [\"a\", \"b\"\n  name: x\n", 3),
        ("timing:\n  ttl: 3s\n  - heartbeat\n", 3),
        ("bucket:\n  name: \"unterminated\n", 3),
        ("roles:\n- name: a\n  - name: b\n", 3),
        ("nats: {servers: [a}\n", 1),
        ("\t- x\n", 1),
    ];
    for (text, expected_line) in cases {
        let (line, column, message) = parse_err(text);
        assert_eq!(line, Some(expected_line), "{text:?}: {message}");
        assert!(column.is_some(), "{text:?}");
        assert!(!message.is_empty());
    }
}

#[test]
fn type_errors_give_parse_errors() {
    let (line, _, message) = parse_err("timing:\n  ttl: 3 seconds please\n");
    assert_eq!(line, Some(2));
    assert!(message.contains("duration"), "{message}");
    let (line, _, message) = parse_err("roles:\n  - name: \"a b\"\n");
    assert_eq!(line, Some(2));
    assert!(message.contains("invalid role name \"a b\""), "{message}");
    let (_, _, message) = parse_err("instance:\n  id: node/1\n");
    assert!(
        message.contains("invalid instance id \"node/1\""),
        "{message}"
    );
    let (line, _, message) = parse_err("roles:\n  - description: no name\n");
    assert_eq!(line, Some(2));
    assert!(message.contains("name"), "{message}");
    // YAML 1.1 booleans are not accepted.
    let (line, _, _) = parse_err("roles:\n  - name: a\n    campaign: no\n");
    assert_eq!(line, Some(3));
    // Duplicate keys are rejected.
    let (line, _, message) = parse_err("bucket:\n  name: a\n  name: b\n");
    assert_eq!(line, Some(3), "{message}");
    // Null is not an empty list.
    parse_err("roles:\n");
    // Only one document.
    parse_err("bucket: {name: a}\n---\nbucket: {name: b}\n");
}

#[test]
fn hostile_input_is_rejected_without_panicking() {
    // Deep flow nesting: stopped by the parser's nesting limit.
    let deep = format!("roles: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (line, _, message) = parse_err(&deep);
    assert_eq!(line, Some(1), "{message}");
    // Deep block nesting (rejected as soon as the shape is wrong).
    let mut block = String::from("roles:\n");
    for depth in 0..10_000 {
        block.push_str(&"  ".repeat(depth % 500 + 1));
        block.push_str("- \n");
    }
    parse_err(&block);
    // Larger than MAX_CONFIG_BYTES: rejected before parsing.
    let huge = format!("nats:\n  name: \"{}\"\n", "x".repeat(MAX_CONFIG_BYTES));
    let (line, column, message) = parse_err(&huge);
    assert_eq!((line, column), (None, None));
    assert!(message.contains("at most 1048576"), "{message}");
    // Too many nodes: the budget.
    let wide = format!("health:\n  command: [{}]\n", "a,".repeat(200_000));
    let (_, _, message) = parse_err(&wide);
    assert!(message.contains("limits breached: Nodes"), "{message}");
    // Alias amplification: replayed scalars count against the scalar budget.
    let mut bomb = format!("health:\n  command: [&s {}", "1".repeat(500_000));
    bomb.push_str(&",*s".repeat(50));
    bomb.push_str("]\n");
    let (_, _, message) = parse_err(&bomb);
    assert!(
        message.contains("limits breached: ScalarBytes"),
        "{}",
        &message[..100]
    );
    // Nested alias amplification ("billion laughs") of a valid shape.
    let mut laughs = String::from("health:\n  command: [&a lol");
    laughs.push_str(&",*a".repeat(2_000));
    laughs.push_str("]\n");
    let (_, _, message) = parse_err(&laughs);
    assert!(message.contains("limits breached: Aliases"), "{message}");
}

// ----- files -----
#[test]
fn load_reads_validates_and_names_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roles.yaml");
    std::fs::write(&path, "roles:\n  - name: scheduler\n").unwrap();
    assert_eq!(Config::load(&path).unwrap().roles, [role("scheduler")]);

    std::fs::write(&path, "bucket:\n  replicas: 0\n").unwrap();
    let err = Config::load(&path).unwrap_err();
    assert_eq!(err.problems()[0].line, Some(2));

    let missing = dir.path().join("nope.yaml");
    match Config::load(&missing) {
        Err(ConfigError::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    let shown = Config::load(&missing).unwrap_err().to_string();
    assert!(shown.contains("nope.yaml"), "{shown}");

    std::fs::write(&path, vec![b'#'; MAX_CONFIG_BYTES + 10]).unwrap();
    assert!(matches!(
        Config::load(&path),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn load_names_the_size_of_a_large_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roles.yaml");
    // 50 MB, sparse: never read.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(50_000_000).unwrap();
    let err = Config::load(&path).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("is 50000000 bytes (47.7 MiB); at most 1048576 bytes (1 MiB)"),
        "{shown}"
    );
    file.set_len(MAX_CONFIG_BYTES as u64 + 1).unwrap();
    let shown = Config::load(&path).unwrap_err().to_string();
    assert!(shown.contains("is 1048577 bytes (1.0 MiB)"), "{shown}");
    // Exactly the limit is read (and parsed: zero bytes are not YAML).
    file.set_len(MAX_CONFIG_BYTES as u64).unwrap();
    let shown = Config::load(&path).unwrap_err().to_string();
    assert!(!shown.contains("at most"), "{shown}");
}

#[test]
fn load_points_at_the_first_invalid_utf8_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roles.yaml");
    std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
    match Config::load(&path) {
        Err(ConfigError::Parse {
            line: Some(1),
            column: Some(1),
            message,
        }) => assert!(
            message.contains("not valid UTF-8: invalid byte 0xff at byte offset 0"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Multi-byte characters before it count as one column each.
    let mut bytes = "timing:\n  ttl: 3s # é€\u{1F600} ".as_bytes().to_vec();
    bytes.extend_from_slice(&[0xe2, 0x82, b'\n']);
    std::fs::write(&path, &bytes).unwrap();
    match Config::load(&path) {
        Err(err @ ConfigError::Parse { .. }) => {
            let shown = err.to_string();
            assert!(
                shown.starts_with("invalid configuration at line 2, column 17: ")
                    && shown.contains("invalid byte 0xe2 0x82 at byte offset 30"),
                "{shown}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// `Config::load(path)` on another thread: a load that blocks fails the test instead of
/// hanging it.
fn load_within_5s(path: &Path) -> Result<Config, ConfigError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(Config::load(&owned));
    });
    rx.recv_timeout(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("Config::load({}) blocked", path.display()))
}

#[cfg(unix)]
#[test]
fn load_refuses_files_that_are_not_regular_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let socket_path = dir.path().join("socket.yaml");
    let _socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    // A symlink to a FIFO is a FIFO.
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for (path, kind) in [
        (fifo.as_path(), "a FIFO (named pipe)"),
        (link.as_path(), "a FIFO (named pipe)"),
        (socket_path.as_path(), "a socket"),
        (Path::new("/dev/null"), "a character device"),
        (dir.path(), "a directory"),
    ] {
        match load_within_5s(path) {
            Err(err @ ConfigError::NotAFile { .. }) => {
                let shown = err.to_string();
                assert!(
                    shown.contains(&format!("it is {kind}, not a regular file"))
                        && shown.contains(&path.display().to_string()),
                    "{shown}"
                );
            }
            other => panic!("{}: {other:?}", path.display()),
        }
    }
    // A symlink to a regular file is read.
    let file = dir.path().join("roles.yaml");
    std::fs::write(&file, "roles:\n  - name: a\n").unwrap();
    let link = dir.path().join("file-link.yaml");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    assert_eq!(load_within_5s(&link).unwrap().roles, [role("a")]);
}

proptest! {
    #[test]
    fn arbitrary_strings_never_panic(text in ".{0,300}") {
        let _ = Config::from_yaml_str(&text);
    }

    #[test]
    fn yaml_like_strings_never_panic(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("\n"), Just("  "), Just("- "), Just(": "), Just("["), Just("]"),
                Just("{"), Just("}"), Just(","), Just("&a "), Just("*a"), Just("<<: "),
                Just("roles"), Just("name"), Just("ttl"), Just("timing"), Just("nats"),
                Just("servers"), Just("3s"), Just("1.5s"), Just("0"), Just("\""), Just("'"),
                Just("#"), Just("---"), Just("!!str "), Just("~"), Just("heartbeat"),
                Just("x"), Just("true"), Just("-1"), Just(".nan"), Just("|"),
            ],
            0..60,
        )
    ) {
        let text: String = parts.concat();
        let _ = Config::from_yaml_str(&text);
    }
}
