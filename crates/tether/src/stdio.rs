//! JSON-RPC over stdio lines, as MCP's stdio transport frames it: one message per line.
//!
//! Both stdio sides of tether read it the same way: the gateway reading a child's stdout and
//! `tether connect` reading its stdin. This module owns the bounded line reader (a line
//! longer than the limit is refused before it is all in memory) and the parse of one line
//! into a [`Message`]; what to do with a bad line is the caller's.

use tether_proto::jsonrpc::{Batching, Body, Message, ParseError, parse_body};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _};

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line is longer than the limit (its start has been consumed).
    #[error("a line longer than {0} bytes")]
    TooLong(usize),
    /// Reading failed.
    #[error("reading failed")]
    Io(#[from] std::io::Error),
}

/// Reads one line (without its LF) into `line`, which it appends to; `Ok(false)` at the end
/// of input with nothing read.
///
/// # Errors
///
/// [`LineError::TooLong`] once the line exceeds `max` bytes; [`LineError::Io`].
pub async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> Result<bool, LineError> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let (taken, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let end = if done { taken - 1 } else { taken };
        line.extend_from_slice(&available[..end]);
        reader.consume(taken);
        if line.len() > max {
            return Err(LineError::TooLong(max));
        }
        if done {
            return Ok(true);
        }
    }
}

/// The message on one line; `None` for a blank line (skipped, as stdio peers send them).
/// The error is the JSON-RPC parser's, which knows its code and the error response to send
/// (stdio carries no batches).
#[must_use]
pub fn parse_line(line: &[u8]) -> Option<Result<Message, ParseError>> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return None;
    }
    Some(
        parse_body(text, Batching::Forbidden).map(|body| match body {
            Body::Single(message) => message,
            Body::Batch(_) => unreachable!("parse_body refuses batches with Batching::Forbidden"),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, String>> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let mut line = Vec::new();
            match read_line(&mut reader, &mut line, max).await {
                Ok(true) => out.push(Ok(line)),
                Ok(false) => return out,
                Err(error) => {
                    out.push(Err(error.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_on_lf_across_small_reads() {
        let got = lines(b"{\"a\":1}\n{\"b\":22}\nlast", 100).await;
        assert_eq!(
            got,
            vec![
                Ok(b"{\"a\":1}".to_vec()),
                Ok(b"{\"b\":22}".to_vec()),
                Ok(b"last".to_vec())
            ]
        );
    }

    #[tokio::test]
    async fn an_overlong_line_is_an_error_before_it_is_read_whole() {
        let mut input = vec![b'x'; 1000];
        input.push(b'\n');
        let got = lines(&input, 10).await;
        assert_eq!(got, vec![Err("a line longer than 10 bytes".to_owned())]);
    }

    #[test]
    fn blank_lines_are_skipped_and_bad_ones_say_why() {
        assert!(parse_line(b"  \r").is_none());
        let ping = parse_line(br#" {"jsonrpc":"2.0","id":1,"method":"ping"} "#);
        assert!(matches!(ping, Some(Ok(Message::Request(_)))));
        let garbage = parse_line(b"not json")
            .and_then(Result::err)
            .expect("an error");
        assert_eq!(garbage.code(), tether_proto::jsonrpc::PARSE_ERROR);
        let not_a_message = parse_line(br#"{"jsonrpc":"2.0","id":4}"#)
            .and_then(Result::err)
            .expect("an error");
        assert_eq!(not_a_message.code(), tether_proto::jsonrpc::INVALID_REQUEST);
        assert!(matches!(parse_line(b"[]"), Some(Err(_))));
    }
}
