//! The `nats-roles` command: run a role manager from a YAML file (with its HTTP dashboard and
//! API), check a file, and the operator commands `status`, `watch`, `evict` and `history`.
//! Everything lives in the library's `cli` module (cargo feature `cli`, on by default).

fn main() -> std::process::ExitCode {
    nats_roles::cli::main()
}
