//! The supervisor's table of exported objects, by token.

use super::{IpcError, IpcObject};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The 128 random bits a program's handle carries.
pub type Token = [u8; 16];

/// Exports one session may hold at once.
pub const MAX_PER_SESSION: usize = 4096;
/// Exports the backend holds at once.
pub const MAX_TOTAL: usize = 1 << 16;

struct Entry {
    scope: Arc<str>,
    session: u64,
    kind: u32,
    size: u64,
    object: IpcObject,
}

/// Exported objects, by token.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<HashMap<Token, Entry>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("exports", &self.lock().len()).finish()
    }
}

/// 128 random bits from the kernel.
pub(crate) fn random_token() -> Result<Token, IpcError> {
    let mut t = [0u8; 16];
    let mut got = 0;
    while got < t.len() {
        // SAFETY: getrandom writes at most the given length into the valid,
        // writable rest of `t`.
        let r = unsafe { libc::getrandom(t[got..].as_mut_ptr().cast(), t.len() - got, 0) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(IpcError::Unreachable);
        }
        got += r as usize;
    }
    Ok(t)
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `object` (`size` bytes of `kind`) of session `session` of
    /// `scope`, and returns its new token.
    pub fn export(&self, scope: &Arc<str>, session: u64, kind: u32, size: u64, object: IpcObject) -> Result<Token, IpcError> {
        let token = random_token()?;
        let mut e = self.lock();
        if e.len() >= MAX_TOTAL || e.values().filter(|x| x.session == session).count() >= MAX_PER_SESSION {
            return Err(IpcError::Full);
        }
        e.insert(token, Entry { scope: scope.clone(), session, kind, size, object });
        Ok(token)
    }

    /// The object of `kind` under `token`, for session `session` of `scope`:
    /// refused as unknown to other scopes, and as its own to the exporting
    /// session.
    pub fn import(&self, scope: &str, session: u64, kind: u32, token: &Token) -> Result<(u64, IpcObject), IpcError> {
        let e = self.lock();
        match e.get(token) {
            Some(x) if &*x.scope == scope && x.kind == kind && x.session == session => Err(IpcError::Own),
            Some(x) if &*x.scope == scope && x.kind == kind => Ok((x.size, x.object.clone())),
            _ => Err(IpcError::Unknown),
        }
    }

    /// Forgets `token`, if session `session` exported it.
    pub fn revoke(&self, session: u64, token: &Token) {
        let mut e = self.lock();
        if e.get(token).is_some_and(|x| x.session == session) {
            e.remove(token);
        }
    }

    /// Forgets everything session `session` exported (it ended).
    pub fn end_session(&self, session: u64) {
        self.lock().retain(|_, x| x.session != session);
    }

    /// Exports held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is exported.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_only_within_the_scope_and_not_by_the_exporter() {
        let r = Registry::default();
        let a: Arc<str> = "xen:3".into();
        let t = r.export(&a, 1, 1, 4096, IpcObject::default()).unwrap();
        assert_eq!(r.import("xen:3", 2, 1, &t).map(|x| x.0), Ok(4096));
        assert_eq!(r.import("xen:4", 3, 1, &t).map(|x| x.0), Err(IpcError::Unknown));
        assert_eq!(r.import("xen:3", 1, 1, &t).map(|x| x.0), Err(IpcError::Own));
        assert_eq!(r.import("xen:3", 2, 2, &t).map(|x| x.0), Err(IpcError::Unknown));
        r.revoke(2, &t);
        assert!(r.import("xen:3", 2, 1, &t).is_ok(), "only the exporter revokes");
        r.end_session(1);
        assert!(r.is_empty());
    }

    #[test]
    fn tokens_differ_and_a_session_is_capped() {
        let r = Registry::default();
        let s: Arc<str> = "uid:1000".into();
        let a = r.export(&s, 1, 1, 1, IpcObject::default()).unwrap();
        let b = r.export(&s, 1, 1, 1, IpcObject::default()).unwrap();
        assert_ne!(a, b);
        for _ in 2..MAX_PER_SESSION {
            r.export(&s, 1, 1, 1, IpcObject::default()).unwrap();
        }
        assert_eq!(r.export(&s, 1, 1, 1, IpcObject::default()), Err(IpcError::Full));
        assert!(r.export(&s, 2, 1, 1, IpcObject::default()).is_ok());
    }
}
