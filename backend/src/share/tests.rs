use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Words([AtomicU64; 3]);

impl Words {
    fn turn(&self) -> Turn<'_> {
        Turn::new(&self.0[0], &self.0[1], &self.0[2])
    }

    /// The session waits for `device`, as its `enter` would say.
    fn want(&self, device: u64) {
        self.0[1].store(device + 1, Ordering::Relaxed);
    }
}

/// Two sessions of tenants `t0` and `t1`, share 1 each, as the arbiter
/// sees them.
fn seen(w: &[Words; 2]) -> Vec<Seen<'_>> {
    (0..2).map(|i| Seen { id: i, group: Group::Tenant(format!("t{i}")), share: 1, turn: w[i as usize].turn() }).collect()
}

#[test]
fn a_turn_is_entered_yielded_after_a_drain_and_taken_back_only_when_idle() {
    let w = Words::default();
    let t = w.turn();
    assert_eq!(t.held(), None);
    assert!(t.grant(2, 7));
    assert!(!t.grant(2, 8), "a second grant over a held turn fails");
    t.enter(2, &|| false, &mut |_| panic!("no drain while the turn is ours"));
    assert_eq!(t.held(), Some(Held { device: 2, epoch: 7, busy: true, yielding: false, others_due: false }));
    assert!(!t.take_back(7, false), "a busy turn is not taken back");
    t.leave();
    t.ask_yield(7);
    assert!(t.held().unwrap().yielding);
    // Asked to yield: the next command drains device 2, gives the turn
    // back, and waits (here: stops waiting at once).
    let mut drained = Vec::new();
    t.enter(2, &|| true, &mut |d| drained.push(d));
    assert_eq!(drained, [2]);
    assert_eq!(t.held(), None);
    assert_eq!(t.wants(), None, "a stopping session waits for nothing");
    // An idle holder is taken back without a drain.
    assert!(t.grant(0, 9));
    assert!(t.take_back(9, false));
    assert!(t.take_back(9, false), "taken back already: gone");
    // A command on another device gives back the turn held here.
    assert!(t.grant(1, 10));
    let mut drained = Vec::new();
    t.enter(3, &|| true, &mut |d| drained.push(d));
    assert_eq!(drained, [1]);
    assert_eq!(t.held(), None);
    // A busy holder past the limit is taken back by force.
    assert!(t.grant(3, 11));
    t.enter(3, &|| false, &mut |_| {});
    assert!(t.take_back(11, true));
    t.leave();
    assert_eq!(t.held(), None, "leaving after a forced take-back leaves no turn");
}

#[test]
fn a_synchronised_holder_gives_back_only_when_others_wait() {
    let w = Words::default();
    let t = w.turn();
    assert!(t.grant(1, 3));
    t.enter(1, &|| false, &mut |_| panic!("no drain while the turn is ours"));
    assert!(!t.leave_synced(&mut |_| panic!("nobody waits: no drain")), "alone, the turn stays");
    assert_eq!(t.held().map(|h| h.busy), Some(false));
    t.set_others_due(2, true);
    assert!(!t.held().unwrap().others_due, "another grant's flag is not set");
    t.set_others_due(3, true);
    assert!(t.held().unwrap().others_due);
    // A command that did not synchronise keeps the turn to the end of the
    // slice, contended or not.
    t.enter(1, &|| false, &mut |_| panic!("no drain"));
    t.leave();
    assert!(t.held().is_some());
    // One that did gives it back, after draining the device's other work.
    t.enter(1, &|| false, &mut |_| panic!("no drain"));
    let mut drained = Vec::new();
    assert!(t.leave_synced(&mut |d| drained.push(d)));
    assert_eq!(drained, [1]);
    assert_eq!(t.held(), None);
    assert_eq!(t.wants(), None, "it gave back; it waits only when its next command comes");
}

#[test]
fn the_arbiter_tells_the_holder_when_others_wait() {
    let w: [Words; 2] = Default::default();
    let arbiter = Arbiter::new(Duration::from_millis(10));
    let t0 = Instant::now();
    w[0].want(0);
    arbiter.tick(&seen(&w), t0);
    assert!(!w[0].turn().held().unwrap().others_due, "alone: not contended");
    w[0].turn().enter(0, &|| false, &mut |_| {});
    w[1].want(0);
    arbiter.tick(&seen(&w), t0 + TICK);
    assert!(w[0].turn().held().unwrap().others_due);
    // It synchronises and gives back; the next tick grants the other.
    assert!(w[0].turn().leave_synced(&mut |_| {}));
    arbiter.tick(&seen(&w), t0 + 2 * TICK);
    assert_eq!(w[1].turn().held().map(|h| h.device), Some(0));
    assert!(!w[1].turn().held().unwrap().others_due, "nobody else waits");
}

#[test]
fn a_holder_with_the_larger_share_is_due_to_give_back_only_after_its_share() {
    let w: [Words; 2] = Default::default();
    let seen: Vec<Seen<'_>> = (0..2)
        .map(|i| Seen { id: i, group: Group::Tenant(format!("t{i}")), share: [3, 1][i as usize], turn: w[i as usize].turn() })
        .collect();
    let arbiter = Arbiter::new(Duration::from_millis(10));
    let t0 = Instant::now();
    w[1].want(0);
    arbiter.tick(&seen, t0);
    w[1].turn().enter(0, &|| false, &mut |_| {});
    w[0].want(0);
    // t1 holds while t0 waits (charged 5 ms: to the tick that sees the
    // turn given back), then gives back at a synchronisation.
    arbiter.tick(&seen, t0 + TICK);
    arbiter.tick(&seen, t0 + 5 * TICK);
    assert!(w[1].turn().leave_synced(&mut |_| {}));
    arbiter.tick(&seen, t0 + 6 * TICK);
    w[0].turn().enter(0, &|| false, &mut |_| {});
    w[1].want(0);
    // t0 (share 3) has had its share only once it held three times as
    // long, 15 ms charged from the tick after its grant.
    let mut at = t0 + 6 * TICK;
    let mut due_after = None;
    for ms in 1..=20 {
        at += TICK;
        arbiter.tick(&seen, at);
        if w[0].turn().held().unwrap().others_due {
            due_after = Some(ms);
            break;
        }
    }
    let ms = due_after.expect("t0 becomes due to give back");
    assert!((15..=17).contains(&ms), "t0 was due after {ms} ms, expected 16 (3 x 5 ms, and the tick of its grant)");
}

/// Runs `shares.len()` sessions that each keep device 0 busy with `work`
/// per command for `run`, under one arbiter; returns the commands each ran
/// and the time each group held.
fn contend(shares: &[u32], work: Duration, run: Duration) -> (Vec<u64>, Vec<(Option<String>, Duration)>) {
    let words: Arc<Vec<Words>> = Arc::new(shares.iter().map(|_| Words::default()).collect());
    let arbiter = Arc::new(Arbiter::new(Duration::from_millis(10)));
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (words, arbiter, stop, shares) = (words.clone(), arbiter.clone(), stop.clone(), shares.to_vec());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let seen: Vec<Seen<'_>> = words
                    .iter()
                    .enumerate()
                    .map(|(i, w)| Seen { id: i as u64, group: Group::Tenant(format!("t{i}")), share: shares[i], turn: w.turn() })
                    .collect();
                arbiter.tick(&seen, Instant::now());
                std::thread::sleep(TICK);
            }
        })
    };
    let sessions: Vec<_> = (0..shares.len())
        .map(|i| {
            let (words, stop) = (words.clone(), stop.clone());
            std::thread::spawn(move || {
                let t = words[i].turn();
                let mut n = 0u64;
                let mut queued = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    t.enter(0, &|| stop.load(Ordering::Relaxed), &mut |_| std::thread::sleep(std::mem::take(&mut queued)));
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Half of the work runs in the command, half is left
                    // queued for the drain, as asynchronous launches do.
                    std::thread::sleep(work / 2);
                    queued += work / 2;
                    t.leave();
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let counts = sessions.into_iter().map(|h| h.join().unwrap()).collect();
    ticker.join().unwrap();
    (counts, arbiter.held())
}

#[test]
fn turns_follow_the_shares() {
    let (counts, held) = contend(&[3, 1], Duration::from_micros(400), Duration::from_millis(1500));
    let ms = |g: &str| held.iter().find(|(t, _)| t.as_deref() == Some(g)).map_or(0.0, |(_, d)| d.as_secs_f64() * 1e3);
    let ratio = ms("t0") / ms("t1");
    assert!((2.0..=4.5).contains(&ratio), "held time 3:1 expected, got {:.0} ms : {:.0} ms ({counts:?})", ms("t0"), ms("t1"));
    let done = counts[0] as f64 / counts[1].max(1) as f64;
    assert!((1.8..=5.0).contains(&done), "work done 3:1 expected, got {counts:?}");
}

#[test]
fn equal_shares_split_evenly_and_a_lone_session_is_never_stopped() {
    let (counts, _) = contend(&[1, 1], Duration::from_micros(400), Duration::from_millis(1000));
    let done = counts[0] as f64 / counts[1].max(1) as f64;
    assert!((0.6..=1.6).contains(&done), "even split expected, got {counts:?}");
    let (counts, held) = contend(&[1], Duration::from_micros(400), Duration::from_millis(300));
    assert!(counts[0] > 200, "a lone session runs freely: {counts:?}");
    assert!(held.is_empty(), "a lone session's turn is never asked back: {held:?}");
}

#[test]
fn a_session_that_keeps_its_turn_busy_loses_it_after_the_drain_limit() {
    let w = [Words::default(), Words::default()];
    let arbiter = Arbiter::new(Duration::from_millis(1));
    let t0 = Instant::now();
    w[0].want(0); // session 0 wants device 0
    arbiter.tick(&seen(&w), t0);
    let h = w[0].turn().held().expect("granted");
    w[0].turn().enter(0, &|| false, &mut |_| {});
    w[1].want(0); // session 1 waits
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(5));
    assert!(w[0].turn().held().unwrap().yielding, "asked to yield after its slice");
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(500));
    assert_eq!(w[0].turn().held().map(|x| x.epoch), Some(h.epoch), "busy within the limit: kept");
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(5) + DRAIN_MAX);
    assert_eq!(w[0].turn().held(), None, "taken back past the limit");
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(6) + DRAIN_MAX);
    assert_eq!(w[1].turn().held().map(|x| x.device), Some(0), "the waiting session has the turn");
}

#[test]
fn time_held_alone_is_not_charged_and_an_idle_holder_gives_way() {
    let w = [Words::default(), Words::default()];
    let arbiter = Arbiter::new(Duration::from_millis(20));
    let t0 = Instant::now();
    w[0].want(0);
    arbiter.tick(&seen(&w), t0);
    w[0].turn().enter(0, &|| false, &mut |_| {});
    w[0].turn().leave();
    // Ten seconds alone on the GPU, then session 1 comes.
    arbiter.tick(&seen(&w), t0 + Duration::from_secs(10));
    w[1].want(0);
    arbiter.tick(&seen(&w), t0 + Duration::from_secs(10));
    assert!(w[0].turn().held().is_some(), "not idle long enough yet");
    let later = t0 + Duration::from_secs(10) + Duration::from_millis(6);
    arbiter.tick(&seen(&w), later);
    assert_eq!(w[0].turn().held(), None, "an idle holder loses its turn before its slice ends");
    assert_eq!(w[1].turn().held().map(|h| h.device), Some(0), "and the waiting session has it");
    let held = arbiter.held();
    assert!(held.iter().all(|(_, d)| *d <= Duration::from_millis(6)), "only contended time is charged: {held:?}");
}

#[test]
fn a_holder_out_of_a_long_command_is_not_idle() {
    let w = [Words::default(), Words::default()];
    let arbiter = Arbiter::new(Duration::from_millis(20));
    let t0 = Instant::now();
    w[0].want(0);
    arbiter.tick(&seen(&w), t0);
    // Session 0 synchronises for 10 ms while session 1 waits.
    w[0].turn().enter(0, &|| false, &mut |_| {});
    w[1].want(0);
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(1));
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(10));
    assert!(w[0].turn().held().is_some(), "busy: kept");
    w[0].turn().leave();
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(11));
    assert!(w[0].turn().held().is_some(), "just out of its command: not idle");
    arbiter.tick(&seen(&w), t0 + Duration::from_millis(17));
    assert_eq!(w[0].turn().held(), None, "idle for a quarter slice since: taken back");
}
