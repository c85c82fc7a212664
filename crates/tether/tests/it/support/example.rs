//! The repository's examples, run as a user runs them: the binary `cargo test` built beside
//! the test binary, its URL read from its ready line, killed when the test ends.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Example `name`'s binary (`target/<profile>/examples/<name>`).
pub(crate) fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test -p tether --all-features` builds it",
        path.display()
    );
    path
}

/// A running example; killed if the test ends without stopping it, so that a failing test
/// leaves no process behind (nor a pipe that keeps the harness waiting).
pub(crate) struct Example(pub(crate) Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts example `name` with `args` and reads its URL from the ready line
/// (`tether: serving http://HOST:PORT/mcp`).
pub(crate) fn start(name: &str, args: &[&str]) -> (Example, String) {
    let mut child = Command::new(binary(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let stdout = child.stdout.take().expect("stdout");
    let child = Example(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("a ready line");
    let url = line
        .trim()
        .strip_prefix("tether: serving ")
        .unwrap_or_else(|| panic!("unexpected ready line {line:?}"))
        .to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    (child, url)
}
