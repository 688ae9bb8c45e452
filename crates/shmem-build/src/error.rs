//! Errors that say what went wrong and what to do about it.

use std::fmt;
use std::path::PathBuf;

/// Everything that can stop a kernel build.
#[derive(Debug)]
pub enum Error {
    /// An architecture name we do not build for.
    UnknownArch(String),
    /// No usable Rust toolchain, or one without a needed component.
    Toolchain {
        /// What is missing.
        problem: String,
        /// The command that fixes it.
        fix: String,
    },
    /// NVSHMEM's device bitcode was not found.
    NvshmemNotFound {
        /// Every place that was searched.
        searched: Vec<PathBuf>,
    },
    /// A directory given explicitly (`--nvshmem`, `NVSHMEM_HOME`) holds no usable NVSHMEM.
    NvshmemInvalid {
        /// The directory.
        dir: PathBuf,
        /// Why it was rejected.
        why: String,
    },
    /// A kernel crate that was asked for does not exist or has no kernels.
    Crate(String),
    /// A tool ran and failed.
    Tool {
        /// The command line.
        command: String,
        /// Its combined output.
        output: String,
    },
    /// The output failed verification.
    Verify {
        /// The PTX file.
        ptx: PathBuf,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// Reading or writing a file failed.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Installing a dependency failed.
    Setup(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownArch(a) => write!(f, "{}", shmem_manifest::UnknownArch(a.clone())),
            Error::Toolchain { problem, fix } => write!(f, "{problem}\n  fix: {fix}"),
            Error::NvshmemNotFound { searched } => {
                writeln!(
                    f,
                    "NVSHMEM device bitcode (libnvshmem_device*.bc) not found. Searched:"
                )?;
                for s in searched {
                    writeln!(f, "  - {}", s.display())?;
                }
                write!(
                    f,
                    "  fix: {}\n       or set NVSHMEM_HOME to an NVSHMEM (or wheel) directory with lib/libnvshmem_device*.bc",
                    crate::SETUP_FIX
                )
            }
            Error::NvshmemInvalid { dir, why } => {
                write!(f, "{} is not a usable NVSHMEM: {why}", dir.display())
            }
            Error::Crate(msg) => write!(f, "{msg}"),
            Error::Tool { command, output } => write!(f, "`{command}` failed:\n{output}"),
            Error::Verify { ptx, problems } => {
                writeln!(f, "{} failed verification:", ptx.display())?;
                for p in problems {
                    writeln!(f, "  - {p}")?;
                }
                Ok(())
            }
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Setup(msg) => write!(f, "setup failed: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches a context to an I/O error.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}

impl From<shmem_manifest::UnknownArch> for Error {
    fn from(e: shmem_manifest::UnknownArch) -> Self {
        Error::UnknownArch(e.0)
    }
}

impl From<shmem_manifest::ManifestError> for Error {
    fn from(e: shmem_manifest::ManifestError) -> Self {
        Error::Crate(e.0)
    }
}
