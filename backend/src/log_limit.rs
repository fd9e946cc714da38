//! Rate limiting of log lines a guest or a network peer can trigger.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The backend's one limiter for lines that peers trigger by connecting
/// (refusals, failed openings, sessions ended by a broken peer): shared by
/// every listener and session of the process, so connection churn cannot
/// flood the log however many connections it opens.
pub fn peer_triggered() -> bool {
    static LIMITER: Mutex<Option<LogLimiter>> = Mutex::new(None);
    let mut l = LIMITER.lock().unwrap_or_else(|p| p.into_inner());
    l.get_or_insert_with(LogLimiter::default).allow(0)
}

/// At most [`LogLimiter::PER_WINDOW`] lines per [`LogLimiter::WINDOW`]; the
/// rest are counted and reported once when the next window opens.
pub struct LogLimiter {
    window: Instant,
    count: u32,
    suppressed: u32,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter { window: Instant::now(), count: 0, suppressed: 0 }
    }
}

impl LogLimiter {
    /// Lines allowed per window.
    pub const PER_WINDOW: u32 = 10;
    /// The window.
    pub const WINDOW: Duration = Duration::from_secs(10);

    /// Whether to log now; counts what it suppresses and reports the count
    /// when the next window opens.
    pub fn allow(&mut self, session: u64) -> bool {
        if self.window.elapsed() >= Self::WINDOW {
            if self.suppressed > 0 {
                tracing::warn!(session, suppressed = self.suppressed, "suppressed repeated guest-triggered log lines");
            }
            self.window = Instant::now();
            self.count = 0;
            self.suppressed = 0;
        }
        if self.count < Self::PER_WINDOW {
            self.count += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}
