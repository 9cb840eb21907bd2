//! The `nats-server` binary the harness runs, and the other binaries and paths tests need.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Oldest server accepted from `PATH`: per-message TTLs and KV limit markers need 2.11.
pub const MIN_SERVER_VERSION: (u32, u32) = (2, 11);

/// The path named by the environment variable `var`, if it is set and not empty; panics (with
/// `hint`) if that path does not exist.
pub fn path_from_env(var: &str, hint: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).filter(|v| !v.is_empty())?);
    assert!(
        path.exists(),
        "{var}={} does not exist; {hint}",
        path.display()
    );
    Some(path)
}

/// The repository root (the `nats-roles` package directory), for docs, configs and `.tools`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of the running test or example executable's profile (`target/<profile>`):
/// test binaries live in `target/<profile>/deps/`, examples in `target/<profile>/examples/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("executable path: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("no target/<profile> directory above {}", exe.display()))
        .to_path_buf()
}

/// The `nats-roles` binary under test: `target/<profile>/nats-roles` next to the running test
/// binary (the one cargo and nextest build for integration tests, `CARGO_BIN_EXE_nats-roles`).
/// Panics if it does not exist.
pub fn nats_roles_bin() -> PathBuf {
    let path = profile_dir().join("nats-roles");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --all-targets`",
        path.display()
    );
    path
}

/// The compiled example `name` (built by `cargo build --all-targets`, which scripts/test.sh runs
/// before the tests). Panics if it is missing.
pub fn example_bin(name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "example binary {} is missing: run `cargo build --examples` first",
        path.display()
    );
    path
}

/// Path of the `nats-server` binary to run.
///
/// In order: the env var `NATS_SERVER_BIN` (must exist), else
/// `<repo root>/.tools/bin/nats-server`, else `nats-server` on `PATH` if its
/// `--version` is at least [`MIN_SERVER_VERSION`]. Otherwise panics, telling to run
/// `scripts/install-tools.sh`. The choice is made once per test binary.
pub fn nats_server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(find_nats_server_bin).clone()
}

fn find_nats_server_bin() -> PathBuf {
    const HINT: &str = "run `scripts/install-tools.sh` (installs nats-server 2.15.1 into \
                        .tools/bin/), or set NATS_SERVER_BIN to a nats-server >= 2.11";

    if let Some(value) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        match server_version(&path) {
            Some(v) if version_ok(v) => return path,
            Some((a, b, c)) => panic!(
                "NATS_SERVER_BIN={} is nats-server {a}.{b}.{c}, older than {}.{}; {HINT}",
                path.display(),
                MIN_SERVER_VERSION.0,
                MIN_SERVER_VERSION.1
            ),
            None => panic!(
                "NATS_SERVER_BIN={} does not run `--version`; {HINT}",
                path.display()
            ),
        }
    }

    let local = repo_root().join(".tools/bin/nats-server");
    if local.exists() {
        match server_version(&local) {
            Some(v) if version_ok(v) => return local,
            other => panic!(
                "{} is unusable (version {other:?}); {HINT}",
                local.display()
            ),
        }
    }

    let on_path = PathBuf::from("nats-server");
    match server_version(&on_path) {
        Some(v) if version_ok(v) => on_path,
        Some((a, b, c)) => panic!(
            "nats-server on PATH is {a}.{b}.{c} (Debian ships 2.9), but >= {}.{} is needed \
             for per-message TTLs and KV limit markers; {HINT}",
            MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        ),
        None => panic!("no nats-server found; {HINT}"),
    }
}

fn version_ok((major, minor, _): (u32, u32, u32)) -> bool {
    (major, minor) >= MIN_SERVER_VERSION
}

/// Runs `<bin> --version` and parses `nats-server: v2.15.1` into `(2, 15, 1)`.
fn server_version(bin: &Path) -> Option<(u32, u32, u32)> {
    let out = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The first "v" directly followed by a digit ("server" has a "v" too).
    let start = text
        .char_indices()
        .find(|&(i, c)| c == 'v' && text[i + 1..].starts_with(|d: char| d.is_ascii_digit()))?
        .0
        + 1;
    let mut parts = text[start..]
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}
