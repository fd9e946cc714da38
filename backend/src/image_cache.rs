//! Module images kept on disk by content, so that a guest's next program
//! or session names an image by its SHA-256 instead of sending it again.
//!
//! Layout under the cache directory (mode 0700, the backend's own):
//! - `objects/<sha256>`: an image, written once (to `tmp/` first, then
//!   renamed, so readers never see part of one);
//! - `owners/<owner>/<sha256>`: an empty file saying which guest sent it.
//!
//! A guest is served only images it sent itself (its owner marker exists);
//! another guest with the same bytes must send them, and then shares the
//! object. Knowing an image's hash is not enough to load it. Every image
//! read back is checked against its length and hash. The objects are
//! bounded: past the configured size the least recently used go (a hit
//! touches its object). Any failure of the cache only costs a resend: it
//! is logged and the module is loaded from what the guest sent.

use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Who sent an image: a guest domain, a local user, a TCP peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(pub String);

impl Owner {
    /// The owner's directory name: hex of a hash of its name (any name
    /// becomes a safe, fixed-length path component).
    fn dir(&self) -> String {
        hex(&Sha256::digest(self.0.as_bytes())[..16])
    }
}

/// Why the cache could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("Cannot use the image cache at {path}")]
pub struct CacheError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The cache.
#[derive(Debug)]
pub struct ImageCache {
    dir: PathBuf,
    max: u64,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|v| format!("{v:02x}")).collect()
}

impl ImageCache {
    /// Opens (creating) the cache at `dir`, holding at most `max` bytes of
    /// images.
    pub fn open(dir: &Path, max: u64) -> Result<ImageCache, CacheError> {
        for sub in ["objects", "owners", "tmp"] {
            let p = dir.join(sub);
            fs::DirBuilder::new().recursive(true).mode(0o700).create(&p).map_err(|source| CacheError { path: p, source })?;
        }
        Ok(ImageCache { dir: dir.to_path_buf(), max })
    }

    fn object(&self, hash: &str) -> PathBuf {
        self.dir.join("objects").join(hash)
    }

    fn marker(&self, owner: &Owner, hash: &str) -> PathBuf {
        self.dir.join("owners").join(owner.dir()).join(hash)
    }

    /// The image `owner` sent before with this hash and length, checked.
    pub fn get(&self, owner: &Owner, sha256: &[u8; 32], len: u64) -> Option<Vec<u8>> {
        let hash = hex(sha256);
        if !self.marker(owner, &hash).exists() {
            return None;
        }
        let path = self.object(&hash);
        let meta = fs::metadata(&path).ok()?;
        if meta.len() != len {
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        if Sha256::digest(&bytes)[..] != sha256[..] {
            tracing::warn!(path = %path.display(), "image cache: an object does not match its name; removing it");
            let _ = fs::remove_file(&path);
            return None;
        }
        // Recently used: evicted last.
        let _ = fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        Some(bytes)
    }

    /// Keeps `image` for `owner`.
    pub fn put(&self, owner: &Owner, image: &[u8]) {
        if image.len() as u64 > self.max {
            return;
        }
        let hash = hex(&Sha256::digest(image));
        if let Err(e) = self.store(owner, &hash, image) {
            tracing::warn!(error = %e, dir = %self.dir.display(), "image cache: cannot store an image");
            return;
        }
        self.evict();
    }

    fn store(&self, owner: &Owner, hash: &str, image: &[u8]) -> std::io::Result<()> {
        let path = self.object(hash);
        if !path.exists() {
            let tmp = self.dir.join("tmp").join(format!("{hash}.{}", std::process::id()));
            let mut f = fs::File::options().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(image)?;
            f.sync_data()?;
            fs::rename(&tmp, &path)?;
        }
        let marker = self.marker(owner, hash);
        if let Some(dir) = marker.parent() {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        fs::File::options().write(true).create(true).truncate(true).mode(0o600).open(marker)?;
        Ok(())
    }

    /// Removes the least recently used objects until the rest fit, and the
    /// markers of objects that are gone.
    fn evict(&self) {
        let Ok(dir) = fs::read_dir(self.dir.join("objects")) else { return };
        let mut objects: Vec<(SystemTime, u64, PathBuf)> = dir
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = objects.iter().map(|o| o.1).sum();
        if total <= self.max {
            return;
        }
        objects.sort();
        for (_, len, path) in objects {
            if total <= self.max {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        let Ok(owners) = fs::read_dir(self.dir.join("owners")) else { return };
        for owner in owners.flatten() {
            for m in fs::read_dir(owner.path()).into_iter().flatten().flatten() {
                if !self.object(&m.file_name().to_string_lossy()).exists() {
                    let _ = fs::remove_file(m.path());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("pvgpu-image-cache-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn sha(b: &[u8]) -> [u8; 32] {
        Sha256::digest(b).into()
    }

    #[test]
    fn an_owner_gets_back_what_it_sent_and_nobody_else_does() {
        let d = dir();
        let c = ImageCache::open(&d, 1 << 20).unwrap();
        let (a, b) = (Owner("xen:3".into()), Owner("xen:4".into()));
        let img = b"a fatbin".to_vec();
        assert_eq!(c.get(&a, &sha(&img), img.len() as u64), None);
        c.put(&a, &img);
        assert_eq!(c.get(&a, &sha(&img), img.len() as u64), Some(img.clone()));
        assert_eq!(c.get(&b, &sha(&img), img.len() as u64), None, "knowing the hash is not enough");
        assert_eq!(c.get(&a, &sha(&img), 3), None, "the length must match too");
        // The other guest sends the same bytes: now it may name them.
        c.put(&b, &img);
        assert_eq!(c.get(&b, &sha(&img), img.len() as u64), Some(img.clone()));
        // A corrupted object is not served, and goes.
        fs::write(d.join("objects").join(hex(&sha(&img))), b"a fatbiN").unwrap();
        assert_eq!(c.get(&a, &sha(&img), img.len() as u64), None);
        assert!(!d.join("objects").join(hex(&sha(&img))).exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_least_recently_used_go_first() {
        let d = dir();
        let c = ImageCache::open(&d, 250).unwrap();
        let o = Owner("uid:1000".into());
        let imgs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
        let set_age = |img: &[u8], secs: u64| {
            let f = fs::File::options().write(true).open(d.join("objects").join(hex(&sha(img)))).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)).unwrap();
        };
        c.put(&o, &imgs[0]);
        c.put(&o, &imgs[1]);
        set_age(&imgs[0], 1000);
        set_age(&imgs[1], 2000);
        // Using the older one makes the other the least recently used.
        assert!(c.get(&o, &sha(&imgs[0]), 100).is_some());
        c.put(&o, &imgs[2]);
        assert!(c.get(&o, &sha(&imgs[0]), 100).is_some());
        assert!(c.get(&o, &sha(&imgs[1]), 100).is_none(), "evicted");
        assert!(c.get(&o, &sha(&imgs[2]), 100).is_some());
        assert!(!d.join("owners").join(o.dir()).join(hex(&sha(&imgs[1]))).exists(), "its marker went with it");
        c.put(&o, &[9; 300]);
        assert!(!d.join("objects").join(hex(&sha(&[9; 300]))).exists(), "larger than the whole cache");
        fs::remove_dir_all(&d).unwrap();
    }
}
