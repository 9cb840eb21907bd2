//! The container image (`deploy/container/Containerfile`), built here by buildah from the binary
//! under test: the same file users build, with its `rootfs` stage replaced by a directory made by
//! the same script from the debug binary CI built (`--build-context rootfs=DIR`; the Rust build
//! stages are skipped, no image is pulled). Its configuration (labels, user, entrypoint) is read
//! with podman, its file system exported (`podman create` + `podman export`; nothing is run) and
//! run the way a runtime would (PID namespace, `/proc`, chroot, the image's user and `PATH`):
//! `--version`, `validate` of the image's configuration and an election of two containers
//! against the test's nats-server, with a graceful hand-over on SIGTERM. The multi-stage build
//! from the Rust image is not run here (no registry): docs/deploy.md says so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use nats_roles::config::Config;
use serde_json::Value;
use testkit::instances::Deployment;
use testkit::process::{SIGTERM, signal};
use testkit::{NatsServer, create_kv, eventually};

use super::sandbox::{self, Container, require_tool, run_ok};
use super::{containerfile, final_stage};

const TAG: &str = "localhost/nats-roles:test";
const INSTALL_HINT: &str = "the container image test builds the image with buildah and exports \
                            it with podman; run `scripts/install-tools.sh --containers`";

/// podman or buildah with a storage of its own under `dir` (vfs: works on any file system, and
/// nothing is left behind in the machine's image store).
fn tool(name: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(require_tool(name, INSTALL_HINT));
    cmd.arg("--root")
        .arg(dir.join("storage"))
        .arg("--runroot")
        .arg(dir.join("run"))
        .arg("--storage-driver")
        .arg("vfs");
    cmd
}

/// Whether two files have the same content.
fn same_file(a: &Path, b: &Path) -> bool {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    read(a) == read(b)
}

/// Every path in the exported file system (relative, sorted), directories with a trailing `/`.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if path.is_dir() && !path.is_symlink() {
                out.push(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_built_from_the_binary_under_test_runs_version_validate_and_an_election() {
    sandbox::require_root("the container image test");
    let t0 = Instant::now();
    let bin = testkit::nats_roles_bin();
    let dir = tempfile::tempdir().expect("temporary directory");
    let context = dir.path().join("rootfs-context");
    sandbox::make_rootfs(&bin, &context.join("rootfs"));
    let t_rootfs = t0.elapsed();

    // Build the users' Containerfile, its rootfs stage from `context`, with the default VERSION.
    run_ok(
        tool("buildah", dir.path())
            .args(["build", "--quiet", "--build-context"])
            .arg(format!("rootfs={}", context.display()))
            .args(["--build-arg", "SOURCE=https://example.invalid/nats-roles"])
            .args(["--build-arg", "REVISION=test-revision"])
            .arg("-f")
            .arg(containerfile())
            .args(["-t", TAG])
            .arg(testkit::repo_root()),
    );
    let t_build = t0.elapsed();

    // What a runtime reads: the image's configuration and layers.
    let inspect: Value = serde_json::from_str(&run_ok(
        tool("podman", dir.path()).args(["image", "inspect", TAG]),
    ))
    .expect("podman image inspect: JSON");
    let image = &inspect[0];
    let config = &image["Config"];
    let label = |name: &str| {
        config["Labels"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        label("org.opencontainers.image.version"),
        env!("CARGO_PKG_VERSION"),
        "the Containerfile's VERSION default and Cargo.toml disagree"
    );
    assert_eq!(
        label("org.opencontainers.image.licenses"),
        env!("CARGO_PKG_LICENSE")
    );
    assert_eq!(
        label("org.opencontainers.image.source"),
        "https://example.invalid/nats-roles"
    );
    assert_eq!(label("org.opencontainers.image.revision"), "test-revision");
    assert_eq!(label("org.opencontainers.image.title"), "nats-roles");
    let stage = final_stage();
    let strings = |v: &Value| -> Vec<String> { super::manifests::strings(v) };
    assert_eq!(strings(&config["Entrypoint"]), stage.entrypoint);
    assert_eq!(strings(&config["Entrypoint"]), ["nats-roles"]);
    assert_eq!(strings(&config["Cmd"]), stage.cmd);
    assert_eq!(config["User"], format!("{}:{}", stage.user.0, stage.user.1));
    assert_ne!(stage.user.0, 0, "the image must not run as root");
    assert_eq!(strings(&config["Env"]), [format!("PATH={}", stage.path)]);
    assert_eq!(
        image["RootFS"]["Layers"].as_array().map(Vec::len),
        Some(1),
        "FROM scratch plus one COPY: no base image"
    );

    // Export its file system (a container is created, never started).
    let tar = dir.path().join("image.tar");
    run_ok(tool("podman", dir.path()).args(["create", "--name", "exported", TAG]));
    run_ok(
        tool("podman", dir.path())
            .args(["export", "-o"])
            .arg(&tar)
            .arg("exported"),
    );
    run_ok(tool("podman", dir.path()).args(["rm", "exported"]));
    let root: PathBuf = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir root");
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&root),
    );
    let t_export = t0.elapsed();
    let files = listing(&root);
    for needed in [
        "usr/local/bin/nats-roles",
        "etc/nats-roles/roles.yaml",
        "etc/passwd",
        "etc/group",
        "etc/nsswitch.conf",
        "etc/ssl/certs/ca-certificates.crt",
        "tmp/",
    ] {
        assert!(
            files.iter().any(|f| f == needed),
            "the image lacks {needed}: {files:?}"
        );
    }
    assert!(
        !files.iter().any(|f| f == "bin/sh" || f == "usr/bin/sh"),
        "no shell in the image: {files:?}"
    );
    assert!(
        same_file(&root.join("usr/local/bin/nats-roles"), &bin),
        "the image holds the binary under test"
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    assert!(
        passwd.contains(&format!(":{}:{}:", stage.user.0, stage.user.1)),
        "{passwd}"
    );
    sandbox::add_runtime_mounts(&root);

    let image_env: Vec<(String, String)> = vec![("PATH".to_owned(), stage.path.clone())];
    let container = |args: &[&str], extra: &[(&str, &str)]| Container {
        root: root.clone(),
        user: stage.user,
        env: image_env
            .iter()
            .cloned()
            .chain(
                extra
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            )
            .collect(),
        argv: stage
            .entrypoint
            .iter()
            .cloned()
            .chain(args.iter().map(|a| (*a).to_owned()))
            .collect(),
    };

    // --version
    let out = container(&["--version"], &[])
        .run(Duration::from_secs(20))
        .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert_eq!(
        out.stdout.trim(),
        format!(
            "nats-roles {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            nats_roles::tooling::value::VALUE_VERSION
        )
    );

    // validate the image's configuration (the file the CMD names)
    let config_path = stage
        .cmd
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("CMD --config")
        .clone();
    let out = container(&["validate", &config_path], &[])
        .run(Duration::from_secs(20))
        .await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains(": ok"), "{}", out.text());
    let image_config = Config::load(&root.join(config_path.trim_start_matches('/')))
        .expect("the image's configuration");
    let role = image_config.roles[0].name.to_string();

    // An election: two containers of the image, its CMD, NATS_URL and NATS_ROLES_INSTANCE_ID
    // from the environment; only the HTTP address differs (two containers would each have their
    // own network, here they share the host's).
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    create_kv(
        &jetstream::new(client),
        testkit::roles::lease_bucket(&image_config.bucket.name),
    )
    .await;
    let mut d = Deployment::new(&server.url(), &image_config.bucket.name, &[], "");
    let cmd: Vec<&str> = stage
        .cmd
        .iter()
        .map(String::as_str)
        .chain(["--http", "127.0.0.1:0"])
        .collect();
    let a = d
        .start_command(
            "image-a",
            container(
                &cmd,
                &[
                    ("NATS_URL", &server.url()),
                    ("NATS_ROLES_INSTANCE_ID", "image-a"),
                ],
            )
            .command(),
        )
        .await;
    let promoted = |d: &Deployment, i: usize| {
        let prefix = format!("promoted role={role} ");
        d.instances[i]
            .stdout()
            .iter()
            .any(|l| l.starts_with(&prefix))
    };
    eventually(
        "image-a holds the role",
        Duration::from_secs(20),
        || async { promoted(&d, a).then_some(()) },
    )
    .await;
    let b = d
        .start_command(
            "image-b",
            container(
                &cmd,
                &[
                    ("NATS_URL", &server.url()),
                    ("NATS_ROLES_INSTANCE_ID", "image-b"),
                ],
            )
            .command(),
        )
        .await;
    eventually(
        "image-b sees image-a hold the role",
        Duration::from_secs(20),
        || async {
            let line = format!("holder role={role} holder=image-a ");
            d.instances[b]
                .stdout()
                .iter()
                .any(|l| l.starts_with(&line))
                .then_some(())
        },
    )
    .await;
    // SIGTERM to the first process of image-a's container, as a runtime stops a container.
    let init = sandbox::init_pid(d.instances[a].pid()).await;
    signal(init, SIGTERM);
    eventually(
        "image-b takes the role over",
        Duration::from_secs(20),
        || async { promoted(&d, b).then_some(()) },
    )
    .await;
    let exit = d.wait_exit(a, Duration::from_secs(30)).await;
    assert!(
        exit.success(),
        "image-a after SIGTERM: {exit}\n{}",
        d.report()
    );
    let released = format!("demoted role={role} ");
    assert!(
        d.instances[a]
            .stdout()
            .iter()
            .any(|l| l.starts_with(&released) && l.ends_with("reason=shutdown")),
        "{}",
        d.report()
    );
    let t_total = t0.elapsed();
    eprintln!(
        "image test: rootfs {:.1} s, build {:.1} s, inspect + export {:.1} s, runs and election \
         {:.1} s; total {:.1} s",
        t_rootfs.as_secs_f64(),
        (t_build - t_rootfs).as_secs_f64(),
        (t_export - t_build).as_secs_f64(),
        (t_total - t_export).as_secs_f64(),
        t_total.as_secs_f64()
    );
}
