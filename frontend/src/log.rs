//! Logging for the drop-in libraries, which run inside programs that know
//! nothing of Rust: to standard error, only when `PVGPU_LOG` asks
//! (`PVGPU_LOG=1` is `info`, anything else a `tracing` filter), and never
//! while a thread's thread-local storage is being torn down.
//!
//! NVIDIA's runtime calls the driver from its own thread-local
//! destructors at thread and process exit. The formatter keeps a buffer in
//! thread-local storage, and touching it after its destructor ran panics,
//! which would abort the program from inside a C call. So each thread
//! arms a sentinel right after its first formatted event: thread-local
//! destructors run newest first, so the sentinel goes before the buffer,
//! and from then on the thread's events are dropped.

use std::cell::Cell;
use std::sync::Once;
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// Where a thread stands with its sentinel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No event formatted yet.
    Fresh,
    /// The sentinel lives: events may be formatted.
    Armed,
    /// The sentinel is gone: the thread is tearing down.
    TornDown,
}

thread_local! {
    /// Without a destructor, so readable during teardown.
    static PHASE: Cell<Phase> = const { Cell::new(Phase::Fresh) };
    static SENTINEL: Sentinel = const { Sentinel };
}

struct Sentinel;

impl Drop for Sentinel {
    fn drop(&mut self) {
        PHASE.set(Phase::TornDown);
    }
}

/// Drops every event of a thread whose sentinel is gone, and arms the
/// sentinel after the formatter's first event on a thread. It is the
/// outermost layer: it decides before every other layer whether an event
/// goes on, and sees each event after the formatter.
struct Gate;

impl<S: Subscriber> Layer<S> for Gate {
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        // Asked again at every event: the answer depends on the thread.
        Interest::sometimes()
    }

    fn enabled(&self, _metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        PHASE.get() != Phase::TornDown
    }

    fn on_event(&self, _event: &Event<'_>, _ctx: Context<'_, S>) {
        if PHASE.get() == Phase::Fresh && SENTINEL.try_with(|_| ()).is_ok() {
            PHASE.set(Phase::Armed);
        }
    }
}

/// Starts logging as `PVGPU_LOG` asks, once per library.
pub fn init_dropin() {
    static LOG: Once = Once::new();
    LOG.call_once(|| {
        let Ok(filter) = std::env::var("PVGPU_LOG") else { return };
        let filter = if filter == "1" { "info".to_string() } else { filter };
        let format = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let _ = tracing_subscriber::registry().with(EnvFilter::new(filter)).with(format).with(Gate).try_init();
    });
}
