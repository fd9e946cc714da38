//! Binding the control socket so that only the backend's user can open it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Why the control socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another backend answers there.
    #[error(
        "Another pvgpu backend serves the control socket {path}: stop it, or give this one --control unix:OTHER_PATH (or --control off)"
    )]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// Making the directory, binding or setting permissions failed.
    #[error("Cannot open the control socket {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The HTTP server could not start on the socket.
    #[error("Cannot serve the control socket {path}: {message}")]
    Serve {
        /// The socket.
        path: PathBuf,
        /// What the server said.
        message: String,
    },
}

/// Makes the socket's directory (owner-only, if this call makes it),
/// clears a stale socket left by a backend that died, binds, and makes the
/// socket owner-only.
pub(super) fn bind(path: &Path) -> Result<tiny_http::Server, SocketError> {
    let io_err = |source| SocketError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_err)?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(SocketError::InUse { path: path.to_path_buf() });
        }
        std::fs::remove_file(path).map_err(io_err)?;
    }
    let server = tiny_http::Server::http_unix(path).map_err(|e| SocketError::Serve { path: path.to_path_buf(), message: e.to_string() })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    Ok(server)
}
