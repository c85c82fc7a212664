//! How the durable backends pack events: a chunk is consecutive events of one stream, their
//! SSE frames concatenated, each after its length (4 bytes, little-endian). SQLite keeps a
//! chunk per row, Redis per stream entry. Appends committed together share a chunk per
//! stream, up to [`MAX_EVENTS`] events or [`MAX_BYTES`] bytes, so a commit costs the backend
//! one row or entry per stream rather than one per event, and a read hands out many frames
//! as slices of one buffer.
//!
//! A backend may also keep a chunk packed ([`pack`], [`unpack`]): LZ4 of its bytes. Frames of
//! one stream repeat themselves (the same SSE field names and stream id, the same JSON keys,
//! consecutive seqs), so a packed chunk of progress notifications is under a tenth of its
//! frames' bytes, and a backend whose cost grows with the bytes it writes (SQLite writes each
//! byte to the WAL and again to the file) writes that much less.
//!
//! This module owns the encoding only; which events go into which chunk, and what a chunk
//! means for retention, is each backend's.

// `encoded_len` is the Redis commit loop's; the rest both backends use.
#![cfg_attr(not(all(feature = "sqlite", feature = "redis")), allow(dead_code))]

use std::ops::Range;

use bytes::Bytes;
use tether_proto::ids::StreamId;

use super::map::FastMap;

/// Most events in one chunk: about what the SSE writer reads at once, so a read seldom
/// fetches much more than it hands out.
pub(super) const MAX_EVENTS: usize = 256;

/// Most frame bytes in one chunk (a larger frame gets a chunk of its own).
pub(super) const MAX_BYTES: usize = 64 * 1024;

/// Bytes before each frame: its length.
const LENGTH_BYTES: usize = 4;

/// How a stored chunk's bytes are packed; its [`Packing::code`] is what a backend stores
/// beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Packing {
    /// The chunk as [`push`] built it.
    Plain,
    /// The chunk's length (4 bytes, little-endian), then its bytes in LZ4's block format.
    Lz4,
}

impl Packing {
    /// The number a backend stores for this packing (0 is plain, so rows written before
    /// packing existed read as what they are).
    pub(super) fn code(self) -> i64 {
        match self {
            Self::Plain => 0,
            Self::Lz4 => 1,
        }
    }

    /// The packing stored as `code`; an unknown code is [`Malformed`] (a file written by a
    /// newer version, or changed by something else).
    pub(super) fn from_code(code: i64) -> Result<Self, Malformed> {
        match code {
            0 => Ok(Self::Plain),
            1 => Ok(Self::Lz4),
            _ => Err(Malformed),
        }
    }
}

/// Chunks shorter than this are stored plain: a chunk of one or two events (a round trip's
/// answer) gains a few bytes at most from LZ4, not worth the work of packing and unpacking.
pub(super) const PACK_FROM_BYTES: usize = 512;

/// LZ4's best ratio: one byte of a block never stands for more than this many (a match token
/// with maximal length bytes). A packed chunk claiming more is malformed, so a damaged length
/// cannot make [`unpack`] allocate more than the stored bytes can hold.
const LZ4_MAX_RATIO: usize = 255;

/// Packs the chunk `plain` using `out` as scratch (a buffer kept between calls, so it only
/// grows) and returns how, with the bytes to store: a prefix of `out` when LZ4 made the chunk
/// smaller, else `plain` itself.
pub(super) fn pack<'a>(plain: &'a [u8], out: &'a mut Vec<u8>) -> (Packing, &'a [u8]) {
    let Ok(len) = u32::try_from(plain.len()) else {
        return (Packing::Plain, plain);
    };
    if plain.len() < PACK_FROM_BYTES {
        return (Packing::Plain, plain);
    }
    // Grown (and zeroed) only when a larger chunk needs it, not cleared and zeroed per chunk.
    let room = LENGTH_BYTES + lz4_flex::block::get_maximum_output_size(plain.len());
    if out.len() < room {
        out.resize(room, 0);
    }
    out[..LENGTH_BYTES].copy_from_slice(&len.to_le_bytes());
    match lz4_flex::block::compress_into(plain, &mut out[LENGTH_BYTES..room]) {
        Ok(packed) if LENGTH_BYTES + packed < plain.len() => {
            (Packing::Lz4, &out[..LENGTH_BYTES + packed])
        }
        // Incompressible (or an encoder error, which a buffer of the maximum size rules
        // out): the chunk as it is.
        _ => (Packing::Plain, plain),
    }
}

/// The chunk stored as `stored` with `packing`, ready for [`frames`].
pub(super) fn unpack(packing: Packing, stored: &[u8]) -> Result<Bytes, Malformed> {
    match packing {
        Packing::Plain => Ok(Bytes::copy_from_slice(stored)),
        Packing::Lz4 => {
            let (len, block) = stored.split_at_checked(LENGTH_BYTES).ok_or(Malformed)?;
            let len = u32::from_le_bytes(len.try_into().map_err(|_| Malformed)?) as usize;
            if len > block.len().saturating_mul(LZ4_MAX_RATIO) {
                return Err(Malformed);
            }
            let mut plain = vec![0; len];
            match lz4_flex::block::decompress_into(block, &mut plain) {
                Ok(written) if written == len => Ok(Bytes::from(plain)),
                _ => Err(Malformed),
            }
        }
    }
}

/// A chunk's bytes do not decode into frames: the file was changed by something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a stored chunk of events is malformed")
    }
}

impl std::error::Error for Malformed {}

/// One chunk to write: `items[range]` (after [`cut`]) are consecutive events of `stream`, the
/// first of them seq `first`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cut {
    pub(super) stream: StreamId,
    pub(super) first: u64,
    pub(super) range: Range<usize>,
}

impl Cut {
    /// The seq of the chunk's last event.
    pub(super) fn last(&self) -> u64 {
        self.first + (self.range.len() as u64).saturating_sub(1)
    }
}

/// Orders `items` (events committed together, in the order they were appended) so that each
/// stream's are together and in their order (a stable sort; streams in the order of their
/// first item), then cuts them into chunks: consecutive seqs of one stream, within
/// [`MAX_EVENTS`] and [`MAX_BYTES`]. `key` gives an item's stream, seq and frame length.
pub(super) fn cut<T>(items: &mut [T], key: impl Fn(&T) -> (StreamId, u64, usize)) -> Vec<Cut> {
    let mut rank: FastMap<StreamId, usize> = FastMap::default();
    for item in items.iter() {
        let next = rank.len();
        rank.entry(key(item).0).or_insert(next);
    }
    if rank.len() > 1 {
        items.sort_by_key(|item| rank[&key(item).0]);
    }
    let mut cuts: Vec<Cut> = Vec::new();
    let mut bytes = 0;
    for (at, item) in items.iter().enumerate() {
        let (stream, seq, len) = key(item);
        let fits = cuts.last().is_some_and(|open| {
            open.stream == stream
                && open.last() + 1 == seq
                && open.range.len() < MAX_EVENTS
                && bytes + LENGTH_BYTES + len <= MAX_BYTES
        });
        match cuts.last_mut() {
            Some(open) if fits => open.range.end = at + 1,
            _ => {
                bytes = 0;
                cuts.push(Cut {
                    stream,
                    first: seq,
                    range: at..at + 1,
                });
            }
        }
        bytes += LENGTH_BYTES + len;
    }
    cuts
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
    fn cuts_group_each_stream_in_order_within_the_bounds() {
        let (a, b) = (StreamId::generate(), StreamId::generate());
        // Interleaved as two streams' emitters append; `b` jumps a seq (another writer).
        let mut items: Vec<(StreamId, u64, usize)> =
            vec![(a, 1, 10), (b, 7, 10), (a, 2, 10), (b, 9, 10), (a, 3, 10)];
        let cuts = cut(&mut items, |item| *item);
        assert_eq!(
            items,
            vec![(a, 1, 10), (a, 2, 10), (a, 3, 10), (b, 7, 10), (b, 9, 10)]
        );
        let spans: Vec<(StreamId, u64, u64)> =
            cuts.iter().map(|c| (c.stream, c.first, c.last())).collect();
        assert_eq!(spans, vec![(a, 1, 3), (b, 7, 7), (b, 9, 9)]);

        let mut many: Vec<(StreamId, u64, usize)> =
            (0..MAX_EVENTS as u64 + 1).map(|seq| (a, seq, 1)).collect();
        let lens: Vec<usize> = cut(&mut many, |item| *item)
            .iter()
            .map(|c| c.range.len())
            .collect();
        assert_eq!(lens, vec![MAX_EVENTS, 1], "at most MAX_EVENTS per chunk");

        let half = MAX_BYTES / 2;
        let mut large = vec![(a, 1, half), (a, 2, half), (a, 3, 2 * MAX_BYTES)];
        let lens: Vec<usize> = cut(&mut large, |item| *item)
            .iter()
            .map(|c| c.range.len())
            .collect();
        assert_eq!(
            lens,
            vec![1, 1, 1],
            "within MAX_BYTES, lengths included; a larger frame alone"
        );
    }

    /// Frames as a stream's progress notifications look, for the packing tests.
    fn progress_chunk(events: u64) -> Vec<u8> {
        let stream = StreamId::generate();
        let mut chunk = Vec::new();
        for seq in 0..events {
            let frame = format!(
                "event: message\nid: {stream}:{seq}\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"t\",\"progress\":{},\"total\":100000}}}}\n\n",
                seq + 1
            );
            push(&mut chunk, frame.as_bytes());
        }
        chunk
    }

    #[test]
    fn a_packed_chunk_unpacks_to_the_same_frames_in_a_fraction_of_the_bytes() {
        let plain = progress_chunk(MAX_EVENTS as u64);
        let mut out = Vec::new();
        let (packing, stored) = pack(&plain, &mut out);
        assert_eq!(packing, Packing::Lz4);
        assert!(
            stored.len() * 4 < plain.len(),
            "{} bytes packed to {}",
            plain.len(),
            stored.len()
        );
        let stored = stored.to_vec();
        let unpacked = unpack(Packing::from_code(packing.code()).unwrap(), &stored).unwrap();
        assert_eq!(unpacked, plain);
        // The same scratch buffer, now longer than needed: only its prefix is the chunk.
        let smaller = progress_chunk(64);
        let (packing, stored) = pack(&smaller, &mut out);
        assert_eq!(packing, Packing::Lz4);
        assert_eq!(unpack(packing, stored).unwrap(), smaller);
    }

    #[test]
    fn small_or_incompressible_chunks_stay_plain() {
        let mut out = Vec::new();
        let small = progress_chunk(1);
        assert!(small.len() < PACK_FROM_BYTES);
        assert_eq!(pack(&small, &mut out), (Packing::Plain, &small[..]));
        // Bytes with no repeats to find: LZ4 would only add its tokens.
        let mut noise = vec![0u8; 4096];
        getrandom::fill(&mut noise).unwrap();
        let mut random = Vec::new();
        push(&mut random, &noise);
        assert_eq!(pack(&random, &mut out), (Packing::Plain, &random[..]));
        assert_eq!(unpack(Packing::Plain, &random).unwrap(), random);
    }

    #[test]
    fn a_damaged_packed_chunk_or_unknown_packing_is_malformed() {
        let plain = progress_chunk(64);
        let mut out = Vec::new();
        let (_, stored) = pack(&plain, &mut out);
        let stored = stored.to_vec();
        // Cut short, a length that claims more than the block holds, and no length at all.
        assert_eq!(
            unpack(Packing::Lz4, &stored[..stored.len() - 3]),
            Err(Malformed)
        );
        let mut lying = stored.clone();
        lying[..LENGTH_BYTES].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(unpack(Packing::Lz4, &lying), Err(Malformed));
        let mut longer = stored.clone();
        longer[..LENGTH_BYTES].copy_from_slice(&(plain.len() as u32 + 1).to_le_bytes());
        assert_eq!(unpack(Packing::Lz4, &longer), Err(Malformed));
        assert_eq!(unpack(Packing::Lz4, &[1, 0]), Err(Malformed));
        assert_eq!(Packing::from_code(2), Err(Malformed));
        assert_eq!(Packing::from_code(-1), Err(Malformed));
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
