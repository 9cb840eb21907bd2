//! Release artifacts: what `cargo package` ships, `--version`, the shell completion scripts
//! (loaded into real bash, zsh and fish, which complete with them) and the man pages (rendered
//! by groff/man). A tool a test needs that is missing fails the test, naming its Debian
//! package (`scripts/install-tools.sh --release-tools` installs them).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::cli::CliOutput;

const LIMIT: Duration = Duration::from_secs(20);

/// The subcommands a user sees (`watchdog` is internal and hidden).
const VISIBLE: [&str; 17] = [
    "run",
    "validate",
    "status",
    "watch",
    "evict",
    "plan",
    "move",
    "drain",
    "undrain",
    "scale",
    "freeze",
    "unfreeze",
    "history",
    "exec",
    "completions",
    "man",
    "help",
];

async fn nats_roles(args: &[&str]) -> CliOutput {
    let out = testkit::cli::run(args, &[], LIMIT).await;
    assert_eq!(out.code, Some(0), "nats-roles {args:?}: {}", out.text());
    out
}

/// Runs `program args...` (a tool from the system), failing loudly when it is not installed.
fn tool(program: &str, debian_package: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args).env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "{program} is needed for this test ({e}): apt-get install {debian_package} \
             (scripts/install-tools.sh --release-tools)"
        )
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({:?}):\n{text}",
        out.status
    );
    text
}

/// Writes `text` to `name` in `dir`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

#[tokio::test]
async fn version_names_the_crate_and_protocol_versions() {
    let want = format!(
        "nats-roles {} (protocol {})\n",
        env!("CARGO_PKG_VERSION"),
        nats_roles::tooling::value::VALUE_VERSION
    );
    for flag in ["--version", "-V"] {
        assert_eq!(nats_roles(&[flag]).await.stdout, want);
    }
}

/// The bash script passes `bash -n` and, sourced, completes subcommands, a subcommand's flags
/// and values, never the hidden `watchdog`.
#[tokio::test]
async fn bash_completion_completes_subcommands_flags_and_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = write(
        dir.path(),
        "nats-roles.bash",
        &nats_roles(&["completions", "bash"]).await.stdout,
    );
    tool("bash", "bash", &["-n", &script.to_string_lossy()], &[]);
    // What a shell does on TAB: COMP_* set, the registered function called.
    let driver = write(
        dir.path(),
        "complete.sh",
        r#"source "$1"
spec=$(complete -p nats-roles) || { echo "nats-roles has no completion"; exit 3; }
fn=$(sed -n 's/.*-F \([^ ]*\).*/\1/p' <<<"$spec")
complete_words() {
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    "$fn" nats-roles "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    echo "[$*] ${COMPREPLY[*]}"
}
complete_words nats-roles st
complete_words nats-roles w
complete_words nats-roles status --con
complete_words nats-roles completions f
complete_words nats-roles history ch
"#,
    );
    let out = tool(
        "bash",
        "bash",
        &[
            "--norc",
            "--noprofile",
            &driver.to_string_lossy(),
            &script.to_string_lossy(),
        ],
        &[],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "[nats-roles st] status",
            "[nats-roles w] watch",
            "[nats-roles status --con] --config --context",
            "[nats-roles completions f] fish",
            "[nats-roles history ch] check",
        ],
        "{out}"
    );
}

/// The zsh script passes `zsh -n` and registers `_nats-roles` for `nats-roles` with compinit;
/// the fish script passes `fish --no-execute` and fish completes with it.
#[tokio::test]
async fn zsh_and_fish_completion() {
    let dir = tempfile::tempdir().expect("temp dir");
    let zsh = write(
        dir.path(),
        "_nats-roles",
        &nats_roles(&["completions", "zsh"]).await.stdout,
    );
    tool("zsh", "zsh", &["-n", &zsh.to_string_lossy()], &[]);
    let loaded = tool(
        "zsh",
        "zsh",
        &[
            "-fc",
            &format!(
                "autoload -U compinit && compinit -D -u && source '{}' && print -r -- \
                 \"registered=$_comps[nats-roles]\"",
                zsh.display()
            ),
        ],
        &[("HOME", dir.path())],
    );
    assert_eq!(loaded.trim(), "registered=_nats-roles", "{loaded}");
    let text = std::fs::read_to_string(&zsh).expect("read");
    for sub in VISIBLE {
        assert!(text.contains(&format!("'{sub}:")), "zsh: no {sub}");
    }
    assert!(!text.contains("watchdog"), "zsh offers the hidden watchdog");

    let fish = write(
        dir.path(),
        "nats-roles.fish",
        &nats_roles(&["completions", "fish"]).await.stdout,
    );
    tool(
        "fish",
        "fish",
        &["--no-execute", &fish.to_string_lossy()],
        &[],
    );
    let completed = tool(
        "fish",
        "fish",
        &[
            "--no-config",
            "-c",
            &format!(
                "source '{}'; for line in 'nats-roles st' 'nats-roles w' 'nats-roles exec --con'; \
                 echo \"[$line]\"; complete -C \"$line\" | string replace -r '\\t.*' ''; end",
                fish.display()
            ),
        ],
        &[("HOME", dir.path())],
    );
    let words: Vec<&str> = completed.lines().collect();
    assert_eq!(
        words,
        [
            "[nats-roles st]",
            "status",
            "[nats-roles w]",
            "watch",
            "[nats-roles exec --con]",
            "--config",
            "--conflict-exit-code",
            "--context",
        ],
        "{completed}"
    );
}

/// `nats-roles man` is roff that man(1) renders without warnings: every visible subcommand,
/// the exit status, the environment (NATS_CONTEXT, OTEL_*); `man --dir` writes one page per
/// command, each rendering, none for the hidden `watchdog`.
#[tokio::test]
async fn man_pages_render() {
    let dir = tempfile::tempdir().expect("temp dir");
    let page = write(
        dir.path(),
        "nats-roles.1",
        &nats_roles(&["man"]).await.stdout,
    );
    let page_text = std::fs::read_to_string(&page).expect("read");
    assert!(
        page_text.starts_with(".ie") || page_text.starts_with(".TH"),
        "{page_text}"
    );
    // groff's warnings (-ww) on stderr, the output discarded (-z), the input converted from
    // UTF-8 as man(1) converts it (-k): none expected.
    let warnings = tool(
        "groff",
        "groff-base",
        &["-k", "-man", "-Tutf8", "-ww", "-z", &page.to_string_lossy()],
        &[],
    );
    assert_eq!(warnings, "", "groff warns about nats-roles.1");
    let rendered = tool(
        "man",
        "man-db",
        &["--local-file", &page.to_string_lossy()],
        &[
            ("MANPAGER", Path::new("cat")),
            ("MANWIDTH", Path::new("100")),
        ],
    );
    for section in [
        "NAME",
        "SYNOPSIS",
        "SUBCOMMANDS",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
    ] {
        assert!(
            rendered.lines().any(|l| l == section),
            "no {section} section in\n{rendered}"
        );
    }
    for sub in VISIBLE.iter().filter(|s| **s != "help") {
        assert!(
            rendered.contains(&format!("nats-roles-{sub}(1)")),
            "{sub} not listed in\n{rendered}"
        );
    }
    for word in [
        "NATS_CONTEXT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "NO_COLOR",
        "(protocol ",
    ] {
        assert!(rendered.contains(word), "no {word} in\n{rendered}");
    }
    assert!(!rendered.contains("watchdog"), "{rendered}");

    let pages = dir.path().join("pages");
    nats_roles(&["man", "--dir", &pages.to_string_lossy()]).await;
    let written: BTreeSet<String> = std::fs::read_dir(&pages)
        .expect("pages written")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut want: BTreeSet<String> = VISIBLE
        .iter()
        .filter(|s| **s != "help")
        .map(|s| format!("nats-roles-{s}.1"))
        .collect();
    want.insert("nats-roles.1".into());
    want.insert("nats-roles-history-check.1".into());
    assert_eq!(written, want);
    for name in &written {
        let path = pages.join(name);
        let warnings = tool(
            "groff",
            "groff-base",
            &["-k", "-man", "-Tutf8", "-ww", "-z", &path.to_string_lossy()],
            &[],
        );
        assert_eq!(warnings, "", "groff warns about {name}");
    }
    assert_eq!(
        std::fs::read_to_string(pages.join("nats-roles.1")).expect("main page"),
        page_text,
        "--dir writes the same main page"
    );
    let run = std::fs::read_to_string(pages.join("nats-roles-run.1")).expect("run page");
    assert!(run.contains("\\-\\-context"), "{run}");
}

/// `cargo package --list`: the files the crate ships. Everything the library and binary read
/// at build time (`include_str!`) and their docs and unit tests need is in; tests/, the test
/// kit, CI and build output are out, and the crate stays small. The only warnings are the
/// expected "ignoring test/example" ones for the targets that need the unpublished test kit.
#[test]
fn cargo_package_ships_what_the_crate_needs_and_nothing_else() {
    let root = testkit::repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "-p",
            "nats-roles",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo package --list: {stderr}");
    let files: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();

    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "LICENSE",
        "src/lib.rs",
        "src/main.rs",
        "roles.example.yaml",
        "docs/configuration.md",
        "dashboards/nats-roles.json",
        "deploy/systemd/nats-roles.service",
        "deploy/container/Containerfile",
        "deploy/kubernetes/base/kustomization.yaml",
    ] {
        assert!(files.contains(needed), "{needed} is not packaged");
    }
    // Every file `include_str!` reads, and the file the config tests read.
    let mut included = vec!["roles.example.yaml".to_owned()];
    for source in files
        .iter()
        .filter(|f| f.starts_with("src/") && f.ends_with(".rs"))
    {
        let text = std::fs::read_to_string(root.join(source)).expect("read source");
        for part in text.split("include_str!(\"").skip(1) {
            let rel = part.split('"').next().unwrap_or_default();
            let path = Path::new(source).parent().expect("in src").join(rel);
            included.push(normalize(&path));
        }
    }
    assert!(included.len() > 5, "include_str! not found: {included:?}");
    for file in &included {
        assert!(
            files.contains(file),
            "{file} is read at build time but not packaged"
        );
    }
    for file in &files {
        for out_of_it in [
            "tests/",
            "crates/",
            "target",
            ".ci/",
            ".config/",
            "scripts/",
            "proptest-regressions/",
        ] {
            assert!(!file.starts_with(out_of_it), "{file} is packaged");
        }
    }
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(root.join(f)).ok())
        .map(|m| m.len())
        .sum();
    assert!(bytes < 4 << 20, "{bytes} bytes packaged: big data crept in");
    for line in stderr.lines().filter(|l| l.starts_with("warning:")) {
        let expected = line.starts_with("warning: ignoring test `")
            || line.starts_with("warning: ignoring example `");
        assert!(
            expected && line.ends_with("is not included in the published package"),
            "unexpected cargo package warning: {line}\n{stderr}"
        );
    }
}

/// The published metadata: the test kit is never published, the crate's `rust-version` is no
/// lower than any dependency's (the dependencies decide it: async-nats 0.51 needs 1.89), and
/// docs.rs builds the optional modules.
#[test]
fn manifest_metadata_holds() {
    let root = testkit::repo_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The host's packages only: a fresh machine has downloaded what builds here, not the
    // other platforms' dependencies (`anstyle-wincon`), and the check is offline.
    let rustc = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let version = String::from_utf8_lossy(&rustc.stdout).into_owned();
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .trim()
        .to_owned();
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--all-features",
            "--filter-platform",
            &host,
        ])
        .current_dir(&root)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let package = |name: &str| {
        packages
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no package {name}"))
    };
    assert_eq!(
        package("nats-roles-testkit")["publish"],
        serde_json::json!([]),
        "the test kit must have publish = false"
    );
    let ours = package("nats-roles");
    for key in [
        "description",
        "license",
        "readme",
        "documentation",
        "rust_version",
    ] {
        assert!(ours[key].is_string(), "nats-roles has no {key}");
    }
    let docs_rs = &ours["metadata"]["docs"]["rs"]["features"];
    for feature in ["cli", "http", "otel", "tooling", "testing"] {
        assert!(
            docs_rs
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == feature)),
            "docs.rs does not build `{feature}`: {docs_rs}"
        );
    }
    // Normal dependencies of nats-roles, transitively (dev-dependencies do not count).
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve");
    let node = |id: &serde_json::Value| nodes.iter().find(|n| &n["id"] == id);
    let mut seen = BTreeSet::new();
    let mut todo = vec![ours["id"].clone()];
    while let Some(id) = todo.pop() {
        let Some(n) = node(&id) else { continue };
        for dep in n["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if normal && seen.insert(dep["pkg"].to_string()) {
                todo.push(dep["pkg"].clone());
            }
        }
    }
    let version = |v: &str| -> (u64, u64) {
        let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    let ours_rv = version(ours["rust_version"].as_str().unwrap_or_default());
    let (highest, by) = packages
        .iter()
        .filter(|p| seen.contains(&p["id"].to_string()))
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].to_string())))
        .max()
        .expect("dependencies with a rust-version");
    assert!(
        highest <= ours_rv,
        "rust-version {ours_rv:?} is lower than {by}'s {highest:?}"
    );
}

/// `a/b/../c` as `a/c`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}
