//! The Kubernetes manifests (`deploy/kubernetes`): the base, the three-zones overlay and the
//! PodMonitor component render offline with `kubectl kustomize`, and the rendered objects are
//! held against the binary — the ConfigMap passes `nats-roles validate`, every environment
//! variable the manifests set is one the binary reads (a wrong value of each makes `run` fail
//! naming it), the grace period covers the configured shutdown, and a pod started as the
//! StatefulSet says (the image's file system, the mounts, the user, the environment, in a
//! network namespace of its own: port 8080 as in the pod) answers its probes, is ready as a
//! follower and takes the roles when the holder stops. No cluster runs here (docs/deploy.md).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use nats_roles::config::Config;
use serde_json::Value;
use testkit::instances::Deployment;
use testkit::process::{SIGTERM, signal};
use testkit::{NatsServer, create_kv, eventually};

use super::manifests::{
    EnvSource, Rendered, env, render_base_with_component, render_repo, resolve,
};
use super::sandbox::{self, Container};
use super::{FinalStage, final_stage};

/// The admin token the test's Secret `nats-roles-admin` holds.
const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The base, the overlay and the base with the PodMonitor, rendered.
fn all_rendered() -> Vec<Rendered> {
    vec![
        render_repo("base"),
        render_repo("overlays/three-zones"),
        render_base_with_component("pod-monitor"),
    ]
}

/// Whether every `key: value` of `selector` is among `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let selector = super::manifests::string_map(selector);
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// `httpGet` of a probe: path and port number (a port name is resolved like the kubelet does).
fn probe(r: &Rendered, which: &str) -> (String, u16) {
    let get = &r.container()[which]["httpGet"];
    let path = get["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: {which} has no httpGet.path", r.what))
        .to_owned();
    let port = match &get["port"] {
        Value::String(name) => r.port(name),
        Value::Number(n) => n
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("{which}: port {n}")),
        other => panic!("{}: {which} has no port: {other}", r.what),
    };
    (path, port)
}

#[test]
fn the_base_the_three_zones_overlay_and_the_pod_monitor_render_and_fit_together() {
    let stage = final_stage();
    let rendered = all_rendered();
    let mut kinds = rendered[0].kinds();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount",
            "StatefulSet"
        ],
        "the base"
    );
    for r in &rendered {
        let sts = r.one("StatefulSet");
        let pod = &sts["spec"]["template"]["spec"];
        let labels = r.pod_labels();
        let what = &r.what;
        assert!(
            selects(&sts["spec"]["selector"]["matchLabels"], &labels),
            "{what}: StatefulSet selector"
        );
        // The governing Service: headless, named by serviceName, selecting the pods.
        let service = r.one("Service");
        assert_eq!(
            sts["spec"]["serviceName"], service["metadata"]["name"],
            "{what}"
        );
        assert_eq!(service["spec"]["clusterIP"], "None", "{what}: headless");
        assert!(
            selects(&service["spec"]["selector"], &labels),
            "{what}: Service selector"
        );
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "http", "{what}");
        let pdb = r.one("PodDisruptionBudget");
        assert!(
            selects(&pdb["spec"]["selector"]["matchLabels"], &labels),
            "{what}: PDB selector"
        );
        assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{what}");
        assert_eq!(
            pod["serviceAccountName"],
            r.one("ServiceAccount")["metadata"]["name"],
            "{what}"
        );
        assert_eq!(pod["automountServiceAccountToken"], false, "{what}");
        // The image's user, not root; the container port is the image's EXPOSE and the port of
        // http.listen in the ConfigMap.
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
        assert_eq!(pod["securityContext"]["runAsUser"], stage.user.0, "{what}");
        assert_eq!(pod["securityContext"]["runAsGroup"], stage.user.1, "{what}");
        assert_eq!(
            r.port("http"),
            stage.expose,
            "{what}: containerPort vs EXPOSE"
        );
        let (_, text) = r.config_file();
        let config = Config::from_yaml_str(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
        let listen = config
            .http
            .listen
            .as_deref()
            .unwrap_or_else(|| panic!("{what}: no http.listen"));
        assert!(
            listen.ends_with(&format!(":{}", r.port("http"))),
            "{what}: http.listen {listen}"
        );
        assert!(
            listen.starts_with("0.0.0.0:") || listen.starts_with("[::]:"),
            "{what}: http.listen {listen} is not reachable from the kubelet"
        );
        assert_eq!(
            probe(r, "livenessProbe"),
            ("/healthz".to_owned(), r.port("http")),
            "{what}"
        );
        assert_eq!(
            probe(r, "readinessProbe"),
            ("/readyz".to_owned(), r.port("http")),
            "{what}"
        );
        // Prometheus: annotations name the HTTP port and /metrics.
        let annotations =
            super::manifests::string_map(&sts["spec"]["template"]["metadata"]["annotations"]);
        assert_eq!(
            annotations.get("prometheus.io/port"),
            Some(&r.port("http").to_string()),
            "{what}"
        );
        assert_eq!(
            annotations.get("prometheus.io/path").map(String::as_str),
            Some("/metrics"),
            "{what}"
        );
        // Requests from the benchmarks; a memory limit; no CPU limit (throttled renewals).
        let resources = &r.container()["resources"];
        assert!(
            resources["requests"]["cpu"].is_string() && resources["requests"]["memory"].is_string(),
            "{what}: {resources}"
        );
        assert!(
            resources["limits"]["memory"].is_string(),
            "{what}: {resources}"
        );
        assert!(
            resources["limits"]["cpu"].is_null(),
            "{what}: a CPU limit throttles renewals"
        );
        // The instance id is the pod's name.
        assert!(
            env(r.container()).contains(&(
                "NATS_ROLES_INSTANCE_ID".to_owned(),
                EnvSource::Field("metadata.name".to_owned())
            )),
            "{what}: the instance id must be the pod's name"
        );
        // No `command`: the image's ENTRYPOINT runs, with the manifests' args.
        assert!(
            r.container()["command"].is_null(),
            "{what}: command replaces the ENTRYPOINT"
        );
    }
    let zones = &rendered[1];
    let sts = zones.one("StatefulSet");
    assert_eq!(sts["spec"]["replicas"], 6, "two pods per zone");
    let spread = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("topologySpreadConstraints");
    assert!(
        spread
            .iter()
            .any(|c| c["topologyKey"] == "topology.kubernetes.io/zone"
                && c["whenUnsatisfiable"] == "DoNotSchedule"
                && c["maxSkew"] == 1
                && selects(&c["labelSelector"]["matchLabels"], &zones.pod_labels())),
        "zones overlay: {spread:?}"
    );
    assert!(env(zones.container()).contains(&(
        "NATS_ROLES_ZONE".to_owned(),
        EnvSource::Field("metadata.labels['topology.kubernetes.io/zone']".to_owned())
    )));
    let monitored = &rendered[2];
    let monitor = monitored.one("PodMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &monitored.pod_labels()
    ));
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "http");
    assert_eq!(endpoint["path"], "/metrics");
}

#[tokio::test]
async fn the_configmaps_pass_nats_roles_validate() {
    for r in [render_repo("base"), render_repo("overlays/three-zones")] {
        let (_, text) = r.config_file();
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("roles.yaml");
        std::fs::write(&file, &text).expect("write roles.yaml");
        let file = file.to_string_lossy().into_owned();
        let out = testkit::cli::run(&["validate", &file], &[], Duration::from_secs(20)).await;
        assert_eq!(out.code, Some(0), "{}: {}", r.what, out.text());
        assert!(out.stdout.contains(": ok"), "{}: {}", r.what, out.text());
    }
}

/// A value of `name` that `run` must refuse, and what its error must name.
fn poison(name: &str) -> (&'static str, i32, &'static str) {
    match name {
        "NATS_URL" => ("http://poisoned:4222", 2, "NATS_URL"),
        "NATS_CREDS" => (
            "/nonexistent/poisoned.creds",
            1,
            "/nonexistent/poisoned.creds",
        ),
        "NATS_ROLES_INSTANCE_ID" => ("not an id", 2, "NATS_ROLES_INSTANCE_ID"),
        "NATS_ROLES_BUCKET" => ("not.a.bucket", 2, "NATS_ROLES_BUCKET"),
        "NATS_ROLES_VERSION" => ("latest", 2, "NATS_ROLES_VERSION"),
        "NATS_ROLES_ADMIN_TOKEN" => ("short", 2, "NATS_ROLES_ADMIN_TOKEN"),
        "NATS_ROLES_LOCAL_TOKEN" => ("short", 2, "NATS_ROLES_LOCAL_TOKEN"),
        "NATS_ROLES_ZONE" => ("not a zone", 2, "NATS_ROLES_ZONE"),
        "NATS_ROLES_LOG_FORMAT" => ("xml", 2, "NATS_ROLES_LOG_FORMAT"),
        other => panic!(
            "the manifests set {other}, which this test cannot show the binary reads: add a \
             value `run` refuses, or remove the variable"
        ),
    }
}

/// Every variable the manifests set is documented (docs/configuration.md) and read by `run`:
/// with a wrong value of it (and every other variable fine: the rest of the pod's environment,
/// NATS at an address where nothing answers) `run` exits at once, naming it. Without the
/// variable `run` would keep retrying the connection, so the check cannot pass by accident.
#[tokio::test]
async fn every_environment_variable_the_manifests_set_is_read_by_the_binary() {
    let docs = std::fs::read_to_string(testkit::repo_root().join("docs/configuration.md"))
        .expect("docs/configuration.md");
    for r in [render_repo("base"), render_repo("overlays/three-zones")] {
        let (_, text) = r.config_file();
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("roles.yaml");
        std::fs::write(&file, &text).expect("write roles.yaml");
        let file = file.to_string_lossy().into_owned();
        let names: Vec<String> = env(r.container()).into_iter().map(|(n, _)| n).collect();
        assert!(names.len() >= 4, "{}: {names:?}", r.what);
        for name in &names {
            assert!(
                docs.contains(&format!("| `{name}` |")) || docs.contains(&format!("(or `{name}`)")),
                "{}: {name} is not documented in docs/configuration.md",
                r.what
            );
            let (value, code, named) = poison(name);
            let mut vars = vec![
                ("NATS_ROLES_INSTANCE_ID", "nats-roles-0"),
                ("NATS_URL", "nats://127.0.0.1:1"),
            ];
            vars.retain(|(n, _)| n != name);
            vars.push((name.as_str(), value));
            let out = testkit::cli::run(
                &["run", "--config", &file, "--no-http"],
                &vars,
                Duration::from_secs(15),
            )
            .await;
            assert_eq!(
                out.code,
                Some(code),
                "{}: {name}={value}: {}",
                r.what,
                out.text()
            );
            assert!(
                out.stderr.contains(named),
                "{}: {name}={value} not named: {}",
                r.what,
                out.text()
            );
        }
    }
}

/// `HTTP_STOP_TIMEOUT` of src/cli/run.rs: how long `run` lets open HTTP requests finish after
/// the roles were released.
fn http_stop_timeout() -> Duration {
    let source =
        std::fs::read_to_string(testkit::repo_root().join("src/cli/run.rs")).expect("run.rs");
    let line = source
        .lines()
        .find(|l| l.starts_with("const HTTP_STOP_TIMEOUT: Duration = Duration::from_secs("))
        .expect("HTTP_STOP_TIMEOUT in src/cli/run.rs");
    let secs = line
        .trim_start_matches("const HTTP_STOP_TIMEOUT: Duration = Duration::from_secs(")
        .trim_end_matches(");");
    Duration::from_secs(secs.parse().expect("HTTP_STOP_TIMEOUT seconds"))
}

/// The margin the rule adds (docs/deploy.md#the-grace-period): signal delivery and exit on a
/// loaded node.
const GRACE_MARGIN: Duration = Duration::from_secs(5);

/// The rule of docs/deploy.md: `max(shutdown.timeout, drain_timeout + longest stop_timeout)
/// + HTTP stop + OTLP timeout (when exporting) + margin`.
fn required_grace(config: &Config) -> Duration {
    let longest_stop = config
        .roles
        .iter()
        .filter_map(|r| r.exec.as_ref().map(|e| e.stop_timeout))
        .max()
        .unwrap_or_default();
    let release = config
        .shutdown
        .timeout
        .max(config.shutdown.drain_timeout + longest_stop);
    let otlp = config
        .telemetry
        .otlp
        .as_ref()
        .map(|o| o.timeout)
        .unwrap_or_default();
    release + http_stop_timeout() + otlp + GRACE_MARGIN
}

#[test]
fn the_grace_period_covers_drain_stop_and_the_rest_of_the_shutdown() {
    for r in [render_repo("base"), render_repo("overlays/three-zones")] {
        let (_, text) = r.config_file();
        let config = Config::from_yaml_str(&text).unwrap_or_else(|e| panic!("{}: {e}", r.what));
        let need = required_grace(&config);
        let grace = Duration::from_secs(r.grace_seconds());
        assert!(
            grace >= need,
            "{}: terminationGracePeriodSeconds {grace:?} < {need:?} = max(shutdown.timeout {:?}, \
             drain_timeout {:?} + longest exec.stop_timeout) + HTTP stop {:?} + OTLP + margin {GRACE_MARGIN:?}",
            r.what,
            config.shutdown.timeout,
            config.shutdown.drain_timeout,
            http_stop_timeout()
        );
        // The rule itself, on a configuration with an exec role whose stop ends after
        // shutdown.timeout, and with OTLP export.
        let mut longer = config.clone();
        longer.roles[0].exec = Some(
            Config::from_yaml_str(
                "shutdown:\n  timeout: 20s\n  drain_timeout: 15s\nroles:\n  - name: x\n    exec:\n      \
                 command: [true]\n      stop_timeout: 14s\n",
            )
            .expect("exec role")
            .roles[0]
                .exec
                .clone()
                .expect("exec"),
        );
        assert_eq!(
            required_grace(&longer),
            (config.shutdown.timeout).max(config.shutdown.drain_timeout + Duration::from_secs(14))
                + http_stop_timeout()
                + GRACE_MARGIN
        );
    }
}

/// The pod's environment as the kubelet sets it: the image's `PATH`, then the manifests'
/// variables resolved for the pod `pod` with `labels` (the Secret `nats-roles-admin` holding
/// [`ADMIN_TOKEN`]), and `NATS_URL` replaced by `nats_url` (the test's server).
fn pod_env(
    r: &Rendered,
    stage: &FinalStage,
    pod: &str,
    labels: &BTreeMap<String, String>,
    nats_url: &str,
) -> Vec<(String, String)> {
    let secret = |name: &str, key: &str| {
        (name == "nats-roles-admin" && key == "token").then(|| ADMIN_TOKEN.to_owned())
    };
    let mut out = vec![("PATH".to_owned(), stage.path.clone())];
    for (name, source) in env(r.container()) {
        if let Some(value) = resolve(&source, pod, labels, &secret) {
            let value = if name == "NATS_URL" {
                nats_url.to_owned()
            } else {
                value
            };
            out.push((name, value));
        }
    }
    out
}

/// A credentials file as the nats CLI writes one: a (placeholder) user JWT and a fresh user
/// nkey seed. The test's server asks for no authentication, so only reading it is tested.
fn credentials_file() -> String {
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("seed");
    format!(
        "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n\
         ------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{seed}\n\
         ------END USER NKEY SEED------\n"
    )
}

/// Writes the pod's volumes into `root` as the kubelet mounts them: each ConfigMap's and
/// Secret's files at the mount path (replacing what the image has there), owned by root and the
/// pod's `fsGroup`, with the volume's mode; an `emptyDir` as an empty directory.
fn mount_volumes(r: &Rendered, root: &Path, creds: &str) {
    let pod = &r.one("StatefulSet")["spec"]["template"]["spec"];
    let fs_group = pod["securityContext"]["fsGroup"].as_u64().map(|g| g as u32);
    let secret = |name: &str| -> BTreeMap<String, String> {
        assert_eq!(
            name, "nats-roles-nats-creds",
            "a Secret the test does not provide"
        );
        BTreeMap::from([("roles.creds".to_owned(), creds.to_owned())])
    };
    for mount in r.container()["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
    {
        let path = mount["mountPath"].as_str().expect("mountPath");
        let dir = root.join(path.trim_start_matches('/'));
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == mount["name"]))
            .expect("the mount's volume");
        if volume["emptyDir"].is_object() {
            std::fs::create_dir_all(&dir).expect("emptyDir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
            continue;
        }
        let files = r.mounted_files(path, &secret);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("replace the image's directory");
        }
        std::fs::create_dir_all(&dir).expect("mount point");
        for (name, content) in &files.files {
            let file = dir.join(name);
            std::fs::write(&file, content).expect("write a mounted file");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(files.mode))
                .expect("chmod");
            std::os::unix::fs::chown(&file, Some(0), fs_group).expect("chown");
        }
    }
}

/// Whether `stdout` has a `promoted role=<role> ` line.
fn promoted(stdout: &[String], role: &str) -> bool {
    let prefix = format!("promoted role={role} ");
    stdout.iter().any(|l| l.starts_with(&prefix))
}

/// The pod `nats-roles-0` of the base, started as the StatefulSet says (see the module doc).
/// (1) NATS not reachable: liveness 200, readiness 503 `starting` (a NATS outage must not restart
/// pods), SIGTERM exits 0. (2) Another instance holds every role: the pod is ready anyway — a
/// follower is ready — its /metrics answer where the annotations point, the admin token of its
/// Secret works, its member record carries the version label. (3) The holder stops: the pod
/// takes every role. (4) SIGTERM: it releases them and exits 0 well within the grace period.
#[test]
fn a_pod_started_as_the_statefulset_says_answers_its_probes_is_ready_as_a_follower_and_takes_over()
{
    sandbox::require_root("the pod emulation");
    sandbox::in_own_network(pod_scenario);
}

async fn pod_scenario() {
    let r = render_repo("base");
    let stage = final_stage();
    let pod = &r.one("StatefulSet")["spec"]["template"]["spec"];
    let user = (
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .expect("runAsUser") as u32,
        pod["securityContext"]["runAsGroup"]
            .as_u64()
            .expect("runAsGroup") as u32,
    );
    let grace = Duration::from_secs(r.grace_seconds());
    let (config_path, config_text) = r.config_file();
    let config = Config::from_yaml_str(&config_text).expect("the ConfigMap's configuration");
    let roles: Vec<String> = config.roles.iter().map(|r| r.name.to_string()).collect();
    let (live_path, live_port) = probe(&r, "livenessProbe");
    let (ready_path, ready_port) = probe(&r, "readinessProbe");
    let labels = r.pod_labels();

    // The pod's file system: the image's (the same script as the Containerfile), the runtime's
    // mounts, the pod's volumes.
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().join("root");
    sandbox::make_rootfs(&testkit::nats_roles_bin(), &root);
    sandbox::add_runtime_mounts(&root);
    mount_volumes(&r, &root, &credentials_file());
    let container = |nats_url: &str| Container {
        root: root.clone(),
        user,
        env: pod_env(&r, &stage, "nats-roles-0", &labels, nats_url),
        argv: stage.entrypoint.iter().cloned().chain(r.args()).collect(),
    };

    let t0 = Instant::now();
    // (1) NATS cannot be reached yet.
    let nowhere = format!("nats://127.0.0.1:{}", testkit::free_port());
    let mut d = Deployment::new(&nowhere, &config.bucket.name, &[], "");
    let first = d
        .spawn_command("nats-roles-0", container(&nowhere).command())
        .await;
    assert_eq!(
        d.instances[first].port, live_port,
        "the pod listens where its probes go"
    );
    let (status, _) = testkit::http::get(live_port, &live_path)
        .await
        .expect("liveness");
    assert_eq!(status, 200, "liveness while NATS is unreachable");
    let (status, body) = testkit::http::get(ready_port, &ready_path)
        .await
        .expect("readiness");
    assert_eq!(status, 503, "readiness while NATS is unreachable: {body}");
    assert!(body.contains("\"starting\":true"), "{body}");
    let init = sandbox::init_pid(d.instances[first].pid()).await;
    signal(init, SIGTERM);
    let exit = d.wait_exit(first, grace).await;
    assert!(
        exit.success(),
        "SIGTERM while starting: {exit}\n{}",
        d.report()
    );

    let t1 = t0.elapsed();
    // (2) Another instance (the binary on this host) holds every role; then the pod starts.
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    create_kv(
        &jetstream::new(client),
        testkit::roles::lease_bucket(&config.bucket.name),
    )
    .await;
    let holder_config = dir.path().join("holder.yaml");
    std::fs::write(&holder_config, &config_text).expect("write the holder's configuration");
    let mut holder = testkit::cli::command(testkit::nats_roles_bin());
    holder
        .arg("run")
        .arg("--config")
        .arg(&holder_config)
        .args(["--instance-id", "nats-roles-1", "--http", "127.0.0.1:0"])
        .env("NATS_URL", server.url());
    let holder = d.start_command("nats-roles-1", holder).await;
    eventually(
        "the other instance holds every role",
        Duration::from_secs(20),
        || async {
            let out = d.instances[holder].stdout();
            roles.iter().all(|role| promoted(&out, role)).then_some(())
        },
    )
    .await;
    let started = Instant::now();
    let p = d
        .start_command("nats-roles-0", container(&server.url()).command())
        .await;
    assert_eq!(d.instances[p].port, ready_port);
    eventually(
        "the follower pod is ready",
        Duration::from_secs(20),
        || async {
            let (status, _) = testkit::http::get(ready_port, &ready_path).await.ok()?;
            (status == 200).then_some(())
        },
    )
    .await;
    let ready_after = started.elapsed();
    assert!(
        d.instances[p]
            .stdout()
            .iter()
            .all(|l| !l.starts_with("promoted ")),
        "a follower must be ready, but the pod held a role by the time it was ready:\n{}",
        d.report()
    );
    let (status, _) = testkit::http::get(live_port, &live_path)
        .await
        .expect("liveness");
    assert_eq!(status, 200);
    let (status, metrics) = testkit::http::get(ready_port, "/metrics")
        .await
        .expect("/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("nats_roles_"), "{metrics}");
    let simulate = |token: Option<&'static str>| async move {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("authorization", a), ("content-type", "application/json")])
            .unwrap_or_else(|| vec![("content-type", "application/json")]);
        testkit::http::request(ready_port, "POST", "/api/plan/simulate", &headers, "{}")
            .await
            .expect("POST /api/plan/simulate")
    };
    assert_eq!(simulate(None).await.0, 401, "admin actions need the token");
    let (status, body) = simulate(Some(ADMIN_TOKEN)).await;
    assert_eq!(
        status, 200,
        "the token of the Secret nats-roles-admin: {body}"
    );
    let version = labels
        .get("app.kubernetes.io/version")
        .expect("version label")
        .clone();
    eventually(
        "the pod's member record carries its version",
        Duration::from_secs(20),
        || async {
            let (_, body) = testkit::http::get(ready_port, "/api/members").await.ok()?;
            let members: Value = serde_json::from_str(&body).ok()?;
            members["members"]
                .as_array()?
                .iter()
                .any(|m| m["id"] == "nats-roles-0" && m["version"] == version.as_str())
                .then_some(())
        },
    )
    .await;

    let t2 = t0.elapsed();
    // (3) The holder stops: the pod takes every role.
    d.terminate(holder);
    let exit = d.wait_exit(holder, grace).await;
    assert!(exit.success(), "holder: {exit}");
    eventually(
        "the pod holds every role",
        Duration::from_secs(20),
        || async {
            let out = d.instances[p].stdout();
            roles.iter().all(|role| promoted(&out, role)).then_some(())
        },
    )
    .await;
    let (status, body) = testkit::http::get(ready_port, &ready_path)
        .await
        .expect("readiness");
    assert_eq!(status, 200, "the holder is ready: {body}");
    let init = sandbox::init_pid(d.instances[p].pid()).await;
    let rss = testkit::process::rss_kib(init).expect("RSS of the pod's process");
    let limit = r.container()["resources"]["limits"]["memory"]
        .as_str()
        .expect("memory limit");
    let limit_kib: u64 = limit
        .trim_end_matches("Mi")
        .parse::<u64>()
        .expect("a limit in Mi")
        * 1024;
    assert!(
        rss < limit_kib,
        "RSS {rss} KiB above the memory limit {limit}"
    );

    let t3 = t0.elapsed();
    // (4) SIGTERM, as the kubelet sends it to the container's first process.
    let stopping = Instant::now();
    signal(init, SIGTERM);
    let exit = d.wait_exit(p, grace).await;
    let took = stopping.elapsed();
    assert!(exit.success(), "SIGTERM: {exit}\n{}", d.report());
    let out = d.instances[p].stdout();
    for role in &roles {
        let released = format!("demoted role={role} ");
        assert!(
            out.iter()
                .any(|l| l.starts_with(&released) && l.ends_with("reason=shutdown")),
            "{role} not released on SIGTERM:\n{}",
            d.report()
        );
    }
    assert!(
        took < grace,
        "the pod took {took:?} to stop; grace {grace:?}"
    );
    eprintln!(
        "pod {config_path}: ready as a follower {ready_after:?} after start; {} roles; \
         RSS {rss} KiB (debug build); SIGTERM to exit {took:?} (grace {grace:?}); phases \
         {t1:?} / {t2:?} / {t3:?} / {:?}",
        roles.len(),
        t0.elapsed()
    );
}

/// The three-zones overlay: a pod whose node's zone label was copied onto it (KEP-4742) tells
/// placement that zone (its member record shows it); without the label the variable is empty,
/// and the pod runs without a zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_the_three_zones_overlay_takes_its_zone_from_its_label() {
    let r = render_repo("overlays/three-zones");
    let stage = final_stage();
    let (_, text) = r.config_file();
    let config = Config::from_yaml_str(&text).expect("configuration");
    let server = NatsServer::start().await;
    let client = testkit::connect(&server.url()).await;
    create_kv(
        &jetstream::new(client),
        testkit::roles::lease_bucket(&config.bucket.name),
    )
    .await;
    let mut d = Deployment::new(&server.url(), &config.bucket.name, &[], "");
    let file = d.dir().join("roles.yaml");
    std::fs::write(&file, &text).expect("write roles.yaml");
    for (pod, zone) in [("nats-roles-0", Some("zone-b")), ("nats-roles-1", None)] {
        let mut labels = r.pod_labels();
        if let Some(zone) = zone {
            labels.insert("topology.kubernetes.io/zone".to_owned(), zone.to_owned());
        }
        let env = pod_env(&r, &stage, pod, &labels, &server.url());
        let zone_var = env
            .iter()
            .find(|(n, _)| n == "NATS_ROLES_ZONE")
            .expect("NATS_ROLES_ZONE");
        assert_eq!(zone_var.1, zone.unwrap_or_default());
        let mut cmd = testkit::cli::command(testkit::nats_roles_bin());
        cmd.arg("run")
            .arg("--config")
            .arg(&file)
            .args(["--http", "127.0.0.1:0"])
            // No Secret on this host (the pod test mounts one); the server needs none.
            .envs(env.into_iter().filter(|(n, _)| n != "NATS_CREDS"));
        let i = d.start_command(pod, cmd).await;
        let port = d.instances[i].port;
        eventually(
            "the member record shows the zone",
            Duration::from_secs(20),
            || async {
                let (_, body) = testkit::http::get(port, "/api/members").await.ok()?;
                let members: Value = serde_json::from_str(&body).ok()?;
                let me = members["members"]
                    .as_array()?
                    .iter()
                    .find(|m| m["id"] == pod)?
                    .clone();
                let want = zone.map_or(Value::Null, |z| Value::String(z.to_owned()));
                (me["zone"] == want).then_some(())
            },
        )
        .await;
    }
}
