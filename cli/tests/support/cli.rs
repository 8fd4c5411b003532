//! Runs the `kvtier` binary the way a user would, for the tests of its subcommands. Included by
//! path (`#[path = "support/cli.rs"]`) so that those tests do not build the rest of `support`.

use std::process::Command;

/// Runs `kvtier args` in a fresh temporary working directory (so no `./kvtier.toml` is read),
/// without the environment's `KVTIER_L2_ADAPTER`: (exit code, stdout, stderr).
pub fn kvtier(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier"))
        .args(args)
        .current_dir(dir.path())
        .env_remove("KVTIER_L2_ADAPTER")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
