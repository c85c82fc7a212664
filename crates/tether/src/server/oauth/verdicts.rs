//! What tether already decided about access tokens, so a token presented again is not checked
//! again: [`Verdicts`], keyed by the token's SHA-256 (the cache never holds a token), each
//! verdict trusted until a deadline its checker chooses (never past the token's `exp`) and
//! only under the keys it was reached with (an epoch that changes whenever an issuer's keys
//! are loaded again, so a key that went away takes its tokens' verdicts with it), and bounded
//! in number so that a flood of distinct tokens cannot grow it without limit.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::token::Rejection;
use crate::server::auth::{AuthFailure, Credentials};

/// Verdicts kept at most; past this, expired ones go, then all.
const MAX_KEPT: usize = 10_000;

/// A token decided, and how long the verdict may be trusted; an error when no verdict can be
/// reached now (an authorization server out of reach).
pub(crate) type Decided = Result<(Result<Credentials, Rejection>, Duration), AuthFailure>;

/// A token's cache key: its SHA-256.
pub(crate) type TokenKey = [u8; 32];

/// A verdict, until when it holds, and under which keys.
struct Kept {
    verdict: Result<Credentials, Rejection>,
    until: Instant,
    epoch: u64,
}

/// Decided tokens (module docs).
#[derive(Default)]
pub(crate) struct Verdicts {
    kept: Mutex<HashMap<TokenKey, Kept>>,
}

impl std::fmt::Debug for Verdicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verdicts").finish_non_exhaustive()
    }
}

impl Verdicts {
    /// The key of `token`.
    pub(crate) fn key(token: &str) -> TokenKey {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0; 32];
        key.copy_from_slice(digest.as_ref());
        key
    }

    /// The verdict on the token of `key`, if one reached in `epoch` is kept and still holds.
    pub(crate) fn get(&self, key: &TokenKey, epoch: u64) -> Option<Result<Credentials, Rejection>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(key)
            .filter(|kept| kept.epoch == epoch && kept.until > Instant::now())
            .map(|kept| kept.verdict.clone())
    }

    /// Keeps `verdict`, reached in `epoch`, for `trust` (nothing, for zero).
    pub(crate) fn keep(
        &self,
        key: TokenKey,
        epoch: u64,
        verdict: Result<Credentials, Rejection>,
        trust: Duration,
    ) {
        if trust.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_KEPT && !kept.contains_key(&key) {
            kept.retain(|_, kept| kept.until > now);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(
            key,
            Kept {
                verdict,
                until: now + trust,
                epoch,
            },
        );
    }
}

/// How long a verdict on a token that expires at `exp` (seconds since the epoch, `now` being
/// the current one) may be trusted: `most`, and never past `exp`.
pub(crate) fn trust_until_expiry(most: Duration, exp: Option<u64>, now: u64) -> Duration {
    exp.map_or(most, |exp| {
        most.min(Duration::from_secs(exp.saturating_sub(now)))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            principal: Arc::from("https://as.example.com alice"),
            scopes: None,
            client_id: None,
        }
    }

    #[test]
    fn a_kept_verdict_is_found_by_its_token_and_no_other() {
        let verdicts = Verdicts::default();
        verdicts.keep(
            Verdicts::key("one"),
            7,
            Ok(credentials()),
            Duration::from_secs(60),
        );
        assert_eq!(
            verdicts.get(&Verdicts::key("one"), 7),
            Some(Ok(credentials()))
        );
        assert_eq!(verdicts.get(&Verdicts::key("two"), 7), None);
    }

    #[test]
    fn a_verdict_does_not_outlive_the_keys_it_was_reached_with() {
        let verdicts = Verdicts::default();
        verdicts.keep(
            Verdicts::key("one"),
            7,
            Ok(credentials()),
            Duration::from_secs(60),
        );
        assert_eq!(verdicts.get(&Verdicts::key("one"), 8), None);
    }

    #[test]
    fn a_verdict_trusted_for_no_time_is_not_kept() {
        let verdicts = Verdicts::default();
        verdicts.keep(Verdicts::key("one"), 0, Ok(credentials()), Duration::ZERO);
        assert_eq!(verdicts.get(&Verdicts::key("one"), 0), None);
    }

    #[test]
    fn the_number_kept_is_bounded() {
        let verdicts = Verdicts::default();
        for n in 0..=MAX_KEPT {
            let key = Verdicts::key(&n.to_string());
            verdicts.keep(key, 0, Err(Rejection::Inactive), Duration::from_secs(60));
        }
        let kept = verdicts.kept.lock().expect("not poisoned").len();
        assert!(kept <= MAX_KEPT, "{kept} kept");
        assert_eq!(
            verdicts.get(&Verdicts::key(&MAX_KEPT.to_string()), 0),
            Some(Err(Rejection::Inactive)),
            "the newest is kept"
        );
    }

    #[test]
    fn trust_never_outlasts_the_token() {
        let most = Duration::from_secs(60);
        assert_eq!(trust_until_expiry(most, None, 100), most);
        assert_eq!(
            trust_until_expiry(most, Some(110), 100),
            Duration::from_secs(10)
        );
        assert_eq!(trust_until_expiry(most, Some(1000), 100), most);
        assert_eq!(trust_until_expiry(most, Some(90), 100), Duration::ZERO);
    }
}
