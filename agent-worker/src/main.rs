//! `agent-worker` binary: parses the command line, starts the runtime, runs the command
//! (`agent_worker::cli`).

use std::process::ExitCode;

use agent_worker::cli::{self, config::Cli};

fn main() -> ExitCode {
    // Before anything of livekit-api (see `agent_worker::install_jwt_crypto`).
    agent_worker::install_jwt_crypto();
    let cli = Cli::parse_args();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agent-worker: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::run(cli))
}
