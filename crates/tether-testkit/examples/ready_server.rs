//! A tiny real HTTP server that follows the `tether serve` launch convention, for testing the
//! launcher without `tether serve` itself.
//!
//! `ready_server [--bind ADDR] [--state-file PATH]`: binds ADDR (default `127.0.0.1:0`),
//! prints exactly `tether: serving http://127.0.0.1:PORT/mcp` to stdout, then answers every
//! HTTP request with `200 OK` and the body `pid=<pid> starts=<n>`, where `n` is a start
//! counter kept in the state file (so a test can see that a restart reused the same store).
//! A request for `/noise/N` first writes N lines to stderr: a launcher that stopped draining
//! the pipe would leave that request hanging.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let mut bind = "127.0.0.1:0".to_owned();
    let mut state_file: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = args.next().context("--bind needs an address")?,
            "--state-file" => {
                state_file = Some(args.next().context("--state-file needs a path")?.into());
            }
            other => bail!("unknown argument {other:?}"),
        }
    }

    let starts = match &state_file {
        Some(path) => bump_counter(path)?,
        None => 1,
    };
    let listener = TcpListener::bind(&bind).with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr()?;
    eprintln!("ready_server: pid {} start {starts}", std::process::id());
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "tether: serving http://{addr}/mcp")?;
        stdout.flush()?;
    }

    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || {
            if let Err(e) = answer(conn, starts) {
                eprintln!("ready_server: connection failed: {e}");
            }
        });
    }
    Ok(())
}

/// Reads, increments and writes back the start counter.
fn bump_counter(path: &Path) -> anyhow::Result<u64> {
    let previous = match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().context("state file is not a number")?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).context("reading the state file"),
    };
    let starts = previous + 1;
    std::fs::write(path, format!("{starts}\n")).context("writing the state file")?;
    Ok(starts)
}

fn answer(mut conn: TcpStream, starts: u64) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim_end().is_empty() {
            break;
        }
    }
    let request_line = request_line.trim_end();
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    if let Some(n) = path
        .strip_prefix("/noise/")
        .and_then(|n| n.parse::<u64>().ok())
    {
        let mut stderr = std::io::stderr().lock();
        for i in 0..n {
            writeln!(stderr, "noise {i}")?;
        }
    }
    eprintln!("ready_server: {request_line}");
    let body = format!("pid={} starts={starts}\n", std::process::id());
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}
