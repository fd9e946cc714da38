//! The supervisor's side of GPU turns: one thread that, every tick, looks
//! at each live session's turn words and grants, asks back and charges
//! turns by the tenants' shares ([`super`] has the model).

use super::{DRAIN_MAX, Turn};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the arbiter looks at the sessions.
pub const TICK: Duration = Duration::from_millis(1);
/// How often while some session waits for a GPU: a turn given back after
/// a synchronisation goes to the next session within about this.
pub const TICK_CONTENDED: Duration = Duration::from_micros(200);

/// Whose time a session's turns count as: its tenant's, or (outside every
/// tenant) its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// A tenant, by name.
    Tenant(String),
    /// A session outside every tenant, by number.
    Session(u64),
}

/// A live session as the arbiter sees it on one tick.
pub struct Seen<'a> {
    /// Its number.
    pub id: u64,
    /// Whose time it spends.
    pub group: Group,
    /// Its group's share (at least 1).
    pub share: u32,
    /// Its turn words.
    pub turn: Turn<'a>,
}

/// A turn granted and not yet given back.
#[derive(Debug, Clone, Copy)]
struct Grant {
    session: u64,
    epoch: u64,
    since: Instant,
    /// Charged up to here.
    charged_to: Instant,
    /// Others waited for the device on the last tick (the time since is
    /// charged).
    contended: bool,
    /// The holder's command count, and when it last moved.
    entered: (u64, Instant),
    /// When it was asked to yield.
    asked: Option<Instant>,
}

#[derive(Default)]
struct State {
    /// The turn of each device, by ordinal.
    grants: HashMap<usize, Grant>,
    /// Each group's virtual time: contended GPU time held divided by its
    /// share, in nanoseconds.
    vtime: HashMap<Group, f64>,
    /// Groups that held or wanted a turn on the last tick.
    active: Vec<Group>,
    /// Contended GPU time held so far, by tenant (`None`: sessions
    /// outside every tenant), for `/metrics`.
    held: HashMap<Option<String>, Duration>,
    /// When each waiting session was first seen waiting (ties go to the
    /// longest waiting).
    waiting_since: HashMap<u64, Instant>,
    epoch: u64,
}

/// Grants GPU turns.
pub struct Arbiter {
    slice: Duration,
    /// A holder that sends no command for this long while others wait
    /// loses its turn before its slice ends.
    idle: Duration,
    state: Mutex<State>,
}

impl Arbiter {
    /// Turns of `slice` while others wait.
    pub fn new(slice: Duration) -> Arbiter {
        Arbiter { slice, idle: (slice / 4).max(2 * TICK), state: Mutex::default() }
    }

    /// GPU time held while others waited, so far, by tenant (`None`:
    /// sessions outside every tenant).
    pub fn held(&self) -> Vec<(Option<String>, Duration)> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(Option<String>, Duration)> = st.held.iter().map(|(g, d)| (g.clone(), *d)).collect();
        v.sort();
        v
    }

    /// One tick over the live sessions, at `now`; whether a session waits
    /// for a GPU.
    pub fn tick(&self, live: &[Seen<'_>], now: Instant) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let by_id: HashMap<u64, &Seen<'_>> = live.iter().map(|s| (s.id, s)).collect();
        // Who waits, per device.
        let mut waiting: HashMap<usize, Vec<&Seen<'_>>> = HashMap::new();
        for s in live {
            if let Some(d) = s.turn.wants() {
                waiting.entry(d).or_default().push(s);
                st.waiting_since.entry(s.id).or_insert(now);
            } else {
                st.waiting_since.remove(&s.id);
            }
        }
        // Charge the turns held: what went while others waited. Turns
        // given back, or whose session has gone, end here.
        let devices: Vec<usize> = st.grants.keys().copied().collect();
        for d in devices {
            let mut g = st.grants[&d];
            let holder = by_id.get(&g.session).filter(|s| s.turn.held().is_some_and(|h| h.epoch == g.epoch));
            if let Some(s) = by_id.get(&g.session).filter(|_| g.contended) {
                charge(&mut st, &s.group, s.share, now - g.charged_to);
                s.turn.add_held(now - g.charged_to);
            }
            g.charged_to = now;
            g.contended = waiting.contains_key(&d);
            match holder {
                None => {
                    st.grants.remove(&d);
                }
                Some(s) => {
                    if !g.contended {
                        s.turn.set_others_due(g.epoch, false);
                    }
                    let n = s.turn.entered();
                    if n != g.entered.0 {
                        g.entered = (n, now);
                    }
                    st.grants.insert(d, g);
                }
            }
        }
        // Groups active now; one coming back starts level with the least
        // of those already active (no credit saved while away).
        let mut active: Vec<Group> = waiting.values().flatten().map(|s| s.group.clone()).collect();
        active.extend(st.grants.values().filter_map(|g| by_id.get(&g.session)).map(|s| s.group.clone()));
        active.sort();
        active.dedup();
        let floor = st.active.iter().filter_map(|g| st.vtime.get(g)).copied().fold(f64::INFINITY, f64::min);
        for g in &active {
            if !st.active.contains(g) && floor.is_finite() {
                let v = st.vtime.entry(g.clone()).or_insert(floor);
                *v = v.max(floor);
            }
        }
        st.active = active;
        st.waiting_since.retain(|id, _| by_id.contains_key(id));
        st.vtime.retain(|g, _| live.iter().any(|s| &s.group == g));
        let contended = !waiting.is_empty();
        for (d, mut w) in waiting {
            if let Some(g) = st.grants.get(&d).copied() {
                self.press(&mut st, d, g, &w, &by_id, now);
            }
            if st.grants.contains_key(&d) {
                continue;
            }
            w.sort_by(|a, b| {
                let va = st.vtime.get(&a.group).copied().unwrap_or(0.0);
                let vb = st.vtime.get(&b.group).copied().unwrap_or(0.0);
                va.total_cmp(&vb).then(st.waiting_since[&a.id].cmp(&st.waiting_since[&b.id])).then(a.id.cmp(&b.id))
            });
            st.epoch += 1;
            let epoch = st.epoch;
            let others = w.len() > 1;
            if let Some(s) = w.into_iter().find(|s| s.turn.grant(d, epoch)) {
                st.waiting_since.remove(&s.id);
                let g = Grant {
                    session: s.id,
                    epoch,
                    since: now,
                    charged_to: now,
                    contended: others,
                    entered: (s.turn.entered(), now),
                    asked: None,
                };
                st.grants.insert(d, g);
            }
        }
        contended
    }

    /// `waiting` wait for device `d`, held by grant `g` (charged up to
    /// now): take it back from a holder that idles; once the holder's
    /// tenant has had its share, let it give the turn back at its next
    /// synchronisation ([`super::Turn::leave_synced`]); ask for it once the
    /// slice is over and the holder's tenant has had its share (its virtual
    /// time has reached a waiting tenant's; a waiting session of its own
    /// tenant gets its turn after a slice); take it back by force past
    /// [`DRAIN_MAX`].
    fn press(&self, st: &mut State, d: usize, g: Grant, waiting: &[&Seen<'_>], by_id: &HashMap<u64, &Seen<'_>>, now: Instant) {
        let Some(s) = by_id.get(&g.session) else { return };
        let idle = now - g.entered.1 >= self.idle;
        let over = g.asked.is_some_and(|at| now - at >= DRAIN_MAX);
        if (idle || over) && s.turn.take_back(g.epoch, over) {
            if over {
                tracing::warn!(session = s.id, device = d, "a session kept its GPU turn past the drain limit; it was taken back");
            }
            st.grants.remove(&d);
            return;
        }
        let v = |group: &Group| st.vtime.get(group).copied().unwrap_or(0.0);
        let least = waiting.iter().filter(|w| w.group != s.group).map(|w| v(&w.group)).fold(f64::INFINITY, f64::min);
        let had_share = waiting.iter().any(|w| w.group == s.group) || v(&s.group) >= least;
        // Free to give back at its next synchronisation (nothing to drain).
        s.turn.set_others_due(g.epoch, had_share);
        if g.asked.is_none() && now - g.since >= self.slice && had_share {
            s.turn.ask_yield(g.epoch);
            if let Some(x) = st.grants.get_mut(&d) {
                x.asked = Some(now);
            }
        }
    }
}

/// Runs `arbiter` over the sessions on `roster` until `stop` is set and
/// the last session has ended (a session waiting for its turn must not be
/// left waiting by a backend that is shutting down).
pub fn run(
    arbiter: std::sync::Arc<Arbiter>,
    roster: std::sync::Arc<crate::roster::Roster>,
    tenants: Option<std::sync::Arc<crate::tenants::Tenants>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let share_of = move |name: &str| tenants.as_ref().map_or(1, |t| t.gpu_share(name));
    std::thread::Builder::new().name("pvgpu-gpu-turns".into()).spawn(move || {
        loop {
            if roster.is_empty() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                // Nobody to serve: look again soon, without a tick's cost.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let mut contended = false;
            roster.with_turns(&share_of, &mut |seen| contended = arbiter.tick(seen, Instant::now()));
            std::thread::sleep(if contended { TICK_CONTENDED } else { TICK });
        }
    })
}

fn charge(st: &mut State, group: &Group, share: u32, took: Duration) {
    let tenant = match group {
        Group::Tenant(name) => Some(name.clone()),
        Group::Session(_) => None,
    };
    *st.held.entry(tenant).or_default() += took;
    *st.vtime.entry(group.clone()).or_insert(0.0) += took.as_nanos() as f64 / f64::from(share.max(1));
}
