//! What a container runtime and the kubelet do, done with the tools of this machine (as root; no
//! container can run here, there is no cgroup access): a root file system, a PID namespace whose
//! first process is the container's (with its own `/proc`), `chroot` into that file system as the
//! image's user, and a network namespace of its own (only loopback) for a test that binds the
//! ports the manifests name. Tools that are missing fail the test loudly, with how to install them.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Fails the test unless it runs as root (namespaces, `chroot`, device nodes need it).
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{what} needs root (namespaces, chroot): run the suite as root, as CI does"
    );
}

/// The path of the program `name` on `PATH` (also `/usr/sbin` and `/sbin`); fails the test with
/// `hint` when it is missing.
pub fn require_tool(name: &str, hint: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is missing: {hint}"))
}

/// Runs `cmd` to its end; its stdout, or a failure with everything it printed.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{stdout}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `deploy/container/make-rootfs.sh BINARY DEST`: the image's file system, made by the script
/// the Containerfile's `rootfs` stage runs.
pub fn make_rootfs(binary: &Path, dest: &Path) {
    let script = testkit::repo_root().join("deploy/container/make-rootfs.sh");
    run_ok(Command::new("bash").arg(script).arg(binary).arg(dest));
}

/// Adds what a container runtime provides to a root file system: the `/proc` mount point and
/// the device nodes `/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`.
pub fn add_runtime_mounts(root: &Path) {
    std::fs::create_dir_all(root.join("proc")).unwrap_or_else(|e| panic!("mkdir /proc: {e}"));
    std::fs::create_dir_all(root.join("dev")).unwrap_or_else(|e| panic!("mkdir /dev: {e}"));
    for (name, minor) in [("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)] {
        let path = root.join("dev").join(name);
        if path.exists() {
            continue;
        }
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // SAFETY: mknod reads the NUL-terminated path and two integers.
        let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, minor)) };
        assert_eq!(
            rc,
            0,
            "mknod {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
        // mknod applies the umask: set the mode the runtime gives these nodes.
        // SAFETY: chmod reads the NUL-terminated path and the mode.
        let rc = unsafe { libc::chmod(c.as_ptr(), 0o666) };
        assert_eq!(
            rc,
            0,
            "chmod {}: {}",
            path.display(),
            io::Error::last_os_error()
        );
    }
}

/// One container: its root file system, user, environment and command line (entrypoint and
/// arguments, resolved through the `PATH` of `env` inside the root, as a runtime does).
pub struct Container {
    /// The root file system (with [`add_runtime_mounts`]).
    pub root: PathBuf,
    /// `uid:gid` it runs as.
    pub user: (u32, u32),
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Entrypoint and arguments.
    pub argv: Vec<String>,
}

impl Container {
    /// The command that runs it: `unshare --pid --fork --kill-child --mount-proc=ROOT/proc
    /// chroot --userspec=UID:GID ROOT ARGV…` with exactly [`env`](Self::env). Its first process
    /// (PID 1 in its namespace, as in a container) is the entrypoint; [`init_pid`] finds its pid
    /// from the launcher's. Killing the launcher kills the container.
    pub fn command(&self) -> tokio::process::Command {
        let unshare = require_tool("unshare", "install util-linux");
        let chroot = require_tool("chroot", "install coreutils");
        let mut cmd = testkit::cli::command(unshare);
        cmd.env_clear()
            .arg("--pid")
            .arg("--fork")
            .arg("--kill-child")
            .arg(format!("--mount-proc={}", self.root.join("proc").display()))
            .arg(chroot)
            .arg(format!("--userspec={}:{}", self.user.0, self.user.1))
            .arg(&self.root)
            .args(&self.argv)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs it to its end (at most `limit`): exit code, stdout, stderr.
    pub async fn run(&self, limit: std::time::Duration) -> testkit::cli::CliOutput {
        let started = std::time::Instant::now();
        let out = tokio::time::timeout(limit, self.command().output())
            .await
            .unwrap_or_else(|_| panic!("{:?} did not finish within {limit:?}", self.argv))
            .unwrap_or_else(|e| panic!("run {:?}: {e}", self.argv));
        testkit::cli::CliOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took: started.elapsed(),
        }
    }
}

/// The host pid of the first process of the container that the launcher `launcher` (a
/// [`Container::command`]) started: the launcher's one child.
pub async fn init_pid(launcher: u32) -> u32 {
    testkit::eventually(
        "the container's first process exists",
        std::time::Duration::from_secs(10),
        || async move { testkit::process::tree(launcher).get(1).copied() },
    )
    .await
}

/// Runs `body` on a thread of its own, moved into a new network namespace that has only the
/// loopback interface (up), with a tokio runtime of its own: every server and process it starts,
/// and every connection it makes, lives in that namespace, as a pod's do. A port the manifests
/// name (8080) is then bound exactly as in the pod, without meeting anything else on this
/// machine. A panic in `body` fails the test.
pub fn in_own_network<F, Fut>(body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    require_root("a network namespace of its own");
    let thread = std::thread::spawn(move || {
        // SAFETY: unshare with one flag; it moves only the calling thread (and the threads and
        // processes it starts from now on) into a new network namespace.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET): {}",
            io::Error::last_os_error()
        );
        loopback_up();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
        runtime.block_on(body());
    });
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

/// Sets the flag `IFF_UP` of `lo` in the calling thread's network namespace.
fn loopback_up() {
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: ioctl on our socket with a valid ifreq for both requests.
    unsafe {
        assert_eq!(
            libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr),
            0,
            "SIOCGIFFLAGS lo: {}",
            io::Error::last_os_error()
        );
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        assert_eq!(
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr),
            0,
            "SIOCSIFFLAGS lo: {}",
            io::Error::last_os_error()
        );
        libc::close(fd);
    }
}
