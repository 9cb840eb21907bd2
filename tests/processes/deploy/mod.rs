//! The deployment files (docs/deploy.md): the container image built from the binary under test
//! and run from its exported file system (`image`), and the Kubernetes manifests rendered offline
//! and held against the binary (`kubernetes`). No container and no cluster runs here: `sandbox`
//! does what a container runtime and the kubelet would, with namespaces and `chroot` (root).

mod image;
mod kubernetes;
mod manifests;
mod sandbox;

use std::path::PathBuf;

/// The final stage of `deploy/container/Containerfile`, as a runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalStage {
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// `CMD`.
    pub cmd: Vec<String>,
    /// `USER uid:gid`.
    pub user: (u32, u32),
    /// `ENV PATH=…`.
    pub path: String,
    /// `EXPOSE`.
    pub expose: u16,
}

/// `deploy/container/Containerfile`.
pub fn containerfile() -> PathBuf {
    testkit::repo_root().join("deploy/container/Containerfile")
}

/// Reads the final stage (after the last `FROM`) of the Containerfile.
pub fn final_stage() -> FinalStage {
    let path = containerfile();
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap_or_else(|| panic!("{}: no FROM", path.display()));
    let mut entrypoint = None;
    let mut cmd = None;
    let mut user = None;
    let mut env_path = None;
    let mut expose = None;
    let json = |v: &str| -> Vec<String> {
        serde_json::from_str(v).unwrap_or_else(|e| panic!("not a JSON array ({e}): {v}"))
    };
    for line in lines.iter().skip(start + 1) {
        if let Some(v) = line.strip_prefix("ENTRYPOINT ") {
            entrypoint = Some(json(v));
        } else if let Some(v) = line.strip_prefix("CMD ") {
            cmd = Some(json(v));
        } else if let Some(v) = line.strip_prefix("USER ") {
            let (u, g) = v
                .trim()
                .split_once(':')
                .unwrap_or_else(|| panic!("USER {v}: want uid:gid"));
            user = Some((
                u.parse().unwrap_or_else(|e| panic!("USER {v}: {e}")),
                g.parse().unwrap_or_else(|e| panic!("USER {v}: {e}")),
            ));
        } else if let Some(v) = line.strip_prefix("ENV PATH=") {
            env_path = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("EXPOSE ") {
            expose = Some(
                v.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("EXPOSE {v}: {e}")),
            );
        }
    }
    let missing = |what: &str| -> ! { panic!("{}: the final stage has no {what}", path.display()) };
    FinalStage {
        entrypoint: entrypoint.unwrap_or_else(|| missing("ENTRYPOINT")),
        cmd: cmd.unwrap_or_else(|| missing("CMD")),
        user: user.unwrap_or_else(|| missing("USER")),
        path: env_path.unwrap_or_else(|| missing("ENV PATH")),
        expose: expose.unwrap_or_else(|| missing("EXPOSE")),
    }
}
