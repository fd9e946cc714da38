//! `pvgpu-xl save` and `pvgpu-xl restore`: `xl save` and `xl restore` of a
//! guest whose programs hold GPU sessions.
//!
//! A guest's grants and event channels do not survive a save: the restored
//! guest is a new domain, and a session's ring went with the old one. The
//! GPU state stays in the backend only if it leaves the session first, at
//! a point where the program knows it left. So `save` takes the guest's
//! devices offline (no new connection), checkpoints each of the guest's
//! sessions through the backend's control API (the session leaves at its
//! program's next call that waits for a reply, which tells the program so;
//! the backend writes nothing into the guest after that, and the program
//! lets go of its event channel), waits until no worker maps a ring and no
//! device is claimed, and then runs `xl save`. A guest must hold no event
//! channel of a ring when it is saved: its kernel forgets every port across
//! `xl restore`, and unbinding one afterwards crashes its evtchn driver.
//! `restore` runs `xl restore`, gives the new domain as many vgpu devices
//! as the old one had, and hands the snapshots back to the backend. Each
//! program's next call claims a device of the restored guest and takes its
//! session back with its token: the backend scopes a Xen guest's snapshots
//! to its virtual machine's UUID, which `xl restore` keeps, not to its
//! domain id, which changes.
//!
//! The snapshots go into `FILE.pvgpu/`, owner-only, beside the save file,
//! with a small description of the domain (`domain`).

use super::{attach, devices, resolve};
use anyhow::{Context, Result, bail};
use pvgpu_ctl::api::{CheckpointRequest, RestoreRequest};
use pvgpu_ctl::client::Control;
use pvgpu_xen::vgpu::{self, be, fe};
use pvgpu_xen::xenbus::read_state;
use pvgpu_xen::{XenStore, XenbusState, XsAccess};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What `save` records of the domain for `restore`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Saved {
    pub(super) name: String,
    uuid: String,
    devices: u32,
}

impl Saved {
    fn render(&self) -> String {
        format!("name={}\nuuid={}\ndevices={}\n", self.name, self.uuid, self.devices)
    }

    fn parse(s: &str) -> Option<Saved> {
        let field = |k: &str| s.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')).map(str::to_string);
        Some(Saved { name: field("name")?, uuid: field("uuid")?, devices: field("devices")?.parse().ok()? })
    }
}

/// The folder of `file`'s snapshots.
fn folder(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".pvgpu");
    PathBuf::from(p)
}

/// Domain `domid`'s name and its virtual machine's UUID.
pub(super) fn identity(xs: &mut XenStore, domid: u16) -> Result<(String, String)> {
    let home = format!("/local/domain/{domid}");
    let name = xs.read_string(&format!("{home}/name")).with_context(|| format!("reading the name of domain {domid}"))?;
    let vm = xs.read_string(&format!("{home}/vm")).with_context(|| format!("reading the vm path of domain {domid}"))?;
    let uuid = xs.read_string(&format!("{vm}/uuid")).with_context(|| format!("reading the UUID of domain {domid} ({vm}/uuid)"))?;
    Ok((name, uuid))
}

pub(super) fn xl(args: &[&str]) -> Result<()> {
    let status = Command::new("xl").args(args).status().context("cannot run xl (is the Xen toolstack installed?)")?;
    if !status.success() {
        bail!("`xl {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Takes domain `domid`'s vgpu devices offline (`online` = 0: the backend
/// closes those without a session, and none can be claimed), or back
/// online.
fn set_online(xs: &mut XenStore, backend: u16, domid: u16, online: bool) -> Result<()> {
    for id in devices(xs, backend, domid)? {
        let key = vgpu::key(&vgpu::backend_dir(backend, domid, id), be::ONLINE);
        xs.write(&key, if online { b"1" } else { b"0" }).with_context(|| format!("writing {key}"))?;
    }
    Ok(())
}

/// Waits until every vgpu device of `domid` is closed and unclaimed: no
/// program of the guest holds a ring, a port or a claim when it is saved.
fn wait_quiet(xs: &mut XenStore, backend: u16, domid: u16, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let mut busy = Vec::new();
        for id in devices(xs, backend, domid)? {
            let closed = matches!(read_state(xs, &vgpu::backend_dir(backend, domid, id)), Ok(XenbusState::Closed | XenbusState::Unknown));
            let claimed = xs.try_read(&vgpu::key(&vgpu::frontend_dir(domid, id), fe::CLAIM))?.is_some();
            if !closed || claimed {
                busy.push(id);
            }
        }
        if busy.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("vgpu devices {busy:?} of domain {domid} were still in use after {} s", within.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Hands snapshots back to the backend (their programs resume where they
/// are); what could not be is reported, not fatal.
fn give_back(control: &Control, files: &[PathBuf]) -> usize {
    let mut back = 0;
    for f in files {
        match control.restore(&RestoreRequest { file: f.display().to_string(), handed_from: None }) {
            Ok(r) => {
                println!("session {} handed back to the backend ({} bytes of device state)", r.session, r.state_bytes);
                back += 1;
            }
            Err(e) => eprintln!("could not hand {} back to the backend: {e}", f.display()),
        }
    }
    back
}

/// `save`: checkpoint the guest's sessions, then `xl save`. Whatever fails
/// on the way, the sessions taken so far go back to the backend and the
/// devices come back online: the guest runs on as before.
pub(super) fn save(xs: &mut XenStore, control: &Control, domain: &str, file: &Path, timeout: u64, backend: u16) -> Result<()> {
    let domid = resolve(xs, domain)?;
    let file = std::path::absolute(file).with_context(|| format!("cannot make {} absolute", file.display()))?;
    let dir = folder(&file);
    let job = Job { control, domid, backend, timeout, dir: &dir };
    let xl_save = || xl(&["save", &domid.to_string(), &file.display().to_string()]);
    let (saved, taken) = job.around(xs, "saved", xl_save)?;
    println!("domain {} saved to {} with {taken} GPU session(s) in {}", saved.name, file.display(), dir.display());
    Ok(())
}

/// What `save` (or `migrate`) was asked.
pub(super) struct Job<'a> {
    pub(super) control: &'a Control,
    pub(super) domid: u16,
    pub(super) backend: u16,
    /// Seconds each session may take to reach a waited call.
    pub(super) timeout: u64,
    /// The folder of the guest's snapshots (made here, owner-only).
    pub(super) dir: &'a Path,
}

impl Job<'_> {
    /// Checkpoints the guest's sessions into the folder, then runs `then`
    /// (`xl save`, `xl migrate`). Where anything fails and the guest is
    /// still here, the sessions taken so far go back to the backend and the
    /// devices come back online: the guest runs on as before (`done`: what
    /// would have happened). Returns what was recorded of the domain and
    /// how many sessions went.
    pub(super) fn around(&self, xs: &mut XenStore, done: &str, then: impl FnOnce() -> Result<()>) -> Result<(Saved, usize)> {
        let (domid, dir) = (self.domid, self.dir);
        let (name, uuid) = identity(xs, domid)?;
        std::fs::DirBuilder::new().mode(0o700).create(dir).with_context(|| {
            format!("cannot create {} for the guest's GPU sessions (remove it if an earlier run left it)", dir.display())
        })?;
        let mut taken = Vec::new();
        let outcome = take(xs, self, Saved { name, uuid, devices: 0 }, &mut taken).and_then(|saved| then().map(|()| saved));
        match outcome {
            Ok(saved) => Ok((saved, taken.len())),
            Err(e) if matches!(xs.try_read(&format!("/local/domain/{domid}/name")), Ok(None)) => {
                Err(e.context(format!("domain {domid} is gone from this host: its GPU sessions stay in {}", dir.display())))
            }
            Err(e) => {
                let back = give_back(self.control, &taken);
                if let Err(e) = set_online(xs, self.backend, domid, true) {
                    eprintln!("could not bring the devices of domain {domid} back online: {e:#}");
                }
                Err(e.context(format!("domain {domid} was not {done} and runs on ({back} GPU session(s) handed back to the backend)")))
            }
        }
    }
}

/// Checkpoints the sessions of `job`'s guest; the snapshots written go into
/// `taken`.
fn take(xs: &mut XenStore, job: &Job<'_>, mut saved: Saved, taken: &mut Vec<PathBuf>) -> Result<Saved> {
    let Job { control, domid, backend, timeout, dir } = *job;
    // No new connection from here on: a program whose session leaves waits,
    // holding no port, until the restored guest has devices again.
    set_online(xs, backend, domid, false)?;
    let peer = format!("xen:{domid}");
    let listed = || control.sessions().context("listing the backend's sessions");
    let sessions: Vec<u64> = listed()?.into_iter().filter(|s| s.peer == peer).map(|s| s.id).collect();
    for id in &sessions {
        let path = dir.join(format!("session-{id}.pvgpu"));
        let req = CheckpointRequest {
            file: path.display().to_string(),
            leave_running: false,
            timeout_seconds: Some(timeout),
            ..Default::default()
        };
        let r = control.checkpoint(*id, &req).with_context(|| format!("checkpointing session {id}"))?;
        println!("session {id}: {} bytes of device state checkpointed in {:.2} s", r.state_bytes, r.seconds);
        taken.push(path);
    }
    // The rings are the guest's memory: wait until no worker maps them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while listed()?.iter().any(|s| sessions.contains(&s.id)) {
        if Instant::now() > deadline {
            bail!("the checkpointed sessions did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_quiet(xs, backend, domid, Duration::from_secs(30))?;
    saved.devices = u32::try_from(devices(xs, backend, domid)?.len()).unwrap_or(u32::MAX);
    std::fs::write(dir.join("domain"), saved.render()).with_context(|| format!("writing {}", dir.join("domain").display()))?;
    Ok(saved)
}

/// `restore`: `xl restore`, the vgpu devices, then the sessions back to the
/// backend.
pub(super) fn restore(xs: &mut XenStore, control: &Control, file: &Path, backend: u16) -> Result<()> {
    let file = std::path::absolute(file).with_context(|| format!("cannot make {} absolute", file.display()))?;
    let dir = folder(&file);
    described(&dir).with_context(|| format!("was {} saved with `pvgpu-xl save`?", file.display()))?;
    xl(&["restore", &file.display().to_string()])?;
    adopt(xs, control, &dir, backend)
}

/// The description of the domain whose sessions folder `dir` holds.
pub(super) fn described(dir: &Path) -> Result<Saved> {
    let described = std::fs::read_to_string(dir.join("domain")).with_context(|| format!("reading {}", dir.join("domain").display()))?;
    Saved::parse(&described).with_context(|| format!("{} is not a description pvgpu-xl wrote", dir.join("domain").display()))
}

/// `adopt`: the guest whose sessions folder `dir` holds runs on this host
/// now (restored, or migrated here): the vgpu devices it had, then its
/// sessions back to the backend.
pub(super) fn adopt(xs: &mut XenStore, control: &Control, dir: &Path, backend: u16) -> Result<()> {
    let saved = described(dir)?;
    let domid = resolve(xs, &saved.name)?;
    let (_, uuid) = identity(xs, domid)?;
    if uuid != saved.uuid {
        bail!("domain {} came back with UUID {uuid}, not {}: its GPU sessions stay in {}", saved.name, saved.uuid, dir.display());
    }
    if saved.devices > 0 {
        attach(xs, &domid.to_string(), saved.devices, None, backend)?;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pvgpu"))
        .collect();
    files.sort();
    let back = give_back(control, &files);
    if back < files.len() {
        bail!(
            "{} of {} GPU sessions of domain {} could not be handed back; their snapshots stay in {}",
            files.len() - back,
            files.len(),
            saved.name,
            dir.display()
        );
    }
    println!(
        "domain {} runs as {domid}; its {back} GPU session(s) wait for their programs (remove {} once `pvgpu-ctl restores` lists none of them)",
        saved.name,
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_reads_back() {
        let s = Saved { name: "domu".into(), uuid: "af94108e-eb39-11f1-a3c6-6e7118d8b4b6".into(), devices: 4 };
        assert_eq!(Saved::parse(&s.render()), Some(s));
        assert_eq!(Saved::parse("name=domu\nuuid=x\n"), None, "no device count");
        assert_eq!(Saved::parse("name=domu\nuuid=x\ndevices=four\n"), None);
    }

    #[test]
    fn a_saved_guest_waits_until_its_devices_are_closed_and_unclaimed() {
        use pvgpu_xen::xenbus::write_state;
        use pvgpu_xen::xenstore::fake::{Fake, SharedFake};
        let store = SharedFake::new(Fake::default());
        let mut xs = store.connect();
        for id in 0..2 {
            vgpu::create_device(&mut xs, 0, 3, id).unwrap();
            write_state(&mut xs, &vgpu::backend_dir(0, 3, id), XenbusState::InitWait).unwrap();
        }
        set_online(&mut xs, 0, 3, false).unwrap();
        for id in 0..2 {
            assert_eq!(xs.read_string(&vgpu::key(&vgpu::backend_dir(0, 3, id), be::ONLINE)).unwrap(), "0");
        }
        let e = wait_quiet(&mut xs, 0, 3, Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("[0, 1]"), "{e}");
        // The backend closes them; a program still holds device 1's claim.
        for id in 0..2 {
            write_state(&mut xs, &vgpu::backend_dir(0, 3, id), XenbusState::Closed).unwrap();
        }
        xs.write(&vgpu::key(&vgpu::frontend_dir(3, 1), fe::CLAIM), b"77.0.1").unwrap();
        let e = wait_quiet(&mut xs, 0, 3, Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("[1]"), "{e}");
        xs.rm(&vgpu::key(&vgpu::frontend_dir(3, 1), fe::CLAIM)).unwrap();
        wait_quiet(&mut xs, 0, 3, Duration::ZERO).unwrap();
        set_online(&mut xs, 0, 3, true).unwrap();
        assert_eq!(xs.read_string(&vgpu::key(&vgpu::backend_dir(0, 3, 0), be::ONLINE)).unwrap(), "1");
    }

    #[test]
    fn snapshots_go_beside_the_save_file() {
        assert_eq!(folder(Path::new("/srv/domu.save")), PathBuf::from("/srv/domu.save.pvgpu"));
    }
}
