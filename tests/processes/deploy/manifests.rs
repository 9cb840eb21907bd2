//! The Kubernetes manifests of `deploy/kubernetes`, rendered offline by `kubectl kustomize` (no
//! cluster is contacted) and parsed (serde-saphyr, several YAML documents) into JSON values; and
//! what the kubelet would make of a StatefulSet's container: its environment, its mounts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::sandbox::{require_tool, run_ok};

/// `kubectl`, or a failure saying how to get it.
pub fn kubectl() -> PathBuf {
    require_tool(
        "kubectl",
        "the Kubernetes tests render the manifests with `kubectl kustomize`; run \
         `scripts/install-tools.sh --kubectl` (or install kubectl >= 1.27)",
    )
}

/// `deploy/kubernetes`.
pub fn manifests_dir() -> PathBuf {
    testkit::repo_root().join("deploy/kubernetes")
}

/// Rendered objects of one kustomization.
pub struct Rendered {
    /// What was rendered (for messages).
    pub what: String,
    /// Every object, in output order.
    pub objects: Vec<Value>,
}

/// `kubectl kustomize DIR`, parsed.
pub fn render(dir: &Path) -> Rendered {
    let yaml = run_ok(Command::new(kubectl()).arg("kustomize").arg(dir));
    let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap_or_else(|e| {
        panic!(
            "kubectl kustomize {}: not YAML ({e}):\n{yaml}",
            dir.display()
        )
    });
    assert!(
        !objects.is_empty(),
        "kubectl kustomize {} rendered nothing",
        dir.display()
    );
    Rendered {
        what: dir.display().to_string(),
        objects,
    }
}

/// Renders `deploy/kubernetes/<rel>`.
pub fn render_repo(rel: &str) -> Rendered {
    render(&manifests_dir().join(rel))
}

/// Renders the base with the component `components/<component>`: a kustomization that only
/// combines them, in a copy of `deploy/kubernetes` (kustomize refuses absolute paths).
pub fn render_base_with_component(component: &str) -> Rendered {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    copy_dir(&manifests_dir(), &dir.path().join("kubernetes"));
    let top = dir.path().join("kubernetes/combined");
    std::fs::create_dir_all(&top).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::write(
        top.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - \
             ../base\ncomponents:\n  - ../components/{component}\n"
        ),
    )
    .unwrap_or_else(|e| panic!("write kustomization: {e}"));
    let mut rendered = render(&top);
    rendered.what = format!("base + components/{component}");
    rendered
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("copy {}: {e}", entry.path().display()));
        }
    }
}

impl Rendered {
    /// Every object of `kind`.
    pub fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The one object of `kind`.
    pub fn one(&self, kind: &str) -> &Value {
        let all = self.all(kind);
        assert_eq!(
            all.len(),
            1,
            "{}: want exactly one {kind}, got {}",
            self.what,
            all.len()
        );
        all[0]
    }

    /// The kinds, in output order.
    pub fn kinds(&self) -> Vec<&str> {
        self.objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or("?"))
            .collect()
    }

    /// The StatefulSet's `nats-roles` container.
    pub fn container(&self) -> &Value {
        let containers = self.one("StatefulSet")["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: the StatefulSet has no containers", self.what));
        containers
            .iter()
            .find(|c| c["name"] == "nats-roles")
            .unwrap_or_else(|| panic!("{}: no container named nats-roles", self.what))
    }

    /// The pod template's labels.
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        string_map(&self.one("StatefulSet")["spec"]["template"]["metadata"]["labels"])
    }

    /// The files a volume mounted at `mount_path` holds: a ConfigMap's `data`, or for a Secret
    /// the keys `secret` gives for it (the Secrets are not part of the manifests).
    pub fn mounted_files(
        &self,
        mount_path: &str,
        secret: &dyn Fn(&str) -> BTreeMap<String, String>,
    ) -> MountedVolume {
        let container = self.container();
        let mount = container["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["mountPath"] == mount_path))
            .unwrap_or_else(|| panic!("{}: nothing is mounted at {mount_path}", self.what));
        let name = &mount["name"];
        let volume = self.one("StatefulSet")["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == *name))
            .unwrap_or_else(|| panic!("{}: no volume {name}", self.what));
        if let Some(config_map) = volume["configMap"]["name"].as_str() {
            let object = self
                .all("ConfigMap")
                .into_iter()
                .find(|c| c["metadata"]["name"] == config_map)
                .unwrap_or_else(|| panic!("{}: no ConfigMap {config_map}", self.what));
            MountedVolume {
                files: string_map(&object["data"]),
                mode: volume["configMap"]["defaultMode"]
                    .as_u64()
                    .map_or(0o644, mode),
            }
        } else if let Some(secret_name) = volume["secret"]["secretName"].as_str() {
            MountedVolume {
                files: secret(secret_name),
                mode: volume["secret"]["defaultMode"].as_u64().map_or(0o644, mode),
            }
        } else {
            panic!(
                "{}: volume {name} is neither a ConfigMap nor a Secret",
                self.what
            )
        }
    }

    /// The ConfigMap mounted where `--config` points: the configuration file's text.
    pub fn config_file(&self) -> (String, String) {
        let path = self.config_path();
        let (dir, file) = path
            .rsplit_once('/')
            .unwrap_or_else(|| panic!("{}: --config {path} has no directory", self.what));
        let volume = self.mounted_files(dir, &|name| panic!("--config is in the Secret {name}"));
        let text = volume
            .files
            .get(file)
            .unwrap_or_else(|| panic!("{}: {dir} has no {file}", self.what))
            .clone();
        (path, text)
    }

    /// The `--config` argument of the container.
    pub fn config_path(&self) -> String {
        let args = self.args();
        let at = args
            .iter()
            .position(|a| a == "--config" || a == "-c")
            .unwrap_or_else(|| panic!("{}: the container has no --config argument", self.what));
        args.get(at + 1)
            .unwrap_or_else(|| panic!("{}: --config without a value", self.what))
            .clone()
    }

    /// The container's `args`.
    pub fn args(&self) -> Vec<String> {
        strings(&self.container()["args"])
    }

    /// The container port named `name`.
    pub fn port(&self, name: &str) -> u16 {
        self.container()["ports"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == name))
            .and_then(|p| p["containerPort"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("{}: no container port named {name}", self.what))
    }

    /// The grace period of the pod template.
    pub fn grace_seconds(&self) -> u64 {
        self.one("StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: no terminationGracePeriodSeconds", self.what))
    }
}

/// A volume's files as the kubelet writes them.
pub struct MountedVolume {
    /// File name to content.
    pub files: BTreeMap<String, String>,
    /// The files' mode (`defaultMode`, else 0644).
    pub mode: u32,
}

fn mode(m: u64) -> u32 {
    u32::try_from(m).unwrap_or_else(|_| panic!("defaultMode {m}"))
}

/// A JSON object of strings as a map.
pub fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON array of strings.
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// How an environment variable of the container gets its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSource {
    /// `value`.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath` (downward API).
    Field(String),
    /// `valueFrom.secretKeyRef`.
    Secret {
        /// The Secret.
        name: String,
        /// Its key.
        key: String,
        /// Whether the pod starts without it.
        optional: bool,
    },
}

/// The container's environment variables, in order.
pub fn env(container: &Value) -> Vec<(String, EnvSource)> {
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    let name = e["name"].as_str().unwrap_or_default().to_owned();
                    let source = if let Some(v) = e["value"].as_str() {
                        EnvSource::Value(v.to_owned())
                    } else if let Some(p) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                        EnvSource::Field(p.to_owned())
                    } else if let Some(s) = e["valueFrom"]["secretKeyRef"].as_object() {
                        EnvSource::Secret {
                            name: s["name"].as_str().unwrap_or_default().to_owned(),
                            key: s["key"].as_str().unwrap_or_default().to_owned(),
                            optional: s.get("optional").and_then(Value::as_bool) == Some(true),
                        }
                    } else {
                        panic!("env {name}: a source this emulation does not know: {e}")
                    };
                    (name, source)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value the kubelet gives `source` in the pod `pod_name` with `labels`: a downward API
/// field (a label the pod lacks is an empty string), a Secret's key from `secret` (an optional
/// one that is missing leaves the variable out: `None`).
pub fn resolve(
    source: &EnvSource,
    pod_name: &str,
    labels: &BTreeMap<String, String>,
    secret: &dyn Fn(&str, &str) -> Option<String>,
) -> Option<String> {
    match source {
        EnvSource::Value(v) => Some(v.clone()),
        EnvSource::Field(path) if path == "metadata.name" => Some(pod_name.to_owned()),
        EnvSource::Field(path) => {
            let label = path
                .strip_prefix("metadata.labels['")
                .and_then(|p| p.strip_suffix("']"))
                .unwrap_or_else(|| panic!("fieldPath {path}: not emulated here"));
            Some(labels.get(label).cloned().unwrap_or_default())
        }
        EnvSource::Secret {
            name,
            key,
            optional,
        } => {
            let value = secret(name, key);
            assert!(
                value.is_some() || *optional,
                "the Secret {name} (key {key}) is required"
            );
            value
        }
    }
}
