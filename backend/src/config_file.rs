//! `pvgpu-backend --config FILE`: the command line's options, kept in a
//! TOML file (what the Debian package installs as
//! `/etc/pvgpu/backend.toml`). Each key is a long option without its
//! dashes; a string or number is its value, an array repeats the option, a
//! `true` is a flag (`false` leaves it out). An option also given on the
//! command line is taken from there, so a unit's `ExecStart` or an
//! operator's shell can override the file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why the configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// It cannot be read.
    #[error("Cannot read the configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not TOML.
    #[error("{path} is not valid TOML: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the line.
        message: String,
    },
    /// A key's value is not one an option takes.
    #[error("{path}: `{key}` must be a string, a number, true/false, or an array of those (it is an option of pvgpu-backend --help)")]
    Value {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// `--config` without a file.
    #[error("--config needs a file")]
    Missing,
}

/// The file `--config` names in `args`, if any.
fn config_path(args: &[OsString]) -> Result<Option<PathBuf>, ConfigFileError> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return it.next().map(|p| Some(PathBuf::from(p))).ok_or(ConfigFileError::Missing);
        }
        if let Some(p) = s.strip_prefix("--config=") {
            return Ok(Some(PathBuf::from(p)));
        }
        if s == "--" || s == "worker" {
            break;
        }
    }
    Ok(None)
}

/// Whether option `--key` is on the command line.
fn given(args: &[OsString], key: &str) -> bool {
    let (flag, with) = (format!("--{key}"), format!("--{key}="));
    args.iter().any(|a| {
        let s = a.to_string_lossy();
        s == flag || s.starts_with(&with)
    })
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

/// `args` (the program's, name first) with the options of the file that
/// `--config` names inserted after the program's name; unchanged without
/// `--config`.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigFileError> {
    let Some(path) = config_path(&args)? else { return Ok(args) };
    let from_file = options(&path, &args)?;
    let mut out = Vec::with_capacity(args.len() + from_file.len());
    let mut rest = args.into_iter();
    out.extend(rest.next());
    out.extend(from_file);
    out.extend(rest);
    Ok(out)
}

/// The options `path` holds that `args` does not.
fn options(path: &Path, args: &[OsString]) -> Result<Vec<OsString>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read { path: path.to_path_buf(), source })?;
    let table: toml::Table =
        text.parse().map_err(|e: toml::de::Error| ConfigFileError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
    let bad = |key: &str| ConfigFileError::Value { path: path.to_path_buf(), key: key.to_string() };
    let mut out = Vec::new();
    for (key, value) in &table {
        if key == "config" || given(args, key) {
            continue;
        }
        let flag = OsString::from(format!("--{key}"));
        match value {
            toml::Value::Boolean(true) => out.push(flag),
            toml::Value::Boolean(false) => {}
            toml::Value::Array(items) => {
                for item in items {
                    out.push(flag.clone());
                    out.push(scalar(item).ok_or_else(|| bad(key))?.into());
                }
            }
            v => {
                out.push(flag);
                out.push(scalar(v).ok_or_else(|| bad(key))?.into());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_file_gives_options_the_command_line_does_not() {
        let dir = std::env::temp_dir().join(format!("pvgpu-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("backend.toml");
        std::fs::write(&f, "listen = [\"local:/run/a.sock\", \"tcp:0.0.0.0:7300\"]\nexecutor = \"host\"\nmax-sessions = 8\nno-seccomp = true\ntcp-trusted-network = false\n").unwrap();
        let out = expand(args(&["pvgpu-backend", "--config", f.to_str().unwrap(), "--executor", "cuda"])).unwrap();
        let s: Vec<String> = out.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(s[0], "pvgpu-backend");
        assert!(s.windows(2).any(|w| w == ["--listen", "tcp:0.0.0.0:7300"]));
        assert!(s.windows(2).any(|w| w == ["--max-sessions", "8"]));
        assert!(s.contains(&"--no-seccomp".to_string()) && !s.contains(&"--tcp-trusted-network".to_string()));
        assert_eq!(s.iter().filter(|a| *a == "--executor").count(), 1, "the command line's --executor wins: {s:?}");
        assert!(s.ends_with(&["--executor".to_string(), "cuda".to_string()]));
        std::fs::write(&f, "listen = { a = 1 }\n").unwrap();
        assert!(matches!(expand(args(&["b", "--config", f.to_str().unwrap()])), Err(ConfigFileError::Value { .. })));
        std::fs::write(&f, "listen = [\n").unwrap();
        assert!(matches!(expand(args(&["b", "--config", f.to_str().unwrap()])), Err(ConfigFileError::Parse { .. })));
        assert_eq!(expand(args(&["b", "--executor", "host"])).unwrap(), args(&["b", "--executor", "host"]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
