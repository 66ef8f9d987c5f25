//! `agent-worker`: the agent side's gateway to the relay. This version only reserves the crate
//! and its dependency on the shared wire types; its commands come next.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "agent-worker {}: no commands are available in this version yet",
        env!("CARGO_PKG_VERSION")
    );
    // Reference the shared wire contract so the dependency is real and checked by the compiler.
    debug_assert!(relay_wire::is_tool_name("OpenPopover"));
    ExitCode::from(2)
}
