//! Per-principal rate limits ([`RateLimit`]): a token bucket per principal, over the requests
//! that ask for work.
//!
//! Each JSON-RPC request takes a token, except those that only open or read what was already
//! admitted (`initialize`, `server/discover`, `ping`, and the `tasks/*` reads and updates of
//! tasks a call created); a POST whose requests find too few tokens is refused whole with
//! 429 and `Retry-After` (the seconds until enough have come back), before anything runs, so a
//! client that waits and sends it again loses nothing. Resumes (GET) are never limited: a
//! stream already admitted must be readable. Without authentication every caller is the one
//! anonymous principal ([`ANONYMOUS_PRINCIPAL`](crate::store::ANONYMOUS_PRINCIPAL)), and
//! shares its bucket.
//!
//! The bucket is pure arithmetic on the instants it is given ([`Bucket::take`]); the limiter
//! holds one per principal seen, forgetting full ones once there are many.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tether_proto::jsonrpc::Message;
use tokio::time::Instant;

use crate::lock;

/// How many principals' buckets are kept before the full ones (whose principals have been
/// idle long enough to refill) are forgotten.
const TRACKED_PRINCIPALS: usize = 4096;

/// Requests each principal may make: `requests` per `period`, as many at once (the bucket
/// holds `requests` tokens, and one comes back every `period / requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Tokens a bucket holds (and a new principal starts with), at least 1.
    pub requests: u32,
    /// The time in which a spent bucket fills again, more than zero.
    pub period: Duration,
}

impl RateLimit {
    /// `requests` per `period` (at least one request, in at least a millisecond).
    #[must_use]
    pub fn per(requests: u32, period: Duration) -> Self {
        Self {
            requests: requests.max(1),
            period: period.max(Duration::from_millis(1)),
        }
    }

    fn per_second(&self) -> f64 {
        f64::from(self.requests) / self.period.as_secs_f64()
    }
}

/// One principal's tokens, as of an instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub(crate) fn full(limit: &RateLimit, now: Instant) -> Self {
        Self {
            tokens: f64::from(limit.requests),
            at: now,
        }
    }

    fn refill(&mut self, limit: &RateLimit, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * limit.per_second()).min(f64::from(limit.requests));
        self.at = now;
    }

    /// Takes `cost` tokens at `now`, or says how long until there are that many. A cost
    /// above the bucket's size takes the whole bucket, since it could never be admitted
    /// otherwise.
    pub(crate) fn take(
        &mut self,
        limit: &RateLimit,
        now: Instant,
        cost: u32,
    ) -> Result<(), Duration> {
        self.refill(limit, now);
        let cost = f64::from(cost.min(limit.requests));
        if self.tokens >= cost {
            self.tokens -= cost;
            return Ok(());
        }
        let missing = cost - self.tokens;
        Err(Duration::from_secs_f64(missing / limit.per_second()))
    }

    fn is_full(&self, limit: &RateLimit, now: Instant) -> bool {
        let mut later = *self;
        later.refill(limit, now);
        later.tokens >= f64::from(limit.requests)
    }
}

/// The buckets of every principal seen.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

impl RateLimiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Admits `messages` of `principal`'s POST, or says how long to wait.
    pub(crate) fn admit(&self, principal: &Arc<str>, messages: &[Message]) -> Result<(), Duration> {
        let cost = messages.iter().filter(|message| costs(message)).count();
        if cost == 0 {
            return Ok(());
        }
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= TRACKED_PRINCIPALS && !buckets.contains_key(principal) {
            buckets.retain(|_, bucket| !bucket.is_full(&self.limit, now));
        }
        buckets
            .entry(Arc::clone(principal))
            .or_insert_with(|| Bucket::full(&self.limit, now))
            .take(&self.limit, now, cost)
    }
}

/// Whether `message` takes a token: a request for new work.
fn costs(message: &Message) -> bool {
    let Message::Request(request) = message else {
        return false;
    };
    let method = request.method.as_str();
    !(matches!(method, "initialize" | "server/discover" | "ping") || method.starts_with("tasks/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_proto::jsonrpc::{Notification, Request, RequestId};

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate() {
        let limit = RateLimit::per(6, Duration::from_secs(3));
        let start = Instant::now();
        let mut bucket = Bucket::full(&limit, start);
        for _ in 0..6 {
            assert_eq!(bucket.take(&limit, start, 1), Ok(()));
        }
        assert_eq!(
            bucket.take(&limit, start, 1),
            Err(Duration::from_millis(500))
        );
        // Half a second brings one token back, and only one.
        let later = start + Duration::from_millis(500);
        assert_eq!(bucket.take(&limit, later, 1), Ok(()));
        assert!(bucket.take(&limit, later, 1).is_err());
        // A long idle fills it to the burst, no further.
        let idle = later + Duration::from_secs(60);
        assert_eq!(bucket.take(&limit, idle, 6), Ok(()));
        assert!(bucket.take(&limit, idle, 1).is_err());
    }

    #[test]
    fn a_refused_post_takes_nothing_and_a_cost_above_the_burst_waits_for_a_full_bucket() {
        let limit = RateLimit::per(2, Duration::from_secs(2));
        let start = Instant::now();
        let mut bucket = Bucket::full(&limit, start);
        assert_eq!(bucket.take(&limit, start, 1), Ok(()));
        assert_eq!(bucket.take(&limit, start, 2), Err(Duration::from_secs(1)));
        assert_eq!(
            bucket.take(&limit, start, 1),
            Ok(()),
            "the refusal took no token"
        );
        assert_eq!(bucket.take(&limit, start, 5), Err(Duration::from_secs(2)));
        let full = start + Duration::from_secs(2);
        assert_eq!(
            bucket.take(&limit, full, 5),
            Ok(()),
            "taken as the whole bucket"
        );
        assert!(bucket.take(&limit, full, 1).is_err());
    }

    #[test]
    fn only_requests_for_new_work_cost() {
        let request =
            |method: &str| Message::Request(Request::new(RequestId::from(1_u64), method, None));
        for free in [
            "initialize",
            "server/discover",
            "ping",
            "tasks/get",
            "tasks/update",
        ] {
            assert!(!costs(&request(free)), "{free}");
        }
        for paid in ["tools/call", "tools/list", "resources/read", "prompts/get"] {
            assert!(costs(&request(paid)), "{paid}");
        }
        assert!(!costs(&Message::Notification(Notification::new(
            "notifications/initialized",
            None
        ))));
    }

    #[test]
    fn principals_have_buckets_of_their_own() {
        let limiter = RateLimiter::new(RateLimit::per(1, Duration::from_secs(1000)));
        let call = [Message::Request(Request::new(
            RequestId::from(1_u64),
            "tools/call",
            None,
        ))];
        let (alice, bob): (Arc<str>, Arc<str>) = (Arc::from("alice"), Arc::from("bob"));
        assert_eq!(limiter.admit(&alice, &call), Ok(()));
        assert!(limiter.admit(&alice, &call).is_err());
        assert_eq!(limiter.admit(&bob, &call), Ok(()));
    }
}
