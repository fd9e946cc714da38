//! What was called, with what results, reported at exit.

use crate::stubs::{NAMES, SLOTS, SYMBOLS};
use crate::trampoline::TOTAL;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

static CALLS: [AtomicU64; TOTAL] = [const { AtomicU64::new(0) }; TOTAL];
/// (trampoline, status) to count.
static RESULTS: Mutex<BTreeMap<(usize, u32), u64>> = Mutex::new(BTreeMap::new());
/// Lines in the order they happened (lookups, tables, notes).
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Names of the traced tables, by table index: the UUID's first 4 bytes.
pub static TABLE_NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn calls_wanted() -> bool {
    static W: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *W.get_or_init(|| std::env::var("PVGPU_TRACE_CALLS").is_ok_and(|v| v == "1"))
}

fn at_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        extern "C" fn report() {
            write_report();
        }
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(report) };
    });
}

/// Records a line (a lookup, a table request, a note).
pub fn note(line: &str) {
    at_exit();
    LINES.lock().unwrap_or_else(|p| p.into_inner()).push(line.to_string());
}

/// The name of trampoline `i`: `G:symbol` or `E:uuid[slot]`.
pub fn name(i: usize) -> String {
    if i < SYMBOLS {
        return format!("G:{}", NAMES[i]);
    }
    let (t, s) = ((i - SYMBOLS) / SLOTS, (i - SYMBOLS) % SLOTS);
    let tables = TABLE_NAMES.lock().unwrap_or_else(|p| p.into_inner());
    format!("E:{}[{s}]", tables.get(t).map_or("?", String::as_str))
}

/// Trampoline `i` was entered.
pub fn called(i: usize) {
    at_exit();
    if let Some(c) = CALLS.get(i) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Trampoline `i`'s function returned `status`.
pub fn returned(i: usize, status: u32) {
    *RESULTS.lock().unwrap_or_else(|p| p.into_inner()).entry((i, status)).or_default() += 1;
    if calls_wanted() {
        eprintln!("TRACE {} -> {status}", name(i));
    }
}

fn write_report() {
    let mut out = String::new();
    for l in LINES.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.push_str(l);
        out.push('\n');
    }
    let results = RESULTS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (i, c) in CALLS.iter().enumerate() {
        let n = c.load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let statuses: Vec<String> = results.range((i, 0)..=(i, u32::MAX)).map(|((_, s), k)| format!("{s}:{k}")).collect();
        out.push_str(&format!("CNT {} {n} [{}]\n", name(i), statuses.join(" ")));
    }
    match std::env::var("PVGPU_TRACE_OUT") {
        Ok(path) => {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
                let _ = f.write_all(out.as_bytes());
            }
        }
        Err(_) => {
            let _ = std::io::stderr().write_all(out.as_bytes());
        }
    }
}
