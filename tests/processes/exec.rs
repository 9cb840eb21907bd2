//! `exec` roles and hooks as real processes: the child runs while its
//! instance holds the role, gets the term's environment, prints through the manager with the
//! role's prefix, and it and its grandchildren are gone before another instance is promoted —
//! on a graceful stop, a stopped (SIGSTOP) manager, a killed manager and a child that ignores
//! SIGTERM. Every run is recorded in the election history and judged by the checker.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::instances::Deployment;
use testkit::process::{SIGCONT, SIGKILL, SIGSTOP, mono_now_ns, signal};
use testkit::server::NatsServer;

/// The child: logs its start (instance, term, pid) and a grandchild's pid to `$LOG`, prints a
/// line, then runs until stopped. `MODE=graceful` exits 0 on SIGTERM (logging it),
/// `MODE=ignore` ignores SIGTERM, `MODE=exit` exits 3 at once on `$FAIL_ON` (an instance id).
/// On `$FLOOD` (an instance id, from the manager's environment) another process of its group
/// writes lines to its stdout without pause.
pub(crate) const CHILD: &str = r#"#!/bin/sh
echo "start $NATS_ROLES_INSTANCE $NATS_ROLES_TERM $$ ${#NATS_ROLES_TOKEN} $NATS_ROLES_DEADLINE_MS $FOO $NATS_ROLES_ROLE" >> "$LOG"
if [ "$MODE" = exit ] && [ "$NATS_ROLES_INSTANCE" = "$FAIL_ON" ]; then
  exit 3
fi
sleep 1000 &
echo "grandchild $NATS_ROLES_INSTANCE $!" >> "$LOG"
if [ "$MODE" = ignore ]; then trap '' TERM; fi
if [ "$NATS_ROLES_INSTANCE" = "$FLOOD" ]; then
  (trap '' TERM; while :; do echo "flooding the manager's pipe, flooding the manager's pipe"; done) &
fi
if [ "$MODE" = graceful ]; then trap 'echo "term $NATS_ROLES_INSTANCE $NATS_ROLES_ROLE" >> "$LOG"; exit 0' TERM; fi
echo "running as $NATS_ROLES_INSTANCE"
while :; do sleep 0.05; done
"#;

/// A deployment whose role `worker` runs the child script (`mode`), with histories.
pub(crate) fn deployment(
    server: &NatsServer,
    bucket: &str,
    mode: &str,
    exec_extra: &str,
) -> Deployment {
    let mut d = Deployment::new(&server.url(), bucket, &[], "");
    let dir = d.dir().to_path_buf();
    let script = dir.join("child.sh");
    std::fs::write(&script, CHILD).expect("write child script");
    make_executable(&script);
    let log = dir.join("events.log");
    let yaml = format!(
        "bucket:\n  name: {bucket}\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n\
         roles:\n  - name: worker\n    exec:\n      command: [{script}]\n      \
         env: {{LOG: {log}, MODE: {mode}, FOO: bar, FAIL_ON: node-a}}\n{exec_extra}",
        script = script.display(),
        log = log.display(),
    );
    std::fs::write(&d.config, yaml).expect("write config");
    d.arg("--history");
    d.arg("{dir}/{id}.jsonl");
    d
}

pub(crate) fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

pub(crate) fn log_lines(d: &Deployment) -> Vec<String> {
    std::fs::read_to_string(d.dir().join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether process `pid` exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits until `cond` holds (panics with `what` and the deployment's output after `limit`).
pub(crate) async fn wait_for(
    d: &Deployment,
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{what} within {limit:?}\nlog:\n{}\n{}",
            log_lines(d).join("\n"),
            d.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pids (child, grandchild) instance `id` logged for its latest run.
pub(crate) fn pids_of(d: &Deployment, id: &str) -> (u32, u32) {
    let lines = log_lines(d);
    let child = lines
        .iter()
        .rev()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("start") && w.next() == Some(id))
                .then(|| w.nth(1)?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no start of {id} in {lines:?}"));
    let grandchild = lines
        .iter()
        .rev()
        .find_map(|l| {
            l.strip_prefix(&format!("grandchild {id} "))
                .and_then(|p| p.parse().ok())
        })
        .unwrap_or_else(|| panic!("no grandchild of {id} in {lines:?}"));
    (child, grandchild)
}

pub(crate) fn promoted(d: &Deployment, i: usize) -> bool {
    d.instances[i]
        .stdout()
        .iter()
        .any(|l| l.starts_with("promoted role=worker"))
}

/// Records of `file` with event `ev` (the JSON lines), as (mono_ns, line).
pub(crate) fn records(file: &Path, ev: &str) -> Vec<(u64, serde_json::Value)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["ev"] == ev)
        .map(|v| (v["mono_ns"].as_u64().unwrap_or(0), v))
        .collect()
}

/// `nats-roles history check` over the deployment's histories (node-a's, node-b's and the
/// harness's).
pub(crate) async fn history_check(d: &Deployment) -> testkit::cli::CliOutput {
    let names: Vec<String> = history_files(d)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["history", "check"];
    args.extend(names.iter().map(String::as_str));
    testkit::cli::run(&args, &[], Duration::from_secs(30)).await
}

/// node-a's and node-b's histories, and the harness's (a `trial` line) when a test wrote one.
fn history_files(d: &Deployment) -> Vec<PathBuf> {
    ["node-a", "node-b", "harness"]
        .iter()
        .map(|id| d.dir().join(format!("{id}.jsonl")))
        .filter(|p| p.exists())
        .collect()
}

/// `nats-roles history check` over the deployment's histories: clean, with `runs` command
/// runs at least.
pub(crate) async fn check_histories(d: &Deployment, runs: usize) {
    let out = history_check(d).await;
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("CLEAN"), "{}", out.text());
    let counted: usize = history_files(d)
        .iter()
        .map(|f| records(f, "child_start").len())
        .sum();
    assert!(
        counted >= runs,
        "{counted} command runs recorded\n{}",
        out.text()
    );
}

/// The child stopped by a graceful hand-over: it gets SIGTERM and exits, its grandchild is
/// killed with its group, and the next holder's child starts only after; the environment and
/// the prefixed output are right.
#[tokio::test]
async fn a_graceful_stop_ends_the_child_and_its_grandchildren_before_the_next_holder_starts() {
    let server = NatsServer::start().await;
    let mut d = deployment(&server, "exec-graceful", "graceful", "");
    let a = d.start("node-a").await;
    wait_for(&d, Duration::from_secs(10), "node-a promoted", || {
        promoted(&d, a)
    })
    .await;
    let b = d.start("node-b").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-a's child started",
        || {
            log_lines(&d)
                .iter()
                .any(|l| l.starts_with("grandchild node-a"))
        },
    )
    .await;
    let (child, grandchild) = pids_of(&d, "node-a");
    let start = log_lines(&d)
        .into_iter()
        .find(|l| l.starts_with("start node-a"))
        .expect("start line");
    let fields: Vec<&str> = start.split_whitespace().collect();
    let term: u64 = fields[2].parse().expect("a term number");
    assert!(term > 0, "{start}");
    assert!(
        fields[4].parse::<usize>().expect("token length") > 20,
        "{start}"
    );
    let deadline_ms: u128 = fields[5].parse().expect("deadline ms");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    assert!(
        deadline_ms + 10_000 > now_ms && deadline_ms < now_ms + 10_000,
        "{start}"
    );
    assert_eq!(fields[6], "bar", "exec.env reaches the child: {start}");
    wait_for(
        &d,
        Duration::from_secs(5),
        "the child's output, prefixed",
        || {
            d.instances[a]
                .stdout()
                .iter()
                .any(|l| l == "[worker] running as node-a")
        },
    )
    .await;
    assert!(!promoted(&d, b));

    d.terminate(a);
    let status = d.wait_exit(a, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}\n{}", d.report());
    assert!(
        !alive(child) && !alive(grandchild),
        "{child} or {grandchild} still alive"
    );
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-b's child started",
        || log_lines(&d).iter().any(|l| l.starts_with("start node-b")),
    )
    .await;
    let lines = log_lines(&d);
    let pos = |p: &str| lines.iter().position(|l| l.starts_with(p));
    assert!(
        pos("term node-a") < pos("start node-b"),
        "node-a's child ended before node-b's started: {lines:?}"
    );
    d.terminate(b);
    d.wait_exit(b, Duration::from_secs(10)).await;
    check_histories(&d, 2).await;
}

/// A stopped manager cannot stop its child: the watchdog kills the child's group at the
/// holder's deadline, before the other instance is promoted. The child ignores SIGTERM.
#[tokio::test]
async fn a_stopped_manager_s_child_is_killed_before_the_other_instance_is_promoted() {
    let server = NatsServer::start().await;
    let mut d = deployment(&server, "exec-sigstop", "ignore", "");
    let a = d.start("node-a").await;
    wait_for(&d, Duration::from_secs(10), "node-a promoted", || {
        promoted(&d, a)
    })
    .await;
    let b = d.start("node-b").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-a's child started",
        || {
            log_lines(&d)
                .iter()
                .any(|l| l.starts_with("grandchild node-a"))
        },
    )
    .await;
    let (child, grandchild) = pids_of(&d, "node-a");
    signal(d.instances[a].pid(), SIGSTOP);
    let stopped = Instant::now();
    wait_for(&d, Duration::from_secs(15), "node-b promoted", || {
        promoted(&d, b)
    })
    .await;
    // The moment node-b printed its promotion, node-a's child and grandchild were gone.
    assert!(
        !alive(child),
        "node-a's child {child} alive after node-b's promotion"
    );
    assert!(
        !alive(grandchild),
        "grandchild {grandchild} alive after node-b's promotion"
    );
    assert!(
        stopped.elapsed() >= Duration::from_secs(1),
        "promoted too early"
    );
    // The history says so on one clock: node-a's child stopped (killed at the deadline)
    // before node-b's promotion.
    let a_file = d.dir().join("node-a.jsonl");
    let b_file = d.dir().join("node-b.jsonl");
    let child_stop = records(&a_file, "child_stop");
    let (stop_t, stop) = child_stop.last().expect("a child_stop record of node-a");
    assert_eq!(stop["killed"], "deadline", "{stop}");
    wait_for(
        &d,
        Duration::from_secs(5),
        "node-b's promote recorded",
        || !records(&b_file, "promote").is_empty(),
    )
    .await;
    let (promote_t, _) = records(&b_file, "promote")[0].clone();
    assert!(
        *stop_t < promote_t,
        "node-a's child stopped {} ms after node-b's promotion",
        (*stop_t - promote_t) / 1_000_000
    );
    signal(d.instances[a].pid(), SIGCONT);
    d.terminate(a);
    d.wait_exit(a, Duration::from_secs(10)).await;
    d.terminate(b);
    d.wait_exit(b, Duration::from_secs(10)).await;
    check_histories(&d, 2).await;
}

/// A killed manager (SIGKILL), restarted at once with the same instance id (what a supervisor
/// does): restart adoption promotes the new process at once, so the old watchdog kills its
/// child's whole group the moment its manager is gone (`killed: manager_gone`, not a graceful
/// stop that a child ignoring SIGTERM would stretch to `stop_timeout`), and the new child
/// starts only after the old group is gone (the role lock, Q12 rule 8): the histories of both
/// processes show no overlap.
#[tokio::test]
async fn a_killed_manager_s_child_is_killed_at_once_and_its_restart_never_overlaps_it() {
    let server = NatsServer::start().await;
    let mut d = deployment(
        &server,
        "exec-sigkill",
        "ignore",
        "      stop_timeout: 3s
",
    );
    let a = d.start("node-a").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-a's child started",
        || {
            log_lines(&d)
                .iter()
                .any(|l| l.starts_with("grandchild node-a"))
        },
    )
    .await;
    let (child, grandchild) = pids_of(&d, "node-a");
    let killed = Instant::now();
    signal(d.instances[a].pid(), SIGKILL);
    // Restarted at once.
    let again = d.start("node-a").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(child) || alive(grandchild) {
        assert!(
            Instant::now() < deadline,
            "the child outlived its manager by 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "the child ignoring SIGTERM died {took:?} after its manager (not at once)"
    );
    let stop = records(&d.dir().join("node-a.jsonl"), "child_stop");
    assert_eq!(
        stop.first().map(|(_, v)| v["killed"].clone()),
        Some("manager_gone".into())
    );
    wait_for(
        &d,
        Duration::from_secs(10),
        "the restarted node-a's child runs",
        || {
            log_lines(&d)
                .iter()
                .filter(|l| l.starts_with("start node-a"))
                .count()
                >= 2
        },
    )
    .await;
    d.terminate(again);
    d.wait_exit(again, Duration::from_secs(10)).await;
    check_histories(&d, 2).await;
}

/// The role lock `run` uses for `role` of `instance` in `bucket` (Q12 rule 8): the same
/// directory rule as the binary's.
fn role_lock(bucket: &str, instance: &str, role: &str) -> PathBuf {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("nats-roles"),
        None => {
            // SAFETY: getuid has no failure mode.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("nats-roles-{uid}"))
        }
    };
    std::fs::create_dir_all(&dir).expect("lock dir");
    dir.join(format!("{bucket}.{instance}.{role}.lock"))
}

/// A process of an instance started while a command of an earlier process of the same
/// instance still runs (its group holds the role lock: a supervisor restarted the manager the
/// moment it was killed, and its watchdog has not killed the group yet) begins no term before
/// the lock is free: restart adoption would otherwise promote it while the old command acts
/// (S4 in the histories; seen under load in
/// `a_killed_manager_s_child_is_killed_at_once_and_its_restart_never_overlaps_it`). The lock is
/// held here for 4 s by `flock`, longer than the new bucket's hold (2.5 s) after which the
/// process would otherwise be promoted.
#[tokio::test]
async fn a_start_begins_no_term_while_an_earlier_command_of_its_instance_holds_the_role_lock() {
    let server = NatsServer::start().await;
    let mut d = deployment(&server, "exec-lockwait", "ignore", "");
    let lock = role_lock("exec-lockwait", "node-a", "worker");
    let mut holder = std::process::Command::new("flock")
        .arg("-x")
        .arg(&lock)
        .args(["sleep", "4"])
        .spawn()
        .expect("flock (util-linux) must be installed");
    // Until flock holds it (a second flock -n fails while it does).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let free = std::process::Command::new("flock")
            .args(["-n", "-x"])
            .arg(&lock)
            .arg("true")
            .status()
            .expect("flock -n");
        if !free.success() {
            break;
        }
        assert!(Instant::now() < deadline, "flock never took the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let locked_at = mono_now_ns();
    let a = d.start("node-a").await;
    wait_for(&d, Duration::from_secs(20), "node-a promoted", || {
        promoted(&d, a)
    })
    .await;
    let status = holder.wait().expect("flock ends");
    assert!(status.success(), "{status}");
    let history = d.dir().join("node-a.jsonl");
    let (promote_t, _) = records(&history, "promote")
        .first()
        .cloned()
        .expect("node-a's promote record");
    assert!(
        promote_t >= locked_at + 3_900_000_000,
        "node-a was promoted {} ms after the earlier command's lock was taken (held 4 s)",
        (promote_t - locked_at) / 1_000_000
    );
    assert!(
        d.instances[a]
            .stderr()
            .contains("waited for the command of an earlier process of this instance to end"),
        "{}",
        d.instances[a].stderr()
    );
    d.terminate(a);
    d.wait_exit(a, Duration::from_secs(10)).await;
    check_histories(&d, 1).await;
}

/// `on_exit: restart` starts the child again with a backoff and keeps the role;
/// `on_exit: release` hands the role over when the child exits. A command that cannot be
/// started at run time (removed after validation) releases only its role.
#[tokio::test]
async fn restart_and_release_policies_and_a_command_that_cannot_start() {
    let server = NatsServer::start().await;
    // restart: node-a's child exits 3 at once, again and again; the role stays with node-a.
    let mut d = deployment(
        &server,
        "exec-restart",
        "exit",
        "      on_exit: restart\n      restart_backoff: 100ms\n",
    );
    let a = d.start("node-a").await;
    // node-a first (a new bucket holds acquires for a TTL + heartbeat: two instances started
    // together would both be candidates then).
    wait_for(&d, Duration::from_secs(10), "node-a promoted", || {
        promoted(&d, a)
    })
    .await;
    let b = d.start("node-b").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "three runs of node-a's child",
        || {
            log_lines(&d)
                .iter()
                .filter(|l| l.starts_with("start node-a"))
                .count()
                >= 3
        },
    )
    .await;
    let terms: std::collections::BTreeSet<String> = log_lines(&d)
        .iter()
        .filter(|l| l.starts_with("start node-a"))
        .map(|l| l.split_whitespace().nth(2).unwrap_or("").to_owned())
        .collect();
    assert_eq!(terms.len(), 1, "restarted within one term: {terms:?}");
    assert!(!promoted(&d, b), "node-b must not get the role");
    // The metrics count the runs by outcome and the restarts.
    let (code, metrics) = testkit::http::request(d.instances[a].port, "GET", "/metrics", &[], "")
        .await
        .expect("GET /metrics");
    assert_eq!(code, 200, "{metrics}");
    let sample = |name: &str, needle: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && l.contains(needle) && l.contains("role=\"worker\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        sample("nats_roles_exec_runs_total{", "outcome=\"exit_error\"") >= 2.0,
        "{metrics}"
    );
    assert!(
        sample("nats_roles_exec_restarts_total{", "") >= 2.0,
        "{metrics}"
    );
    assert_eq!(
        sample("nats_roles_exec_runs_total{", "outcome=\"killed_deadline\""),
        0.0,
        "{metrics}"
    );
    d.terminate(a);
    d.terminate(b);
    d.wait_exit(a, Duration::from_secs(10)).await;
    d.wait_exit(b, Duration::from_secs(10)).await;

    // release: node-a's child exits 3; node-a releases the role and node-b runs its child.
    let mut d = deployment(&server, "exec-release", "exit", "");
    let a = d.start("node-a").await;
    wait_for(&d, Duration::from_secs(10), "node-a promoted", || {
        promoted(&d, a)
    })
    .await;
    let b = d.start("node-b").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-b's child started",
        || log_lines(&d).iter().any(|l| l.starts_with("start node-b")),
    )
    .await;
    assert!(
        d.instances[a]
            .stdout()
            .iter()
            .any(|l| l.starts_with("demoted role=worker") && l.contains("reason=released")),
        "{}",
        d.report()
    );
    d.terminate(a);
    d.terminate(b);
    d.wait_exit(a, Duration::from_secs(10)).await;
    d.wait_exit(b, Duration::from_secs(10)).await;
    check_histories(&d, 2).await;

    // A command removed after start: that role is released with an error, the other runs on.
    let mut d = Deployment::new(&server.url(), "exec-missing", &[], "");
    let dir = d.dir().to_path_buf();
    let gone = dir.join("gone.sh");
    std::fs::write(&gone, "#!/bin/sh\nsleep 1000\n").expect("write");
    make_executable(&gone);
    let yaml = format!(
        "bucket:\n  name: exec-missing\n  replicas: 1\n  auto_create: true\n\
         roles:\n  - name: bad\n    exec:\n      command: [{gone}]\n      on_exit: restart\n      \
         restart_backoff: 100ms\n  - name: good\n    exec:\n      command: [sh, -c, 'echo up; sleep 1000']\n",
        gone = gone.display()
    );
    std::fs::write(&d.config, yaml).expect("write config");
    let a = d.start("node-a").await;
    let bad_child = format!("^/bin/sh {}", gone.display());
    wait_for(
        &d,
        Duration::from_secs(10),
        "both roles held, both children running",
        || {
            let out = d.instances[a].stdout();
            out.iter().any(|l| l.starts_with("promoted role=bad"))
            && out.iter().any(|l| l == "[good] up")
            // The bad role's child runs (its start follows the promotion by a process spawn).
            && std::process::Command::new("pgrep")
                .args(["-f", &bad_child])
                .stdout(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        },
    )
    .await;
    std::fs::remove_file(&gone).expect("remove the command");
    // Make the running child exit: the restart cannot find the program.
    let watchdogs = std::process::Command::new("pkill")
        .args(["-TERM", "-f", &bad_child])
        .status()
        .expect("pkill");
    assert!(watchdogs.success(), "the bad role's child was running");
    wait_for(&d, Duration::from_secs(10), "the bad role released", || {
        d.instances[a]
            .stdout()
            .iter()
            .any(|l| l.starts_with("demoted role=bad") && l.contains("reason=released"))
    })
    .await;
    assert!(
        d.instances[a]
            .stderr()
            .contains("cannot start the role's command"),
        "{}",
        d.report()
    );
    assert!(
        !d.instances[a]
            .stdout()
            .iter()
            .any(|l| l.starts_with("demoted role=good")),
        "{}",
        d.report()
    );
    d.terminate(a);
    d.wait_exit(a, Duration::from_secs(10)).await;
}

/// Hooks and the child run in order across a hand-over: node-a's promote hook, child, demote
/// hook, then node-b's promote hook and child.
#[tokio::test]
async fn hooks_run_in_order_around_the_child_across_a_hand_over() {
    let server = NatsServer::start().await;
    let hook = |event: &str| {
        format!(
            "    {event}:\n      command: [sh, -c, 'echo \"{event} $NATS_ROLES_INSTANCE $NATS_ROLES_TERM $NATS_ROLES_REASON\" >> \"$0\"', LOGFILE]\n      timeout: 5s\n"
        )
    };
    let mut d = deployment(&server, "exec-hooks", "graceful", "");
    let log = d.dir().join("events.log");
    let mut yaml = std::fs::read_to_string(&d.config).expect("config");
    for event in ["on_promote", "on_demote"] {
        yaml.push_str(&hook(event).replace("LOGFILE", &log.display().to_string()));
    }
    std::fs::write(&d.config, yaml).expect("write config");
    let a = d.start("node-a").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-a's child started",
        || {
            log_lines(&d)
                .iter()
                .any(|l| l.starts_with("grandchild node-a"))
        },
    )
    .await;
    let b = d.start("node-b").await;
    d.terminate(a);
    d.wait_exit(a, Duration::from_secs(10)).await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-b's child started",
        || {
            log_lines(&d)
                .iter()
                .any(|l| l.starts_with("grandchild node-b"))
        },
    )
    .await;
    d.terminate(b);
    d.wait_exit(b, Duration::from_secs(10)).await;
    let kinds: Vec<String> = log_lines(&d)
        .iter()
        .map(|l| {
            let mut w = l.split_whitespace();
            format!("{} {}", w.next().unwrap_or(""), w.next().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "on_promote node-a",
            "start node-a",
            "grandchild node-a",
            "term node-a",
            "on_demote node-a",
            "on_promote node-b",
            "start node-b",
            "grandchild node-b",
            "term node-b",
            "on_demote node-b",
        ],
        "{:?}",
        log_lines(&d)
    );
    assert!(
        log_lines(&d)
            .iter()
            .any(|l| l.starts_with("on_demote node-a") && l.ends_with("shutdown")),
        "the demote hook gets the reason: {:?}",
        log_lines(&d)
    );
    check_histories(&d, 2).await;
}

/// Warm hand-over: when placement moves a role to a joining instance, the receiver's
/// `on_prepare` hook runs (and ends) before the holder stops its child, and the receiver's
/// child starts after.
#[tokio::test]
async fn a_voluntary_move_runs_the_receiver_s_prepare_hook_before_the_holder_stops_its_child() {
    let server = NatsServer::start().await;
    let mut d = Deployment::new(&server.url(), "exec-prepare", &[], "");
    let dir = d.dir().to_path_buf();
    let script = dir.join("child.sh");
    std::fs::write(&script, CHILD).expect("write child script");
    make_executable(&script);
    let log = dir.join("events.log");
    let mut yaml = String::from(
        "bucket:\n  name: exec-prepare\n  replicas: 1\n  auto_create: true\n\
         timing:\n  ttl: 2s\n  heartbeat: 500ms\n\
         placement:\n  enabled: true\n  stability_window: 500ms\n  claim_grace: 300ms\n  \
         move_interval: 200ms\n\
         roles:\n",
    );
    for role in ["w1", "w2"] {
        yaml.push_str(&format!(
            "  - name: {role}\n    exec:\n      command: [{script}]\n      \
             env: {{LOG: {log}, MODE: graceful, FOO: bar}}\n    on_prepare:\n      \
             command: [sh, -c, 'sleep 0.3; echo \"on_prepare $NATS_ROLES_INSTANCE $NATS_ROLES_ROLE\" >> \"$0\"', {log}]\n",
            script = script.display(),
            log = log.display()
        ));
    }
    std::fs::write(&d.config, yaml).expect("write config");
    let a = d.start("node-a").await;
    wait_for(
        &d,
        Duration::from_secs(10),
        "node-a runs both children",
        || {
            log_lines(&d)
                .iter()
                .filter(|l| l.starts_with("grandchild node-a"))
                .count()
                == 2
        },
    )
    .await;
    let b = d.start("node-b").await;
    wait_for(
        &d,
        Duration::from_secs(15),
        "node-b's child started",
        || log_lines(&d).iter().any(|l| l.starts_with("start node-b")),
    )
    .await;
    let lines = log_lines(&d);
    let moved = lines
        .iter()
        .find(|l| l.starts_with("start node-b"))
        .and_then(|l| l.split_whitespace().nth(7))
        .expect("the moved role")
        .to_owned();
    let pos = |p: String| {
        lines
            .iter()
            .position(|l| *l == p || l.starts_with(&format!("{p} ")))
            .unwrap_or_else(|| panic!("no {p:?} in {lines:?}"))
    };
    let prepared = pos(format!("on_prepare node-b {moved}"));
    let stopped = pos(format!("term node-a {moved}"));
    let started = lines
        .iter()
        .position(|l| l.starts_with("start node-b") && l.ends_with(&format!(" {moved}")))
        .expect("node-b's start");
    assert!(
        prepared < stopped && stopped < started,
        "prepare on node-b, then node-a's child stops, then node-b's starts: {lines:?}"
    );
    d.terminate(a);
    d.terminate(b);
    d.wait_exit(a, Duration::from_secs(10)).await;
    d.wait_exit(b, Duration::from_secs(10)).await;
}
