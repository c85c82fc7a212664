//! Cuts and resumes of one POST stream, over real sockets with the raw reader: the client
//! drops the connection at every position of a `count`-shaped stream and resumes with
//! `GET` + `Last-Event-ID`; what it gets must be exactly the events it missed, then the
//! result, contiguous and once each (docs/DESIGN.md#property-1). docs/PROTOCOL.md rule numbers (T…)
//! per test.

use std::time::Duration;

use crate::support::resume::{
    Call, V11, assert_exact_count, messages, read_messages, read_priming, split_id,
};
use crate::support::server::TestServer;
use serde_json::json;
use tether::server::ServerConfig;

/// Events per `count` in the position matrix.
const N: u64 = 10;

/// Where the tool is when the client cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// Has stored exactly what the client read; goes on while the client is away, and after
    /// the resume.
    Running,
    /// Has stored everything, the final response included (the stream is complete).
    Finished,
}

/// One cut: the client reads the priming event and `k` messages of a gated `count` of `N`,
/// cuts, and resumes with the last id it read. Returns how many messages the resume GET
/// delivered that were stored before it was sent (replayed).
async fn cut_and_resume(server: &TestServer, k: u64, tool: Tool) -> u64 {
    let mut client = server.session(V11).await;
    let token = json!(format!("k{k}-{tool:?}"));
    let (id, mut post) = client
        .call_tool("gated", json!({"n": N}), Some(token.clone()))
        .await
        .unwrap();
    assert_eq!(post.status(), 200);
    let stream = read_priming(&mut post).await;
    match tool {
        Tool::Running => server.release(k),
        Tool::Finished => {
            server.release(N + 1);
            server.wait_complete(&client, stream).await;
        }
    }
    let before = read_messages(&mut post, k).await;
    let last = before
        .last()
        .map_or_else(|| format!("{stream}:0"), |(event_id, _)| event_id.clone());
    drop(post); // the cut

    // While the client is away the tool goes on (T70): at least one event, and for a running
    // tool not all of them, so the resume is replay and then live.
    let remaining = N + 1 - k;
    let during = match tool {
        Tool::Running => (remaining / 2).max(1),
        Tool::Finished => remaining,
    };
    if tool == Tool::Running {
        server.release(during);
        server.wait_stored(&client, stream, k + during).await;
    }

    let mut resumed = client.resume(&last).await.unwrap();
    assert_eq!(resumed.status(), 200, "resume after {last}");
    assert!(resumed.is_event_stream());
    let replayed = read_messages(&mut resumed, during).await;
    if tool == Tool::Running {
        server.release(remaining - during);
    }
    let t = resumed.read_to_end().await.unwrap();
    assert!(
        t.complete,
        "the resume GET ends after the final response (T69)"
    );
    let mut after = replayed;
    after.extend(messages(&t).into_iter().skip(after.len()));
    // No priming event, no id at or before the cursor: nothing delivered twice.
    for event_id in t.event_ids() {
        assert!(
            split_id(event_id).1 > k,
            "{event_id} was already delivered (cut at {k})"
        );
    }
    let mut all = before;
    all.extend(after);
    assert_exact_count(&all, stream, id, &token, N);
    during
}

/// T66, T69, T70: for a `count` of N events the client cuts at every position — right after
/// the priming event, after each progress event, just before the final response (all progress
/// read, the response not yet produced — or produced but not read) — once with the tool still
/// running and once after it finished. Each cut's GET with `Last-Event-ID` replays at least
/// one event, then goes on live, and the client ends up with exactly progress 1..N and the
/// result, contiguous, once each.
#[tokio::test]
async fn cut_at_every_position_resumes_exactly_the_missing_events_then_the_result() {
    let server = TestServer::start(ServerConfig::default()).await;
    for tool in [Tool::Running, Tool::Finished] {
        for k in 0..=N {
            let replayed = cut_and_resume(&server, k, tool).await;
            assert!(replayed >= 1, "cut at {k} ({tool:?}) replayed nothing");
        }
    }
}

/// T66, T69: a cut after the client read the final response (the stream complete): the
/// resume is a 200 that ends at once, with nothing in it — the response is not delivered
/// twice. And a cut after the final response was produced but before it was read gets the
/// response alone.
#[tokio::test]
async fn cut_after_completion_resumes_to_an_empty_ended_stream() {
    let server = TestServer::start(ServerConfig::default()).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("gated", json!({"n": 3}), "done").await;
    server.release(4);
    let all = read_messages(&mut post, 4).await;
    assert_exact_count(&all, stream, id, &token, 3);
    drop(post);

    let t = client
        .resume(&all[3].0)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert!(t.complete, "ends at once");
    assert_eq!(t.events().count(), 0, "nothing twice: {:?}", t.items);

    let t = client
        .resume(&all[2].0)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(messages(&t), all[3..].to_vec(), "the response alone");
}

/// T66, T70: emission goes on while a replay is in progress. `count` (the demo tool, one
/// event per millisecond) is cut after 5 events; the resume comes 150 ms later, when a
/// backlog is stored and more is still being produced. The replay runs into the live part
/// without a gap or a duplicate.
#[tokio::test]
async fn emission_continuing_during_a_replay_stays_contiguous() {
    const COUNT: u64 = 400;
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let token = json!("busy");
    let (id, mut post) = client
        .call_tool(
            "count",
            json!({"n": COUNT, "interval_ms": 1}),
            Some(token.clone()),
        )
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    let before = read_messages(&mut post, 5).await;
    drop(post);
    tokio::time::sleep(Duration::from_millis(150)).await;

    let stored = last_stored(&server, &client, stream).await;
    let resumed = client.resume(&before[4].0).await.unwrap();
    assert_eq!(resumed.status(), 200);
    let t = resumed.read_to_end().await.unwrap();
    assert!(t.complete);
    assert!(
        stored > 5 && stored <= COUNT,
        "the resume met a backlog ({stored} stored) and a tool still running"
    );
    let mut all = before;
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, COUNT);
}

/// T66: a replay longer than one store read (a resume's first read takes 256 events, the
/// writer's later ones 1 024) while new events keep arriving: 600 events are waiting when
/// the client resumes, and the other 96 and the result are produced while the replay is
/// being written.
#[tokio::test]
async fn a_long_replay_with_appends_racing_it_is_exact() {
    const COUNT: u64 = 700;
    let server = TestServer::start(ServerConfig::default()).await;
    let mut client = server.session(V11).await;
    let token = json!(7);
    let (id, mut post) = client
        .call_tool("gated", json!({"n": COUNT}), Some(token.clone()))
        .await
        .unwrap();
    let stream = read_priming(&mut post).await;
    server.release(5);
    let mut all = read_messages(&mut post, 5).await;
    drop(post);
    server.release(600);
    server.wait_stored(&client, stream, 605).await;

    let mut resumed = client.resume(&all[4].0).await.unwrap();
    assert_eq!(resumed.status(), 200);
    all.extend(read_messages(&mut resumed, 10).await);
    server.release(COUNT + 1 - 605);
    let t = resumed.read_to_end().await.unwrap();
    assert!(t.complete);
    all.extend(messages(&t).into_iter().skip(10));
    assert_exact_count(&all, stream, id, &token, COUNT);
}

/// T83 (server side): a resumed connection that is cut again before the client took any new
/// event makes the client resend the same `Last-Event-ID`; the server replays the same
/// events again, identically, and then goes on.
#[tokio::test]
async fn resuming_twice_with_the_same_id_replays_the_same_events() {
    let server = TestServer::start(ServerConfig::default()).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("gated", json!({"n": 8}), "twice").await;
    server.release(3);
    let before = read_messages(&mut post, 3).await;
    drop(post);
    let cursor = before[2].0.clone();

    // First resume: nothing new yet, cut before any event.
    let mut first = client.resume(&cursor).await.unwrap();
    assert_eq!(first.status(), 200);
    let quiet = first
        .next_item_within(Duration::from_millis(50))
        .await
        .unwrap();
    assert!(quiet.is_none(), "nothing to replay yet: {quiet:?}");
    drop(first);

    server.release(2);
    server.wait_stored(&client, stream, 5).await;
    // Second resume with the same id: events 4 and 5; cut before the client processed them.
    let mut second = client.resume(&cursor).await.unwrap();
    let second_replay = read_messages(&mut second, 2).await;
    drop(second);
    // Third, again with the same id: the same two events, then the rest live.
    let mut third = client.resume(&cursor).await.unwrap();
    let third_replay = read_messages(&mut third, 2).await;
    assert_eq!(second_replay, third_replay, "the same replay both times");
    server.release(4);
    let t = third.read_to_end().await.unwrap();
    let mut all = before;
    all.extend(third_replay);
    all.extend(messages(&t).into_iter().skip(2));
    assert_exact_count(&all, stream, id, &token, 8);
}

/// docs/CONTRACTS.md#second-get: a GET for a stream that already has a live connection replaces it
/// — the POST's own connection, then an earlier resume — and each event goes out on the newest
/// connection only.
#[tokio::test]
async fn a_second_get_for_the_same_stream_replaces_the_older_connection() {
    let server = TestServer::start(ServerConfig::default()).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("gated", json!({"n": 5}), "replace").await;
    server.release(2);
    let mut all = read_messages(&mut post, 2).await;

    // The POST's connection is still open; a resume replaces it and it ends.
    let mut first = client.resume(&all[1].0).await.unwrap();
    assert_eq!(first.status(), 200);
    let post = post.read_to_end().await.unwrap();
    assert!(post.complete, "the replaced POST connection ended");
    assert_eq!(messages(&post).len(), 2, "{:?}", post.items);

    server.release(1);
    all.extend(read_messages(&mut first, 1).await);
    let second = client.resume(&all[2].0).await.unwrap();
    let first = first.read_to_end().await.unwrap();
    assert!(first.complete, "the replaced resume ended");
    assert_eq!(messages(&first).len(), 1, "{:?}", first.items);

    server.release(3);
    let t = second.read_to_end().await.unwrap();
    assert!(t.complete);
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, 5);
}

/// T69: a resume after the tool finished (demo `count`, cut after 4 of 10) gets the missing
/// progress and the result, once, and the GET ends.
#[tokio::test]
async fn resume_after_tool_finished_delivers_the_rest_and_the_result_once() {
    let server = TestServer::start(ServerConfig::default()).await;
    let Call {
        client,
        id,
        mut post,
        stream,
        token,
    } = server.call("count", json!({"n": 10}), "late").await;
    let mut all = read_messages(&mut post, 4).await;
    drop(post);
    server.wait_complete(&client, stream).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let t = client
        .resume(&all[3].0)
        .await
        .unwrap()
        .read_to_end()
        .await
        .unwrap();
    assert_eq!(t.status, 200);
    assert!(t.complete);
    all.extend(messages(&t));
    assert_exact_count(&all, stream, id, &token, 10);
}

/// The highest seq stored in `stream`, read from the store.
async fn last_stored(
    server: &TestServer,
    client: &tether_testkit::raw::RawClient,
    stream: tether::proto::ids::StreamId,
) -> u64 {
    use tether::store::EventStore as _;
    let owner = crate::support::resume::owner(client);
    let mut last = 0;
    loop {
        let batch = server
            .events
            .read_after(&owner, stream, last, 4096)
            .await
            .unwrap();
        match batch.events.last() {
            Some(event) => last = event.id.seq,
            None => return last,
        }
    }
}
