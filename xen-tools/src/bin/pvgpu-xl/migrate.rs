//! `pvgpu-xl migrate`: `xl migrate` of a guest whose programs hold GPU
//! sessions, to another host or to this one.
//!
//! As for `save` (see `save.rs`), a session's ring and event channel do
//! not survive the guest's move: its GPU state must leave the backend
//! first, at a point its program knows of. So the guest's devices go
//! offline and its sessions are checkpointed into a folder (owner-only);
//! for another host the folder is copied there, through the same remote
//! shell `xl migrate` uses; then `xl migrate` runs. Where the guest runs
//! on this host afterwards (a migration to this host), its devices and
//! sessions are handed to the new domain here (`adopt`); on another host,
//! `pvgpu-xl adopt FOLDER` runs there. The sessions are scoped to the
//! guest's virtual machine UUID, which the migration keeps.
//!
//! Where anything fails before the guest has left, its sessions go back to
//! this backend and its devices come back online: the guest runs on here
//! as before.

use super::resolve;
use super::save::{Job, adopt, xl};
use anyhow::{Context, Result, bail};
use pvgpu_ctl::client::Control;
use pvgpu_xen::XenStore;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where the guest goes, and how to reach that host: `ssh` as `xl
/// migrate -s` takes it (a command `sh` runs with the host and a command
/// after it).
pub(super) struct Target<'a> {
    pub(super) host: &'a str,
    pub(super) ssh: &'a str,
}

impl Target<'_> {
    /// Whether the host is this one.
    fn is_here(&self) -> bool {
        let me = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        matches!(self.host, "localhost" | "::1") || self.host.starts_with("127.") || self.host == me.trim()
    }

    /// `command` run on the host through the remote shell, its input
    /// `input` if any.
    fn run(&self, command: &str, input: Option<Stdio>) -> Result<()> {
        let line = format!("{} {} {}", self.ssh, quote(self.host), quote(command));
        let mut c = Command::new("sh");
        c.arg("-c").arg(&line);
        if let Some(i) = input {
            c.stdin(i);
        }
        let status = c.status().with_context(|| format!("cannot run `{line}`"))?;
        if !status.success() {
            bail!("`{line}` failed ({status})");
        }
        Ok(())
    }

    /// Copies folder `dir` to folder `there` on the host, owner-only.
    fn send(&self, dir: &Path, there: &Path) -> Result<()> {
        let d = quote(&there.display().to_string());
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(dir)
            .args(["-cf", "-", "."])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot run tar to send the guest's GPU sessions")?;
        let out = tar.stdout.take().context("tar's output")?;
        let sent = self.run(&format!("umask 077 && mkdir -p {d} && tar -C {d} -xf - && chmod 700 {d}"), Some(Stdio::from(out)));
        let tarred = tar.wait().context("waiting for tar")?;
        sent?;
        if !tarred.success() {
            bail!("tar of {} failed ({tarred})", dir.display());
        }
        Ok(())
    }
}

/// `s` quoted for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `migrate`: the guest's sessions checkpointed into `dir` (sent to the
/// host), `xl migrate`, then the sessions handed to the guest where it
/// runs now.
pub(super) fn migrate(
    xs: &mut XenStore,
    control: &Control,
    domain: &str,
    to: &Target<'_>,
    dir: &Path,
    timeout: u64,
    backend: u16,
) -> Result<()> {
    let domid = resolve(xs, domain)?;
    let dir = std::path::absolute(dir).with_context(|| format!("cannot make {} absolute", dir.display()))?;
    let job = Job { control, domid, backend, timeout, dir: &dir };
    let here = to.is_here();
    let go = || {
        if !here {
            to.send(&dir, &dir).with_context(|| format!("sending the guest's GPU sessions to {}", to.host))?;
        }
        xl(&["migrate", "-s", to.ssh, &domid.to_string(), to.host])
    };
    let (saved, taken) = job.around(xs, "migrated", go)?;
    println!("domain {} migrated to {} with {taken} GPU session(s)", saved.name, to.host);
    if here {
        return adopt(xs, control, &dir, backend);
    }
    let d = dir.display().to_string();
    to.run(&format!("pvgpu-xl adopt {} --backend-domid {backend}", quote(&d)), None).with_context(|| {
        format!("the guest runs on {} now, but its GPU sessions were not handed to it: run `pvgpu-xl adopt {d}` there", to.host)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_a_word_whole() {
        assert_eq!(quote("/var/tmp/a b"), "'/var/tmp/a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn this_host_is_known_by_its_names() {
        let t = |host| Target { host, ssh: "ssh" }.is_here();
        assert!(t("localhost") && t("127.0.0.1") && t("::1"));
        let me = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert!(t(me.trim()));
        assert!(!t("gpu-host-2.example"));
    }

    #[test]
    fn a_folder_travels_through_the_remote_shell() {
        // A remote shell that runs the command here.
        let tmp = std::env::temp_dir().join(format!("pvgpu-xl-send-{}", std::process::id()));
        let (from, to) = (tmp.join("from"), tmp.join("to"));
        std::fs::create_dir_all(&from).unwrap();
        std::fs::write(from.join("session-1.pvgpu"), b"snapshot").unwrap();
        std::fs::write(from.join("domain"), b"name=domu\n").unwrap();
        let target = Target { host: "remote", ssh: r#"sh -c 'eval "$1"'"# };
        target.send(&from, &to).unwrap();
        assert_eq!(std::fs::read(to.join("session-1.pvgpu")).unwrap(), b"snapshot");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&to).unwrap().permissions().mode() & 0o777, 0o700, "owner-only");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
