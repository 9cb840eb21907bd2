//! `nats-roles completions SHELL` (clap_complete) and `nats-roles man` (clap_mangen): the shell
//! completion scripts and manual pages, generated from the same command definition that parses
//! the arguments, so they cannot fall behind it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::identity::{BIN_NAME, VERSION};
use super::outcome::Failure;

/// `nats-roles completions`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `nats-roles man`.
#[derive(clap::Args, Debug)]
pub(crate) struct ManArgs {
    /// Write one page per command (nats-roles.1, nats-roles-run.1, ...) into DIR instead of
    /// printing nats-roles(1) on stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script of `args.shell` on stdout.
pub(crate) fn completions(args: &CompletionsArgs, cmd: &clap::Command) -> ExitCode {
    let mut out = Vec::new();
    if args.shell == clap_complete::Shell::Bash {
        // clap_complete's bash script completes nothing past a subcommand when the command's
        // name has a hyphen (clap-rs/clap#6421: its loop and its case arms spell the state
        // differently), so it is generated for `nats_roles` and registered for `nats-roles`.
        clap_complete::generate(args.shell, &mut visible(cmd), BASH_NAME, &mut out);
        let script = String::from_utf8_lossy(&out).replace(
            &format!(" -o default {BASH_NAME}\n"),
            &format!(" -o default {}\n", BIN_NAME),
        );
        return print(script.as_bytes());
    }
    clap_complete::generate(args.shell, &mut visible(cmd), BIN_NAME, &mut out);
    print(&out)
}

/// The name the bash script is generated for (see [`completions`]).
const BASH_NAME: &str = "nats_roles";

/// `cmd` without its hidden subcommands (`watchdog`): clap_complete offers hidden subcommands
/// to every shell, so the script is made from a copy of the top level that has only the
/// visible ones.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut copy = clap::Command::new(BIN_NAME)
        .subcommand_required(cmd.is_subcommand_required_set())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = cmd.get_about() {
        copy = copy.about(about.clone());
    }
    if cmd.get_version().is_some() {
        // The top-level `--version` flag is only generated when a version is set.
        copy = copy.version(VERSION);
    }
    copy
}

/// Prints nats-roles(1) on stdout, or writes every page into `--dir`.
pub(crate) fn man(args: &ManArgs, cmd: clap::Command) -> ExitCode {
    match &args.dir {
        Some(dir) => match write_pages(cmd, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => Failure::Runtime(format!("--dir {}: {e}", dir.display())).report(),
        },
        None => {
            let mut out = Vec::new();
            match render_main_page(cmd, &mut out) {
                Ok(()) => print(&out),
                Err(e) => Failure::Runtime(format!("cannot render the man page: {e}")).report(),
            }
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe is not an error worth a message.
fn print(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => Failure::Runtime(format!("cannot write to stdout: {e}")).report(),
    }
}

/// nats-roles(1) and one page per visible subcommand (nats-roles-run(1), …,
/// nats-roles-history-check(1)); the main page with the sections of [`render_main_page`].
fn write_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(cmd.clone(), dir)?;
    let mut page = Vec::new();
    render_main_page(cmd, &mut page)?;
    std::fs::write(dir.join(format!("{}.1", BIN_NAME)), page)
}

/// nats-roles(1): clap_mangen's page (name, synopsis, description, options, commands,
/// version) with exit status, environment, files and see-also before the version.
fn render_main_page(cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.disable_help_subcommand(true)).render(&mut page)?;
    let page = String::from_utf8_lossy(&page);
    let at = page.find(".SH VERSION").unwrap_or(page.len());
    out.write_all(page[..at].as_bytes())?;
    out.write_all(EXTRA_SECTIONS.as_bytes())?;
    out.write_all(page[at..].as_bytes())
}

/// The sections clap does not know of, in roff (`\-` is a minus sign: option dashes).
const EXTRA_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A runtime failure that retrying cannot change: refused credentials, a missing bucket, a
permission the NATS user lacks; for the operator commands and \fBexec\fR also a server that
cannot be reached. \fBexec\fR otherwise exits with its command's status (128 + N when signal N
ended it), and 1 when the role was lost while the command ran.
.TP
\fB2\fR
A usage or configuration error (each problem printed with its field, line and column).
.TP
\fB75\fR
\fBexec\fR: the role was not acquired (\fB\-\-no\-wait\fR and another process holds it, or
\fB\-\-wait\fR expired); the command never ran. \fB\-\-conflict\-exit\-code\fR changes it.
.TP
\fB126\fR, \fB127\fR
\fBexec\fR: the command cannot be run (not executable, not a file) or was not found; it
never ran.
.SH ENVIRONMENT
.TP
\fBNATS_URL\fR, \fBNATS_CREDS\fR, \fBNATS_NKEY\fR, \fBNATS_USER\fR, \fBNATS_PASSWORD\fR, \fBNATS_TOKEN\fR, \fBNATS_CA\fR, \fBNATS_CERT\fR, \fBNATS_KEY\fR
How to reach NATS, as for the nats command-line tool; they override a NATS context and the
configuration file, and flags override them.
.TP
\fBNATS_CONTEXT\fR
The NATS context to use (as \fB\-\-context\fR).
.TP
\fBNATS_ROLES_INSTANCE_ID\fR, \fBNATS_ROLES_BUCKET\fR, \fBNATS_ROLES_VERSION\fR, \fBNATS_ROLES_ADMIN_TOKEN\fR, \fBNATS_ROLES_LOCAL_TOKEN\fR, \fBNATS_ROLES_LOG_FORMAT\fR
Override the configuration file's instance id, bucket, version, HTTP tokens and log format.
.TP
\fBOTEL_EXPORTER_OTLP_ENDPOINT\fR, \fBOTEL_EXPORTER_OTLP_TRACES_ENDPOINT\fR, \fBOTEL_EXPORTER_OTLP_METRICS_ENDPOINT\fR, \fBOTEL_EXPORTER_OTLP_PROTOCOL\fR, \fBOTEL_EXPORTER_OTLP_HEADERS\fR, \fBOTEL_SERVICE_NAME\fR, \fBOTEL_RESOURCE_ATTRIBUTES\fR
OpenTelemetry export of \fBrun\fR: they fill in what the configuration file's \fBtelemetry\fR
section leaves unset.
.TP
\fBRUST_LOG\fR
The log filter (default \fBinfo,async_nats=warn\fR for \fBrun\fR).
.TP
\fBNO_COLOR\fR
When set and not empty, no colour in logs or help; there is none either when the output is
not a terminal.
.SH FILES
.TP
\fI$XDG_CONFIG_HOME/nats/context/NAME.json\fR (default \fI~/.config/nats/context/\fR)
NATS contexts of the nats command-line tool: servers, credentials, TLS files, JetStream
domain or API prefix.
.TP
\fI$XDG_CONFIG_HOME/nats/context.txt\fR
The selected context, used by the operator commands and \fBexec\fR when neither
\fB\-\-context\fR, \fBNATS_CONTEXT\fR nor \fB\-\-config\fR is given.
.SH "SEE ALSO"
\fBnats\fR(1), \fBnats-server\fR(8); docs/configuration.md, docs/operations.md and
docs/observability.md in the nats-roles sources.
"#;
