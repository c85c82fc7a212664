//! How the durable backends pack events: a chunk is consecutive events of one stream, their
//! SSE frames concatenated, each after its length (4 bytes, little-endian). SQLite keeps a
//! chunk per row, Redis per stream entry. Appends committed together share a chunk per
//! stream, up to [`MAX_EVENTS`] events or [`MAX_BYTES`] bytes, so a commit costs the backend
//! one row or entry per stream rather than one per event, and a read hands out many frames
//! as slices of one buffer.
//!
//! This module owns the encoding only; which events go into which chunk, and what a chunk
//! means for retention, is each backend's.

use bytes::Bytes;

/// Most events in one chunk: about what the SSE writer reads at once, so a read seldom
/// fetches much more than it hands out.
pub(super) const MAX_EVENTS: usize = 256;

/// Most frame bytes in one chunk (a larger frame gets a chunk of its own).
pub(super) const MAX_BYTES: usize = 64 * 1024;

/// Bytes before each frame: its length.
const LENGTH_BYTES: usize = 4;

/// A chunk's bytes do not decode into frames: the file was changed by something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a stored chunk of events is malformed")
    }
}

/// Appends `frame` to the chunk being built in `chunk`.
pub(super) fn push(chunk: &mut Vec<u8>, frame: &[u8]) {
    // A frame is at most a session's byte cap, far below 4 GiB; saturating keeps a
    // pathological one from wrapping into a valid-looking length.
    let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    chunk.extend_from_slice(&len.to_le_bytes());
    chunk.extend_from_slice(frame);
}

/// The bytes `frame` takes in a chunk.
pub(super) fn encoded_len(frame: &[u8]) -> usize {
    LENGTH_BYTES + frame.len()
}

/// The frames of `chunk` in order, each a slice of it (no copy).
pub(super) fn frames(chunk: Bytes) -> Frames {
    Frames { chunk, at: 0 }
}

/// Iterator over a chunk's frames; yields one [`Malformed`] and stops at a bad length.
pub(super) struct Frames {
    chunk: Bytes,
    at: usize,
}

impl Iterator for Frames {
    type Item = Result<Bytes, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.chunk.len() {
            return None;
        }
        let start = self.at + LENGTH_BYTES;
        let len = self
            .chunk
            .get(self.at..start)
            .and_then(|bytes| <[u8; LENGTH_BYTES]>::try_from(bytes).ok())
            .map(|bytes| u32::from_le_bytes(bytes) as usize);
        let end = len.and_then(|len| start.checked_add(len));
        match end {
            Some(end) if end <= self.chunk.len() => {
                self.at = end;
                Some(Ok(self.chunk.slice(start..end)))
            }
            _ => {
                self.at = self.chunk.len();
                Some(Err(Malformed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_in_order_and_unchanged() {
        let sent: Vec<&[u8]> = vec![b"id: a:0\ndata:\n\n", b"", b"event: message\ndata: {}\n\n"];
        let mut chunk = Vec::new();
        for frame in &sent {
            push(&mut chunk, frame);
        }
        assert_eq!(
            chunk.len(),
            sent.iter().map(|f| encoded_len(f)).sum::<usize>()
        );
        let got: Vec<Bytes> = frames(Bytes::from(chunk))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got, sent);
    }

    #[test]
    fn a_truncated_chunk_is_malformed_after_its_whole_frames() {
        let mut chunk = Vec::new();
        push(&mut chunk, b"first");
        push(&mut chunk, b"second");
        chunk.truncate(chunk.len() - 1);
        let got: Vec<_> = frames(Bytes::from(chunk)).collect();
        assert_eq!(got, vec![Ok(Bytes::from_static(b"first")), Err(Malformed)]);
        let short: Vec<_> = frames(Bytes::from_static(&[1, 0])).collect();
        assert_eq!(short, vec![Err(Malformed)]);
    }
}
