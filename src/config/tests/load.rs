//! Tests of parsing and file loading.

use std::path::Path;

use super::*;
use proptest::prelude::*;

#[test]
fn unknown_keys_are_rejected_with_location_and_the_nearest_name() {
    let found = yaml_problems("nats:\n  servers: []\n  servrs: [x]\n");
    let unknown = &found[0];
    assert_eq!(
        (unknown.field.as_str(), unknown.line, unknown.column),
        ("nats.servrs", Some(3), Some(3))
    );
    assert_eq!(
        unknown.message,
        "unknown field `servrs` in nats; did you mean `servers`?"
    );
    // The rest of the file is still checked: the empty list is a problem of its own.
    assert_eq!(found[1].field, "nats.servers", "{found:#?}");
    // Keys written inline (a role's timing overrides, the health policy next to `command`)
    // are known ones, and suggested.
    let p = one_problem("roles:\n  - name: a\n    tll: 3s\n");
    assert_eq!((p.field.as_str(), p.line), ("roles[0].tll", Some(3)));
    assert!(
        p.message.contains("in roles[0]; did you mean `ttl`?"),
        "{p}"
    );
    let p = one_problem("roles:\n  - name: a\n    campain: true\n");
    assert_eq!(
        p.message,
        "unknown field `campain` in roles[0]; did you mean `campaign`?"
    );
    let p = one_problem("health:\n  interval: 1s\n  comand: [x]\n");
    assert_eq!(p.line, Some(3));
    assert!(p.message.contains("did you mean `command`?"), "{p}");
    // Nothing close: the fields valid there are listed instead.
    let p = one_problem("timing: {}\nbogus: 1\n");
    assert_eq!(
        (p.field.as_str(), p.line, p.column),
        ("bogus", Some(2), Some(1))
    );
    assert!(
        p.message.starts_with(
            "unknown field `bogus` in the configuration; the fields here are nats, bucket,"
        ),
        "{p}"
    );
    let err = Config::from_yaml_str("bogus: 1\n").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid configuration (1 problem):\n  bogus: unknown field `bogus`"),
        "{err}"
    );
    assert!(err.ends_with("(line 1, column 1)"), "{err}");
}

#[test]
fn malformed_yaml_gives_parse_error_with_location() {
    let cases = [
        ("nats:\n  servers: [\"a\", \"b\"\n  name: x\n", 3),
        ("timing:\n  ttl: 3s\n  - heartbeat\n", 3),
        ("bucket:\n  name: \"unterminated\n", 3),
        ("roles:\n- name: a\n  - name: b\n", 3),
        ("nats: {servers: [a}\n", 1),
        ("timing:\n  ttl: 3s\n   heartbeat: 1s\n", 3),
    ];
    for (text, expected_line) in cases {
        let (line, column, message) = parse_err(text);
        assert_eq!(line, Some(expected_line), "{text:?}: {message}");
        assert!(column.is_some(), "{text:?}");
        assert!(!message.is_empty());
    }
    // A document that is not a mapping.
    let p = one_problem("\t- x\n");
    assert_eq!(p.line, Some(1), "{p}");
    assert!(p.message.contains("expected a mapping of sections"), "{p}");
}

#[test]
fn type_errors_name_the_field_and_what_is_expected() {
    let p = one_problem("timing:\n  ttl: 3 seconds please\n");
    assert_eq!(
        (p.field.as_str(), p.line, p.column),
        ("timing.ttl", Some(2), Some(8))
    );
    assert_eq!(
        p.message,
        "expected a duration such as `3s` or `750ms`, found the string \"3 seconds please\""
    );
    let p = one_problem("timing:\n  ttl: \"3\"\n");
    assert!(p.message.ends_with("found the string \"3\""), "{p}");
    let p = one_problem("roles:\n  - name: \"a b\"\n");
    assert_eq!((p.field.as_str(), p.line), ("roles[0].name", Some(2)));
    assert!(p.message.contains("invalid role name \"a b\""), "{p}");
    let p = one_problem("instance:\n  id: node/1\n");
    assert_eq!(p.field, "instance.id");
    assert!(p.message.contains("invalid instance id \"node/1\""), "{p}");
    let p = one_problem("roles:\n  - description: no name\n");
    assert_eq!((p.field.as_str(), p.line), ("roles[0].name", Some(2)));
    assert!(
        p.message
            .contains("the required field `name` is missing in roles[0]"),
        "{p}"
    );
    // YAML 1.1 booleans are not accepted.
    let p = one_problem("roles:\n  - name: a\n    campaign: no\n");
    assert_eq!((p.field.as_str(), p.line), ("roles[0].campaign", Some(3)));
    assert_eq!(p.message, "expected true or false, found the string \"no\"");
    let p = one_problem("roles:\n  - name: a\n    priority: high\n");
    assert_eq!(
        p.message,
        "expected a whole number from -2147483648 to 2147483647, found the string \"high\""
    );
    let p = one_problem("placement:\n  weight: -3\n");
    assert_eq!(
        p.message,
        "expected a whole number from 0 to 4294967295, found the number -3"
    );
    let p = one_problem("nats:\n  servers: {a: 1}\n");
    assert!(
        p.message.starts_with("expected a list of server URLs"),
        "{p}"
    );
    let p = one_problem("instance:\n  meta: [a]\n");
    assert_eq!(
        p.message,
        "expected a mapping of names to values, found a list"
    );
    let p = one_problem("timing: 3s\n");
    assert!(
        p.message
            .starts_with("expected a mapping of settings (ttl, heartbeat"),
        "{p}"
    );
    let p = one_problem("telemetry:\n  log_format: xml\n");
    assert_eq!(
        p.message,
        "expected one of `text`, `json`, found the string \"xml\""
    );
    let p = one_problem("roles:\n  - name: a\n    exec: {command: [sh], stop_signal: SEGV}\n");
    assert_eq!(p.field, "roles[0].exec.stop_signal");
    assert!(p.message.contains("unknown signal"), "{p}");
    // Null is not an empty list.
    let p = one_problem("roles:\n");
    assert_eq!(p.message, "expected a list of roles, found nothing (null)");
    // Duplicate keys are rejected by the parser.
    let (line, _, message) = parse_err("bucket:\n  name: a\n  name: b\n");
    assert_eq!(line, Some(3), "{message}");
    // Only one document.
    parse_err("bucket: {name: a}\n---\nbucket: {name: b}\n");
}

#[test]
fn every_problem_is_listed_type_errors_unknown_fields_and_rules() {
    let text = "\
nats:
  servers: nats://a:4222
timing:
  ttl: \"3\"
  heartbeat: soon
bucket:
  replicas: 9
roles:
  - name: a
    campain: true
    priority: high
  - description: no name
  - name: b
    weight: 0
";
    let found = yaml_problems(text);
    let shown: Vec<(&str, Option<usize>, Option<usize>)> = found
        .iter()
        .map(|p| (p.field.as_str(), p.line, p.column))
        .collect();
    assert_eq!(
        shown,
        [
            ("timing.ttl", Some(4), Some(8)),
            ("timing.heartbeat", Some(5), Some(14)),
            ("roles[0].campain", Some(10), Some(5)),
            ("roles[0].priority", Some(11), Some(15)),
            ("roles[1].name", Some(12), Some(5)),
            // The rules, on the values that fit: roles[2] keeps its number in the file.
            ("bucket.replicas", Some(7), Some(13)),
            ("roles[2].weight", Some(14), Some(13)),
        ],
        "{found:#?}"
    );
}

#[test]
fn rules_about_a_value_that_does_not_fit_are_not_reported() {
    // heartbeat 2s breaks "ttl at least 3 × heartbeat" with the default ttl, but the ttl
    // written is not a duration: only the type error is reported.
    let found = yaml_problems("timing:\n  ttl: soon\n  heartbeat: 2s\n");
    let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["timing.ttl"], "{found:#?}");
}

#[test]
fn one_string_is_a_list_of_servers_or_a_program() {
    let c = Config::from_yaml_str("nats:\n  servers: nats://a:4222\n").unwrap();
    assert_eq!(c.nats.servers, ["nats://a:4222"]);
    let c = Config::from_yaml_str("nats:\n  servers: \"nats://a:4222, nats://b:4222,\"\n").unwrap();
    assert_eq!(c.nats.servers, ["nats://a:4222", "nats://b:4222"]);
    let c = Config::from_yaml_str("health:\n  command: true\n").unwrap_err();
    // `true` is a boolean, not a program name.
    assert_eq!(c.problems()[0].field, "health.command", "{c}");
    let c = Config::from_yaml_str("health:\n  command: \"true\"\n").unwrap();
    assert_eq!(c.health.command, Some(vec!["true".to_owned()]));
    let c = Config::from_yaml_str(
        "roles:\n  - name: a\n    exec: {command: sh}\n    on_promote: {command: \"true\"}\n",
    )
    .unwrap();
    assert_eq!(c.roles[0].exec.as_ref().unwrap().command, ["sh"]);
    assert_eq!(c.roles[0].on_promote.as_ref().unwrap().command, ["true"]);
    // A string with spaces is not split (there is no shell): the list form is asked for.
    let p = one_problem("roles:\n  - name: a\n    exec:\n      command: python3 job.py\n");
    assert_eq!(
        (p.field.as_str(), p.line),
        ("roles[0].exec.command", Some(4))
    );
    assert!(
        p.message
            .contains("has spaces: write the program and its arguments as a list"),
        "{p}"
    );
    // The list forms keep working.
    let c = Config::from_yaml_str(
        "nats:\n  servers: [nats://a:4222]\nhealth:\n  command: [sh, -c, \"exit 0\"]\n",
    )
    .unwrap();
    assert_eq!(c.health.command.unwrap().len(), 3);
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

#[test]
fn a_hostile_corpus_is_answered_quickly_without_panicking() {
    let mut corpus: Vec<(&str, String)> = vec![
        ("deep block mappings", {
            let mut t = String::new();
            for depth in 0..200 {
                t.push_str(&"  ".repeat(depth));
                t.push_str("a:\n");
            }
            t
        }),
        ("deep flow mappings in a known field", format!("nats: {{servers: {}{}}}", "{a: ".repeat(5_000), "}".repeat(5_000))),
        ("huge numbers", "instance:\n  priority: 1234567890123456789012345678901234567890\nretry:\n  multiplier: 1e999999\n  max_attempts: -99999999999999999999999999999\n".to_owned()),
        ("billion laughs in a table", {
            let mut t = String::from("instance:\n  meta:\n    a: &a [x, x, x, x, x, x, x, x, x, x]\n");
            let names = ["b", "c", "d", "e", "f", "g", "h", "i"];
            let mut prev = "a";
            for name in names {
                t.push_str(&format!("    {name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
                prev = name;
            }
            t
        }),
        ("tabs", "timing:\n\tttl: 3s\n".to_owned()),
        ("a byte order mark", "\u{feff}timing:\n  ttl: 3s\n".to_owned()),
        ("duplicate keys", "roles:\n  - name: a\n    name: b\n".to_owned()),
        ("many unknown keys", (0..20_000).map(|i| format!("k{i}: 1\n")).collect()),
        ("a long unknown key", format!("{}: 1\n", "x".repeat(100_000))),
        ("control characters", "nats:\n  name: \"\\u0000\\u001b[31m\"\n".to_owned()),
        ("a complex key", "? [a, b]\n: 1\n".to_owned()),
        ("merge keys", "x: &x {ttl: 3s}\ntiming:\n  <<: *x\n".to_owned()),
    ];
    corpus.push(("many roles with a problem each", {
        let mut t = String::from("roles:\n");
        for i in 0..5_000 {
            t.push_str(&format!("  - {{name: r{i}, ttl: soon, campain: x}}\n"));
        }
        t
    }));
    for (what, text) in &corpus {
        let started = std::time::Instant::now();
        let result = std::panic::catch_unwind(|| Config::from_yaml_str(text));
        let elapsed = started.elapsed();
        let result = result.unwrap_or_else(|_| panic!("{what}: panicked"));
        // Generous for a loaded 2-core debug build: the budgets keep each one far below.
        assert!(
            elapsed < Duration::from_secs(20),
            "{what}: took {elapsed:?}"
        );
        match *what {
            "a byte order mark" => assert!(result.is_ok(), "{what}: {result:?}"),
            // A connection name may hold them (it is quoted wherever it is shown).
            "control characters" => {}
            _ => assert!(result.is_err(), "{what}: accepted"),
        }
    }
    // Each problem of the long file is listed, with its own line.
    let (_, many) = corpus.last().unwrap();
    let err = Config::from_yaml_str(many).unwrap_err();
    assert_eq!(err.problems().len(), 10_000);
    assert_eq!(err.problems()[9_999].line, Some(5_001));
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
