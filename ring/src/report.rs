//! Printing errors: every error type of pvgpu follows one rule, its message
//! says what happened at its own level and never repeats its `#[source]`.
//! [`Chain`] prints an error with its sources, for logs (binaries use
//! anyhow's `{:#}`, which does the same).

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its sources: `a: b: c`.
pub struct Chain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut src = self.0.source();
        while let Some(e) = src {
            write!(f, ": {e}")?;
            src = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Chain;

    #[derive(Debug, thiserror::Error)]
    #[error("Outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn sources_follow_the_message_once() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(Chain(&e).to_string(), "Outer: inner");
    }
}
