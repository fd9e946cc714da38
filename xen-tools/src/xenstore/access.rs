//! Operations valid both on a connection and inside a transaction.

use super::wire::{Perm, path_arg, strings, truncate};
use crate::XenError;
use crate::abi::{XENSTORE_PAYLOAD_MAX, XsType};

/// Operations valid both on a connection and inside a transaction.
///
/// Relative paths are resolved by xenstored against the caller's domain
/// directory (`/local/domain/<domid>`).
pub trait XsAccess {
    /// Sends one request of type `ty` and returns the reply's payload. An
    /// `XS_ERROR` reply becomes [`XenError::Store`].
    fn request(&mut self, ty: XsType, payload: &[u8]) -> Result<Vec<u8>, XenError>;

    /// The value at `path` (raw bytes, as written).
    fn read(&mut self, path: &str) -> Result<Vec<u8>, XenError> {
        self.request(XsType::Read, &path_arg(path)?)
    }

    /// The value at `path`, or `None` if the node does not exist.
    fn try_read(&mut self, path: &str) -> Result<Option<Vec<u8>>, XenError> {
        match self.read(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The value at `path` as UTF-8, without trailing NULs.
    fn read_string(&mut self, path: &str) -> Result<String, XenError> {
        let mut v = self.read(path)?;
        while v.last() == Some(&0) {
            v.pop();
        }
        String::from_utf8(v).map_err(|e| XenError::BadValue { path: path.into(), value: truncate(e.as_bytes()), expected: "UTF-8 text" })
    }

    /// Writes `value` at `path`, creating the node (and missing parents).
    fn write(&mut self, path: &str, value: &[u8]) -> Result<(), XenError> {
        let mut p = path_arg(path)?;
        if p.len() + value.len() > XENSTORE_PAYLOAD_MAX {
            return Err(XenError::InvalidArgument(format!(
                "XenStore value of {} bytes at {path:?} is too large: path and value together must fit in {XENSTORE_PAYLOAD_MAX} bytes",
                value.len()
            )));
        }
        p.extend_from_slice(value);
        self.request(XsType::Write, &p).map(drop)
    }

    /// Creates an empty node at `path` (nothing happens if it exists).
    fn mkdir(&mut self, path: &str) -> Result<(), XenError> {
        self.request(XsType::Mkdir, &path_arg(path)?).map(drop)
    }

    /// Removes `path` and everything under it.
    fn rm(&mut self, path: &str) -> Result<(), XenError> {
        self.request(XsType::Rm, &path_arg(path)?).map(drop)
    }

    /// Removes `path` and everything under it if it exists; says whether it
    /// did.
    fn try_rm(&mut self, path: &str) -> Result<bool, XenError> {
        match self.rm(path) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The names of `path`'s children.
    fn directory(&mut self, path: &str) -> Result<Vec<String>, XenError> {
        let reply = self.request(XsType::Directory, &path_arg(path)?)?;
        strings(&reply)
            .map(|s| {
                String::from_utf8(s.to_vec()).map_err(|_| XenError::BadValue {
                    path: path.into(),
                    value: truncate(s),
                    expected: "UTF-8 child names",
                })
            })
            .collect()
    }

    /// `path`'s permission list (owner first).
    fn get_perms(&mut self, path: &str) -> Result<Vec<Perm>, XenError> {
        let reply = self.request(XsType::GetPerms, &path_arg(path)?)?;
        strings(&reply)
            .map(|s| {
                std::str::from_utf8(s)
                    .map_err(|_| XenError::BadValue { path: path.into(), value: truncate(s), expected: "a permission string" })?
                    .parse::<Perm>()
                    .map_err(|e| match e {
                        XenError::BadValue { value, expected, .. } => XenError::BadValue { path: path.into(), value, expected },
                        e => e,
                    })
            })
            .collect()
    }

    /// Replaces `path`'s permission list; `perms[0]` names the owner and the
    /// default access.
    fn set_perms(&mut self, path: &str, perms: &[Perm]) -> Result<(), XenError> {
        if perms.is_empty() {
            return Err(XenError::InvalidArgument("a XenStore permission list needs at least the owner entry".into()));
        }
        let mut p = path_arg(path)?;
        for perm in perms {
            p.extend_from_slice(perm.to_string().as_bytes());
            p.push(0);
        }
        if p.len() > XENSTORE_PAYLOAD_MAX {
            return Err(XenError::InvalidArgument(format!("{} permissions do not fit in one XenStore message", perms.len())));
        }
        self.request(XsType::SetPerms, &p).map(drop)
    }
}
