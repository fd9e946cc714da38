//! The other backends this one may move sessions to (`--peer`): their
//! names, control APIs and the addresses their guests reach them at. The
//! operator names them once; the control API and the dashboard then move
//! a session by a peer's name (`POST /v1/sessions/{id}/migrate`).

use pvgpu_ctl::client::{Control, Endpoint};
use std::path::PathBuf;
use std::str::FromStr;

/// Why a `--peer` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The option's text is not `name=..,control=..,address=..`.
    #[error(
        "--peer {0:?}: expected name=NAME,control=unix:PATH|https://HOST:PORT,address=local:PATH|tcp:HOST:PORT|tls:HOST:PORT[,token=FILE][,ca=FILE]: {1}"
    )]
    Syntax(String, String),
    /// Its token file cannot be read, or its TLS authority not used.
    #[error("--peer {name}: {reason}")]
    Open {
        /// The peer.
        name: String,
        /// Why.
        reason: String,
    },
}

/// A `--peer` as written: nothing read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    /// The operator's name for it.
    pub name: String,
    /// Its control API.
    pub control: Endpoint,
    /// Where guests reach it (`PVGPU_BACKEND`).
    pub address: String,
    /// Over https: a file holding its `--control-token`.
    pub token: Option<PathBuf>,
    /// Over https: the authority (PEM) that signed its certificate.
    pub ca: Option<PathBuf>,
}

impl FromStr for PeerSpec {
    type Err = PeerError;
    fn from_str(s: &str) -> Result<PeerSpec, PeerError> {
        let bad = |why: &str| PeerError::Syntax(s.to_string(), why.to_string());
        let (mut name, mut control, mut address, mut token, mut ca) = (None, None, None, None, None);
        for part in s.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(|| bad(&format!("{part:?} is not key=value")))?;
            let slot = match key {
                "name" => &mut name,
                "control" => &mut control,
                "address" => &mut address,
                "token" => &mut token,
                "ca" => &mut ca,
                _ => return Err(bad(&format!("unknown key {key:?}"))),
            };
            if slot.replace(value.to_string()).is_some() {
                return Err(bad(&format!("{key} given twice")));
            }
        }
        let name = name.filter(|n| valid_name(n)).ok_or_else(|| bad("name= is missing or not letters, digits, '-', '_', '.'"))?;
        let control = Endpoint::parse(&control.ok_or_else(|| bad("control= is missing"))?).map_err(|e| bad(&e))?;
        let address = address.ok_or_else(|| bad("address= is missing"))?;
        if !guest_address(&address) {
            return Err(bad("address= must be local:PATH, tcp:HOST:PORT or tls:HOST:PORT, at most 64 bytes"));
        }
        if matches!(control, Endpoint::Unix(_)) && token.is_some() {
            return Err(bad("token= is for an https control API"));
        }
        if matches!(control, Endpoint::Unix(_)) && ca.is_some() && !address.starts_with("tls:") {
            return Err(bad("ca= is for an https control API or a tls: address"));
        }
        Ok(PeerSpec { name, control, address, token: token.map(PathBuf::from), ca: ca.map(PathBuf::from) })
    }
}

/// Whether a guest may be sent to `address` (`STATUS_MOVED`): one a
/// program reaches (`local:`, `tcp:`, `tls:`, `rdma:`), at most 64 bytes,
/// no control characters.
pub fn guest_address(address: &str) -> bool {
    ["local:", "tcp:", "tls:", "rdma:"].iter().any(|p| address.starts_with(p))
        && address.len() <= pvgpu_ring::proto::MOVED_ADDRESS_MAX
        && !address.chars().any(char::is_control)
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A peer ready to be spoken to.
#[derive(Debug, Clone)]
pub struct Peer {
    /// How the API lists it.
    pub listed: pvgpu_ctl::api::Peer,
    /// Its control API.
    pub control: Control,
    /// For a `tls:` address: how this backend checks the peer's
    /// certificate when it sends it a copy (`ca=`, else the system's
    /// authorities).
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl PeerSpec {
    /// Reads the token and authority files: a peer whose files are wrong
    /// stops the backend at start, not a migration later.
    pub fn open(&self) -> Result<Peer, PeerError> {
        let open = |reason: String| PeerError::Open { name: self.name.clone(), reason };
        let token = match (&self.control, &self.token) {
            (Endpoint::Unix(_), _) => None,
            (_, Some(file)) => {
                let t = std::fs::read_to_string(file).map_err(|e| open(format!("cannot read the token file {}: {e}", file.display())))?;
                Some(t.trim().to_string())
            }
            (_, None) => return Err(open("an https control API needs token=FILE (the peer's --control-token)".into())),
        };
        let https_ca = if matches!(self.control, Endpoint::Unix(_)) { None } else { self.ca.as_deref() };
        let control = Control::at(self.control.clone(), token, https_ca).map_err(|e| open(e.to_string()))?;
        // Copies to a tls: peer need its authority; without one they pass
        // through the program (a peer used only to move sessions to needs
        // none).
        let tls = match (self.address.starts_with("tls:"), &self.ca) {
            (true, Some(_)) => Some(pvgpu_ctl::client::tls_config(self.ca.as_deref()).map_err(|e| open(e.to_string()))?),
            (true, None) => pvgpu_ctl::client::tls_config(None)
                .inspect_err(|e| tracing::warn!(peer = %self.name, error = %e, "no authority to check this peer's TLS certificate (ca=): copies to it pass through the program"))
                .ok(),
            (false, _) => None,
        };
        let listed = pvgpu_ctl::api::Peer { name: self.name.clone(), control: self.control.to_string(), address: self.address.clone() };
        Ok(Peer { listed, control, tls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_named_with_its_control_and_address() {
        let p: PeerSpec = "name=gpu2,control=unix:/run/pvgpu-2/control.sock,address=local:/run/pvgpu-2/pvgpu.sock".parse().unwrap();
        assert_eq!(p.name, "gpu2");
        assert_eq!(p.control, Endpoint::Unix("/run/pvgpu-2/control.sock".into()));
        assert_eq!(p.address, "local:/run/pvgpu-2/pvgpu.sock");
        let opened = p.open().unwrap();
        assert_eq!(opened.listed.control, "unix:/run/pvgpu-2/control.sock");

        let https: PeerSpec = "name=b,control=https://gpu-b:7310,address=tcp:gpu-b:7300,token=/nonexistent".parse().unwrap();
        let e = https.open().unwrap_err().to_string();
        assert!(e.contains("cannot read the token file"), "{e}");
        let e = "name=b,control=https://gpu-b:7310,address=tcp:gpu-b:7300".parse::<PeerSpec>().unwrap().open().unwrap_err();
        assert!(e.to_string().contains("needs token=FILE"), "{e}");
    }

    #[test]
    fn a_tls_peer_on_this_host_names_its_authority() {
        let spec: PeerSpec = "name=b,control=unix:/run/b.sock,address=tls:127.0.0.1:7301,ca=/etc/pvgpu/b-ca.pem".parse().unwrap();
        assert_eq!(spec.ca.as_deref(), Some(std::path::Path::new("/etc/pvgpu/b-ca.pem")));
        let e = spec.open().unwrap_err();
        assert!(e.to_string().contains("b-ca.pem"), "a missing authority file stops the backend at start: {e}");
    }

    #[test]
    fn malformed_peers_are_refused() {
        for bad in [
            "",
            "name=a",
            "name=a,control=unix:/c",
            "name=a,control=unix:/c,address=xen",
            "name=a b,control=unix:/c,address=local:/s",
            "name=a,control=ftp://x,address=local:/s",
            "name=a,control=unix:/c,address=local:/s,name=b",
            "name=a,control=unix:/c,address=local:/s,token=/t",
            "name=a,control=unix:/c,address=local:/s,ca=/ca.pem",
            "name=a,control=unix:/c,address=tls:h:1,token=/t",
            "name=a,control=unix:/c,address=local:/s,colour=red",
            &format!("name=a,control=unix:/c,address=tcp:{}:1", "h".repeat(64)),
        ] {
            assert!(bad.parse::<PeerSpec>().is_err(), "{bad:?} was taken");
        }
    }
}
