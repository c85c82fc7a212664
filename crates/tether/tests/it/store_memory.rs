//! The memory backends: the shared behaviour suite, then what only the memory store does
//! (retention on tokio's clock, bounded tombstones, pre-encoded frames, the sweeper task).

use std::sync::Arc;
use std::time::Duration;

use tether::proto::ids::{SessionId, StreamId};
use tether::proto::version::ProtocolVersion;
use tether::sse::EventFrame;
use tether::store::{
    EventStore, MemoryEventStore, MemorySessionStore, SessionRecord, SessionStore, SessionUsage,
    StoreError, StoreLimits, StreamKind, StreamOwner,
};
use tokio::time::Instant;

#[cfg(feature = "testing")]
mod suite {
    use std::sync::Arc;

    use tether::store::suite::Caps;
    use tether::store::{
        EventStore, MemoryEventStore, MemorySessionStore, SessionStore, StoreLimits,
    };

    async fn new_events(caps: Caps) -> Arc<dyn EventStore> {
        Arc::new(MemoryEventStore::new({
            let mut config = StoreLimits::default();
            config.max_events_per_session = caps.max_events_per_session;
            config.max_bytes_per_session = caps.max_bytes_per_session;
            config.max_streams_per_session = caps.max_streams_per_session;
            config
        }))
    }

    async fn new_sessions() -> Arc<dyn SessionStore> {
        Arc::new(MemorySessionStore::new())
    }

    tether::store_suite!(new_events, new_sessions);

    async fn new_tasks() -> Arc<dyn tether::store::TaskStore> {
        Arc::new(tether::store::MemoryTaskStore::new())
    }

    tether::task_store_suite!(new_tasks);

    /// The same checks on one thread under paused time, the way the server's tests run.
    #[tokio::test(start_paused = true)]
    async fn whole_suite_passes_under_paused_time() {
        tether::store::suite::run_all(&new_events, &new_sessions).await;
    }
}

const RETRY: Duration = Duration::from_secs(1);

fn owner() -> StreamOwner {
    StreamOwner {
        principal: Arc::from("default"),
        session: SessionId::generate(),
    }
}

fn store(config: StoreLimits) -> MemoryEventStore {
    MemoryEventStore::new(config)
}

/// A store whose completed streams expire on the next access.
fn instant_retention(max_tombstones: usize) -> MemoryEventStore {
    store({
        let mut config = StoreLimits::default();
        config.retention = Duration::ZERO;
        config.max_tombstones = max_tombstones;
        config
    })
}

async fn completed_stream(events: &MemoryEventStore, owner: &StreamOwner) -> StreamId {
    let stream = events
        .create_stream(owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    events
        .append(stream, br#"{"id":1,"result":{}}"#)
        .await
        .unwrap();
    events.complete(stream).await.unwrap();
    stream
}

#[test]
fn defaults_are_the_documented_values() {
    let config = StoreLimits::default();
    assert_eq!(
        config.retention,
        Duration::from_secs(300),
        "issue-pinned 5 minutes"
    );
    assert_eq!(config.max_events_per_session, 100_000);
    assert_eq!(config.max_bytes_per_session, 64 * 1024 * 1024);
    assert_eq!(config.max_streams_per_session, 1024);
    assert_eq!(config.max_tombstones, 65_536);
    assert_eq!(MemoryEventStore::default().config(), &config);
}

#[tokio::test]
async fn caps_below_one_act_as_one() {
    let events = store({
        let mut config = StoreLimits::default();
        config.max_events_per_session = 0;
        config.max_bytes_per_session = 0;
        config.max_streams_per_session = 0;
        config
    });
    assert_eq!(events.config().max_events_per_session, 1);
    assert_eq!(events.config().max_streams_per_session, 1);
    // One byte is below any frame: nothing fits, and the store says so.
    let result = events
        .create_stream(&owner(), StreamKind::Request, RETRY, &[])
        .await;
    assert_eq!(result, Err(StoreError::EventTooLarge));
}

#[tokio::test]
async fn one_event_cap_keeps_just_the_newest_event() {
    let events = store({
        let mut config = StoreLimits::default();
        config.max_events_per_session = 1;
        config
    });
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    for n in 1..=3 {
        let id = events
            .append(stream, format!("{n}").as_bytes())
            .await
            .unwrap();
        assert_eq!(id.seq, n);
    }
    let batch = events.read_after(&owner, stream, 2, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].message(), b"3");
    assert_eq!(
        events.read_after(&owner, stream, 1, 10).await,
        Err(StoreError::Expired)
    );
    assert_eq!(events.usage(&owner.session).await.unwrap().events, 1);
}

#[tokio::test(start_paused = true)]
async fn completed_stream_expires_after_retention_and_reads_expired() {
    let events = MemoryEventStore::default();
    let retention = events.config().retention;
    let owner = owner();
    let stream = completed_stream(&events, &owner).await;

    tokio::time::advance(retention - Duration::from_millis(1)).await;
    let batch = events.read_after(&owner, stream, 0, 10).await.unwrap();
    assert_eq!(batch.events.len(), 1, "still inside retention");
    assert!(batch.complete);

    tokio::time::advance(Duration::from_millis(1)).await;
    // Usage already leaves it out: expiry is applied on any access to the session.
    assert_eq!(
        events.usage(&owner.session).await.unwrap(),
        SessionUsage::default()
    );
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired),
        "the tombstone says expired, not unknown"
    );
    assert_eq!(
        events.read_from_start(&owner, stream, 10).await,
        Err(StoreError::Expired)
    );
    let stranger = StreamOwner {
        session: SessionId::generate(),
        ..owner.clone()
    };
    assert_eq!(
        events.read_after(&stranger, stream, 0, 10).await,
        Err(StoreError::UnknownStream),
        "a tombstone reveals nothing to another session"
    );
    assert_eq!(
        events.append(stream, b"{}").await,
        Err(StoreError::Completed),
        "an expired stream was complete"
    );
    assert_eq!(events.complete(stream).await, Ok(()));
    tokio::time::timeout(Duration::from_secs(1), events.wait_for_more(stream, 0))
        .await
        .expect("waiting on an expired stream returns at once")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn retention_counts_from_the_first_completion() {
    let events = MemoryEventStore::default();
    let retention = events.config().retention;
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    // Live streams never expire, however old.
    tokio::time::advance(retention * 10).await;
    events.read_after(&owner, stream, 0, 10).await.unwrap();

    events.complete(stream).await.unwrap();
    tokio::time::advance(retention / 2).await;
    events.complete(stream).await.unwrap();
    events.read_after(&owner, stream, 0, 10).await.unwrap();
    tokio::time::advance(retention / 2).await;
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired),
        "a second complete does not restart retention"
    );
}

#[tokio::test]
async fn sweep_expired_takes_a_virtual_now() {
    let events = MemoryEventStore::default();
    let retention = events.config().retention;
    let owner = owner();
    let stream = completed_stream(&events, &owner).await;
    let live = events
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .unwrap();
    let completed_at = Instant::now();

    assert_eq!(events.sweep_expired(completed_at), 0);
    assert_eq!(events.usage(&owner.session).await.unwrap().streams, 2);
    assert_eq!(events.sweep_expired(completed_at + retention * 2), 1);
    assert_eq!(
        events.sweep_expired(completed_at + retention * 2),
        0,
        "once"
    );
    let usage = events.usage(&owner.session).await.unwrap();
    assert_eq!(
        (usage.streams, usage.events),
        (1, 1),
        "the live stream stays"
    );
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired)
    );
    events.read_after(&owner, live, 0, 10).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn sweeper_task_expires_untouched_sessions_and_stops_with_the_store() {
    let events = MemoryEventStore::default();
    let retention = events.config().retention;
    let sweeper = events.spawn_sweeper(Duration::from_secs(1));
    let owner = owner();
    let stream = completed_stream(&events, &owner).await;

    tokio::time::sleep(retention + Duration::from_secs(2)).await;
    assert_eq!(
        events.sweep_expired(Instant::now()),
        0,
        "the sweeper already removed it"
    );
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired)
    );

    drop(events);
    tokio::time::timeout(Duration::from_secs(5), sweeper)
        .await
        .expect("the sweeper ends once the store is gone")
        .unwrap();
}

#[tokio::test]
async fn tombstones_are_bounded_oldest_forgotten_first() {
    let events = instant_retention(2);
    let owner = owner();
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(completed_stream(&events, &owner).await);
        // Any access to the session expires what just completed.
        events.usage(&owner.session).await.unwrap();
    }
    assert_eq!(
        events.read_after(&owner, streams[0], 0, 10).await,
        Err(StoreError::UnknownStream),
        "beyond the bound, an expired stream is forgotten"
    );
    for &stream in &streams[1..] {
        assert_eq!(
            events.read_after(&owner, stream, 0, 10).await,
            Err(StoreError::Expired)
        );
    }
}

#[tokio::test]
async fn without_tombstones_expired_streams_read_unknown() {
    let events = instant_retention(0);
    let owner = owner();
    let stream = completed_stream(&events, &owner).await;
    events.usage(&owner.session).await.unwrap();
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::UnknownStream)
    );
}

#[tokio::test]
async fn tombstones_die_with_their_session() {
    let events = instant_retention(16);
    let owner = owner();
    let stream = completed_stream(&events, &owner).await;
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::Expired)
    );
    events.remove_session(&owner.session).await.unwrap();
    assert_eq!(
        events.read_after(&owner, stream, 0, 10).await,
        Err(StoreError::UnknownStream),
        "after DELETE, everything of the session is unknown"
    );
    assert_eq!(
        events.append(stream, b"{}").await,
        Err(StoreError::UnknownStream)
    );
}

#[tokio::test]
async fn frames_are_encoded_once_and_shared_by_every_read() {
    let events = MemoryEventStore::default();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    let json = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
    events.append(stream, json).await.unwrap();

    let first = events.read_after(&owner, stream, 0, 10).await.unwrap();
    let second = events.read_from_start(&owner, stream, 10).await.unwrap();
    let (a, b) = (&first.events[0], &second.events[1]);
    assert_eq!(a, b);
    assert_eq!(
        a.frame.as_ptr(),
        b.frame.as_ptr(),
        "same stored bytes, not a re-encoding"
    );
    assert_eq!(a.message().as_ptr(), b.message().as_ptr());
    // The message is a view into the frame, just after `data: `.
    let offset = a.message().as_ptr() as usize - a.frame.as_ptr() as usize;
    assert_eq!(&a.frame[offset - 6..offset], b"data: ");
    assert_eq!(&a.frame[offset..offset + json.len()], json);
    assert_eq!(a.message(), json);

    let priming = &second.events[0];
    assert!(priming.message().is_empty());
    let again = events.read_from_start(&owner, stream, 1).await.unwrap();
    assert_eq!(priming.frame.as_ptr(), again.events[0].frame.as_ptr());
}

/// The store writes a stream's frames into shared pages that grow as the stream does, and
/// gives a frame larger than a page an allocation of its own: whatever the sizes, every event
/// reads back as exactly the frame the encoder writes, and reads share the stored bytes.
#[tokio::test]
async fn frames_of_every_size_read_back_exactly_across_pages() {
    let events = MemoryEventStore::default();
    let owner = owner();
    let stream = events
        .create_stream(&owner, StreamKind::Request, RETRY, &[])
        .await
        .unwrap();
    // Small and growing frames fill and roll over pages of every size; a few are larger than
    // the largest page (16 KiB).
    let sizes: Vec<usize> = (0..400)
        .map(|i| match i % 50 {
            0 => 40_000,
            7 => 16 * 1024 - 60,
            _ => 1 + (i * 37) % 900,
        })
        .collect();
    let messages: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let text = char::from(b'a' + u8::try_from(i % 26).unwrap())
                .to_string()
                .repeat(size);
            format!(r#"{{"i":{i},"t":"{text}"}}"#).into_bytes()
        })
        .collect();
    for message in &messages {
        events.append(stream, message).await.unwrap();
    }
    let mut read = Vec::new();
    let mut after = 0;
    loop {
        let batch = events.read_after(&owner, stream, after, 64).await.unwrap();
        let Some(last) = batch.events.last() else {
            break;
        };
        after = last.id.seq;
        read.extend(batch.events);
    }
    assert_eq!(read.len(), messages.len());
    for (event, message) in read.iter().zip(&messages) {
        assert_eq!(event.message(), &message[..], "seq {}", event.id.seq);
        let id = event.id.to_string();
        let expected = EventFrame::with_data(std::str::from_utf8(message).unwrap())
            .event("message")
            .id(&id)
            .encode()
            .unwrap();
        assert_eq!(event.frame, expected, "seq {}", event.id.seq);
    }
    // A second read hands out the same bytes, not copies.
    let again = events.read_after(&owner, stream, 0, 1).await.unwrap();
    assert_eq!(again.events[0].frame.as_ptr(), read[0].frame.as_ptr());
}

#[tokio::test]
async fn retry_is_written_in_whole_milliseconds() {
    let events = MemoryEventStore::default();
    let owner = owner();
    let stream = events
        .create_stream(
            &owner,
            StreamKind::Standalone,
            Duration::from_micros(2_500_900),
            &[],
        )
        .await
        .unwrap();
    let batch = events.read_from_start(&owner, stream, 1).await.unwrap();
    assert_eq!(
        &batch.events[0].frame[..],
        format!("id: {stream}:0\nretry: 2500\ndata: \n\n").as_bytes()
    );
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_expire_on_tokio_time() {
    let sessions = MemorySessionStore::new();
    let idle = Duration::from_secs(1800);
    let record = SessionRecord {
        id: SessionId::generate(),
        version: ProtocolVersion::LATEST_LEGACY,
        principal: Arc::from("default"),
        standalone: StreamId::generate(),
        client: None,
    };
    sessions.insert(record.clone()).await.unwrap();
    tokio::time::advance(idle).await;
    assert!(
        sessions.expire_idle(idle).await.unwrap().is_empty(),
        "idle for exactly the limit is not longer than it"
    );
    sessions.touch(&record.id).await.unwrap();
    tokio::time::advance(idle).await;
    assert!(sessions.expire_idle(idle).await.unwrap().is_empty());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        sessions.expire_idle(idle).await.unwrap(),
        std::slice::from_ref(&record.id)
    );
    assert_eq!(sessions.count().await.unwrap(), 0);
}

/// A deterministic random walk over create/append/complete with tight caps, checking after
/// every step that usage equals what reads return and that every stream reads either as a
/// gap-free suffix or as `Expired`, never with a hole. Guards the eviction queue's lazy
/// deletion and compaction.
#[tokio::test]
async fn random_operations_keep_usage_exact_and_gaps_explicit() {
    const MAX_EVENTS: usize = 20;
    const MAX_BYTES: usize = 3_000;
    const MAX_STREAMS: usize = 5;
    struct Model {
        stream: StreamId,
        next_seq: u64,
        complete: bool,
        gone: bool,
    }

    let events = store({
        let mut config = StoreLimits::default();
        config.max_events_per_session = MAX_EVENTS;
        config.max_bytes_per_session = MAX_BYTES;
        config.max_streams_per_session = MAX_STREAMS;
        config
    });
    let owner = owner();
    let mut models: Vec<Model> = Vec::new();
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: usize| {
        // xorshift64: deterministic, so a failure replays exactly.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % bound as u64) as usize
    };

    for step in 0..3_000 {
        let live: Vec<usize> = (0..models.len())
            .filter(|&i| !models[i].complete && !models[i].gone)
            .collect();
        match next(10) {
            0 | 1 => match events
                .create_stream(&owner, StreamKind::Request, RETRY, &[])
                .await
            {
                Ok(stream) => models.push(Model {
                    stream,
                    next_seq: 1,
                    complete: false,
                    gone: false,
                }),
                Err(StoreError::TooManyStreams) => assert_eq!(live.len(), MAX_STREAMS),
                Err(error) => panic!("step {step}: create failed: {error}"),
            },
            2 if !live.is_empty() => {
                let model = &mut models[live[next(live.len())]];
                events.complete(model.stream).await.unwrap();
                model.complete = true;
            }
            _ if !live.is_empty() => {
                let model = &mut models[live[next(live.len())]];
                let json = format!(r#"{{"step":{step},"pad":"{}"}}"#, "x".repeat(next(300)));
                let id = events.append(model.stream, json.as_bytes()).await.unwrap();
                assert_eq!(id.seq, model.next_seq, "step {step}: gap-free seqs");
                model.next_seq += 1;
            }
            _ => {}
        }

        let usage = events.usage(&owner.session).await.unwrap();
        assert!(usage.events <= MAX_EVENTS && usage.bytes <= MAX_BYTES);
        let mut seen = SessionUsage::default();
        for model in models.iter_mut().filter(|model| !model.gone) {
            let last = model.next_seq - 1;
            match events.read_after(&owner, model.stream, last, 10).await {
                Ok(batch) => assert!(batch.events.is_empty()),
                Err(StoreError::Expired) => {
                    // Removed whole: only a completed stream may be.
                    assert!(model.complete, "step {step}: a live stream was removed");
                    model.gone = true;
                    continue;
                }
                Err(error) => panic!("step {step}: {error}"),
            }
            // Find the first retained seq: every cursor before it is Expired, none after.
            let mut from = 0;
            while events.read_after(&owner, model.stream, from, 0).await == Err(StoreError::Expired)
            {
                from += 1;
            }
            let batch = events
                .read_after(&owner, model.stream, from, usize::MAX)
                .await
                .unwrap();
            let expected: Vec<u64> = (from + 1..=last).collect();
            let got: Vec<u64> = batch.events.iter().map(|event| event.id.seq).collect();
            assert_eq!(got, expected, "step {step}: a gap-free suffix");
            assert_eq!(batch.complete, model.complete);
            let start = events
                .read_from_start(&owner, model.stream, usize::MAX)
                .await;
            let retained = match start {
                Ok(all) => {
                    assert_eq!(from, 0);
                    all.events
                }
                Err(StoreError::Expired) => batch.events,
                Err(error) => panic!("step {step}: {error}"),
            };
            seen.streams += 1;
            seen.events += retained.len();
            seen.bytes += retained
                .iter()
                .map(|event| event.frame.len())
                .sum::<usize>();
        }
        assert_eq!(usage, seen, "step {step}: usage is exact");
    }
    assert!(
        models.iter().filter(|model| model.gone).count() > 10,
        "the walk exercised whole-stream eviction"
    );
}

/// Many short request streams evicted whole while an old live stream sits at the front of the
/// session's eviction queue: the queue's stale entries are compacted away, and when live
/// eviction finally starts it still takes the live stream's oldest events, in order.
#[tokio::test]
async fn live_eviction_stays_in_order_after_many_whole_stream_evictions() {
    const MAX_EVENTS: usize = 10;
    let events = store({
        let mut config = StoreLimits::default();
        config.max_events_per_session = MAX_EVENTS;
        config
    });
    let owner = owner();
    let standalone = events
        .create_stream(&owner, StreamKind::Standalone, RETRY, &[])
        .await
        .unwrap();
    for n in 1..=3 {
        events
            .append(standalone, format!("{n}").as_bytes())
            .await
            .unwrap();
    }
    for _ in 0..500 {
        completed_stream(&events, &owner).await;
        let usage = events.usage(&owner.session).await.unwrap();
        assert!(usage.events <= MAX_EVENTS);
    }
    events
        .read_from_start(&owner, standalone, 100)
        .await
        .unwrap();

    // Now only the standalone stream is left to evict from.
    for n in 4..=30 {
        events
            .append(standalone, format!("{n}").as_bytes())
            .await
            .unwrap();
        let usage = events.usage(&owner.session).await.unwrap();
        assert!(usage.events <= MAX_EVENTS, "{usage:?}");
    }
    assert_eq!(
        events.read_after(&owner, standalone, 19, 100).await,
        Err(StoreError::Expired)
    );
    // Seqs 0..=30 were stored; the cap keeps the newest ten.
    let batch = events
        .read_after(&owner, standalone, 20, 100)
        .await
        .unwrap();
    let seqs: Vec<u64> = batch.events.iter().map(|event| event.id.seq).collect();
    assert_eq!(seqs, (21..=30).collect::<Vec<u64>>());
    assert_eq!(events.usage(&owner.session).await.unwrap().streams, 1);
}
