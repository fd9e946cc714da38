//! A fake xenstored for tests: an in-memory tree served over streams.
//!
//! It is not xenstored: transactions are applied as they go (a test drives
//! one step at a time, so isolation is never observed), permissions are
//! stored but not enforced (except that reads under `/denied` fail with
//! `EACCES`), and the caller's domain is always 3. Other crates get it with
//! the `fake-xenstore` feature, for unit tests of their XenStore logic.

use super::wire::Message;
use super::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The store's contents, test knobs and counters.
#[derive(Default)]
pub struct Fake {
    /// Path to (value, permission strings).
    pub nodes: BTreeMap<String, (Vec<u8>, Vec<String>)>,
    /// Commits to fail with EAGAIN before accepting one.
    pub eagain_commits: u32,
    /// Transactions committed.
    pub commits: u32,
    /// Transactions aborted.
    pub aborts: u32,
    /// Transactions started.
    pub next_tx: u32,
}

fn send(s: &mut UnixStream, ty: u32, req_id: u32, tx_id: u32, payload: &[u8]) -> std::io::Result<()> {
    s.write_all(&Message { ty, req_id, tx_id, payload: payload.to_vec() }.encode().unwrap())
}

fn abs(p: &str) -> String {
    if p.starts_with('/') || p.starts_with('@') { p.to_string() } else { format!("/local/domain/3/{p}") }
}

/// One client connection: its watches live here, the tree is shared.
struct Conn {
    s: UnixStream,
    watches: Vec<(String, String)>,
}

impl Conn {
    /// Fires this connection's watches on `path` (only writes made
    /// through this connection fire: enough for the tests).
    fn fire(&mut self, path: &str) -> std::io::Result<()> {
        for (w, t) in &self.watches {
            if path == w || path.starts_with(&format!("{w}/")) {
                send(&mut self.s, XsType::WatchEvent as u32, 0, 0, format!("{path}\0{t}\0").as_bytes())?;
            }
        }
        Ok(())
    }

    /// Serves requests until the client goes away.
    fn serve(mut self, store: &Mutex<Fake>) {
        let mut buf = Vec::new();
        loop {
            let m = loop {
                if let Some((m, used)) = Message::decode(&buf).unwrap() {
                    buf.drain(..used);
                    break m;
                }
                let mut chunk = [0u8; 8192];
                match self.s.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let mut f = store.lock().unwrap_or_else(PoisonError::into_inner);
            if self.handle(&mut f, m).is_err() {
                return;
            }
        }
    }

    fn handle(&mut self, f: &mut Fake, m: Message) -> std::io::Result<()> {
        let args: Vec<String> = m.payload.split(|b| *b == 0).map(|x| String::from_utf8_lossy(x).into_owned()).collect();
        let path = abs(&args[0]);
        let ty = XsType::from_u32(m.ty).unwrap();
        let reply: Result<Vec<u8>, &str> = match ty {
            XsType::Read if path.starts_with("/denied") => Err("EACCES"),
            XsType::Read => f.nodes.get(&path).map(|n| n.0.clone()).ok_or("ENOENT"),
            XsType::Write => f.write(&path, Some(m.payload[args[0].len() + 1..].to_vec())),
            XsType::Mkdir => f.write(&path, None),
            XsType::Rm => f.rm(&path),
            XsType::Directory => f.directory(&path),
            XsType::GetPerms => {
                f.nodes.get(&path).map(|n| n.1.iter().flat_map(|p| format!("{p}\0").into_bytes()).collect()).ok_or("ENOENT")
            }
            XsType::SetPerms => f.set_perms(&path, &args[1..]),
            XsType::TransactionStart => {
                f.next_tx += 1;
                Ok(format!("{}\0", 40 + f.next_tx).into_bytes())
            }
            XsType::TransactionEnd => f.end_transaction(args[0] == "T"),
            XsType::Watch => {
                // The initial firing, sent *before* the reply to
                // exercise interleaving.
                send(&mut self.s, XsType::WatchEvent as u32, 0, 0, format!("{}\0{}\0", args[0], args[1]).as_bytes())?;
                self.watches.push((path.clone(), args[1].clone()));
                Ok(b"OK\0".to_vec())
            }
            XsType::Unwatch => {
                self.watches.retain(|(p, t)| !(p == &path && t == &args[1]));
                Ok(b"OK\0".to_vec())
            }
            XsType::GetDomainPath => Ok(format!("/local/domain/{}\0", args[0]).into_bytes()),
            _ => Err("ENOSYS"),
        };
        match reply {
            Ok(p) => send(&mut self.s, m.ty, m.req_id, m.tx_id, &p)?,
            Err(e) => send(&mut self.s, XsType::Error as u32, m.req_id, m.tx_id, format!("{e}\0").as_bytes())?,
        }
        if matches!(ty, XsType::Write | XsType::Rm | XsType::Mkdir) {
            self.fire(&path)?;
        }
        Ok(())
    }
}

impl Fake {
    /// Writes `value` at `path` (`None`: makes the node if missing), and
    /// every parent.
    fn write(&mut self, path: &str, value: Option<Vec<u8>>) -> Result<Vec<u8>, &'static str> {
        let mut p = path.to_string();
        while let Some(i) = p.rfind('/').filter(|i| *i > 0) {
            p.truncate(i);
            self.nodes.entry(p.clone()).or_insert((Vec::new(), vec!["n0".into()]));
        }
        match value {
            Some(v) => {
                self.nodes.insert(path.to_string(), (v, vec!["n0".into()]));
            }
            None => {
                self.nodes.entry(path.to_string()).or_insert((Vec::new(), vec!["n0".into()]));
            }
        }
        Ok(b"OK\0".to_vec())
    }

    /// Removes `path` and everything under it.
    fn rm(&mut self, path: &str) -> Result<Vec<u8>, &'static str> {
        let before = self.nodes.len();
        self.nodes.retain(|k, _| !(k == path || k.starts_with(&format!("{path}/"))));
        if self.nodes.len() == before { Err("ENOENT") } else { Ok(b"OK\0".to_vec()) }
    }

    /// The children of `path`, NUL-separated.
    fn directory(&self, path: &str) -> Result<Vec<u8>, &'static str> {
        let prefix = format!("{path}/");
        let mut out = Vec::new();
        for k in self.nodes.keys().filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/')) {
            out.extend_from_slice(&k.as_bytes()[prefix.len()..]);
            out.push(0);
        }
        if self.nodes.contains_key(path) { Ok(out) } else { Err("ENOENT") }
    }

    fn set_perms(&mut self, path: &str, perms: &[String]) -> Result<Vec<u8>, &'static str> {
        let n = self.nodes.get_mut(path).ok_or("ENOENT")?;
        n.1 = perms.iter().filter(|a| !a.is_empty()).cloned().collect();
        Ok(b"OK\0".to_vec())
    }

    /// Commits (`EAGAIN` while `eagain_commits` lasts) or aborts.
    fn end_transaction(&mut self, commit: bool) -> Result<Vec<u8>, &'static str> {
        if !commit {
            self.aborts += 1;
        } else if self.eagain_commits > 0 {
            self.eagain_commits -= 1;
            return Err("EAGAIN");
        } else {
            self.commits += 1;
        }
        Ok(b"OK\0".to_vec())
    }
}

/// A store several connections share.
#[derive(Clone)]
pub struct SharedFake(Arc<Mutex<Fake>>);

impl SharedFake {
    /// A store holding `f`'s nodes (plus this domain's `domid` key).
    pub fn new(mut f: Fake) -> Self {
        f.nodes.insert("/local/domain/3/domid".into(), (b"3".to_vec(), vec!["n3".into()]));
        SharedFake(Arc::new(Mutex::new(f)))
    }

    /// A new client connection, served by its own thread until the
    /// client drops it.
    pub fn connect(&self) -> XenStore {
        let (a, b) = UnixStream::pair().unwrap();
        let store = Arc::clone(&self.0);
        std::thread::spawn(move || Conn { s: b, watches: Vec::new() }.serve(&store));
        XenStore::over(a)
    }

    /// Runs `f` on the store's contents.
    pub fn with<R>(&self, f: impl FnOnce(&mut Fake) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A client connected to a fresh store holding `f`; joining the handle
/// (after dropping the client) gives the store back.
pub fn connect(f: Fake) -> (XenStore, std::thread::JoinHandle<Fake>) {
    let (a, b) = UnixStream::pair().unwrap();
    let shared = SharedFake::new(f);
    let t = std::thread::spawn(move || {
        Conn { s: b, watches: Vec::new() }.serve(&shared.0);
        std::mem::take(&mut *shared.0.lock().unwrap_or_else(PoisonError::into_inner))
    });
    (XenStore::over(a), t)
}
