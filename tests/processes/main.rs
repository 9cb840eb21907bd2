//! Integration tests of the `nats-roles` binary and the examples as real OS processes against
//! real nats-server processes: the election fleet, the operator commands, the HTTP API and
//! dashboard (also in a headless browser), observability and placement. One module per area;
//! one binary, so it links once.

mod cli;
mod conventions;
mod dashboard_browser;
mod dashboard_groups;
mod deploy;
mod election;
mod examples;
mod exec;
mod exec_faults;
mod exec_oneshot;
mod exec_oneshot_wait;
mod exec_prepare;
mod fail_stop;
mod group_attacks;
mod groups;
mod http_processes;
mod member_records;
mod moves;
mod notify_socket;
mod observability;
mod operator_cli;
mod operator_drain;
mod operator_evict;
mod operator_freeze;
mod operator_plan;
mod placement;
mod placement_zones;
mod release;
mod session_clock;
mod sites;
mod slot_attacks;
mod slots;
mod start_retry;
mod successor_attacks;
mod successors;
mod systemd;
mod transition_lines;

/// The binary under test (cargo builds it for integration tests).
pub const BIN: &str = env!("CARGO_BIN_EXE_nats-roles");
