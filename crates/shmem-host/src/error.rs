//! Host-side errors: each says what failed and, where there is one, what to do.

use std::fmt;
use std::path::PathBuf;

/// Everything the host runtime can report.
#[derive(Debug)]
pub enum Error {
    /// `libnvshmem_host.so.3` was not found or lacks a symbol.
    NvshmemLibrary {
        /// What went wrong.
        problem: String,
        /// Every path tried.
        tried: Vec<PathBuf>,
    },
    /// A CUDA driver call failed (includes "no driver": libcuda could not be loaded).
    Cuda(String),
    /// An NVSHMEM call returned an error status.
    Nvshmem {
        /// The call.
        call: &'static str,
        /// Its status.
        status: i32,
    },
    /// The process environment does not say how to start (rank, size, unique id).
    Bootstrap(String),
    /// PEs asked for different sizes in a collective allocation.
    UnequalAllocation {
        /// Bytes this PE asked for.
        mine: usize,
        /// The smallest request of any PE.
        min: usize,
        /// The largest request of any PE.
        max: usize,
    },
    /// The symmetric heap has no room for an allocation (`nvshmem_malloc` returned NULL).
    HeapExhausted {
        /// Bytes asked for.
        bytes: usize,
    },
    /// Several PEs would share a GPU without CUDA MPS, which NVSHMEM needs for that.
    NeedsMps {
        /// PEs asked for.
        pes: usize,
        /// GPUs visible.
        gpus: usize,
    },
    /// A module cannot run here (arch, NVSHMEM version, missing files, stale build).
    Module(String),
    /// A collective kernel's grid cannot be co-resident on the GPU, so it would deadlock.
    GridNotCoResident {
        /// The kernel.
        kernel: String,
        /// Blocks asked for.
        blocks: u32,
        /// Blocks that fit at once.
        max_blocks: u32,
    },
    /// An argument is out of range (a PE number, a length, an index).
    Invalid(String),
    /// A launcher failure: a PE died or exited non-zero, or could not be started.
    Launch(String),
    /// The CPU simulator cannot do this, or a simulated launch failed (a deadlock, with its
    /// report and seed; a panic in a kernel; PEs whose collective calls do not match).
    Simulator(String),
    /// A CUDA graph capture failed: what was being captured and why.
    Capture(String),
    /// A kernel's wait outlived its bound ([`shmem_device::bound`]) and stopped the kernel;
    /// the CUDA context is unusable afterwards (end the process).
    WaitTimedOut {
        /// The kernel(s) in flight on this PE when it stopped.
        kernels: String,
        /// What the device wrote.
        report: Box<shmem_device::bound::WaitReport>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NvshmemLibrary { problem, tried } => {
                writeln!(f, "NVSHMEM host library: {problem}")?;
                if !tried.is_empty() {
                    writeln!(f, "  tried:")?;
                    for t in tried {
                        writeln!(f, "    {}", t.display())?;
                    }
                }
                write!(
                    f,
                    "  fix: `shmem setup` (installs NVSHMEM 3.4.5 into ~/.cache/shmem-rs), `pip install nvidia-nvshmem-cu13` (3.4 – 3.8), \
                     or set NVSHMEM_HOME to an NVSHMEM (or wheel) directory with lib/libnvshmem_host.so.3"
                )
            }
            Error::Cuda(m) => write!(f, "CUDA: {m}"),
            Error::WaitTimedOut { kernels, report } => {
                write!(f, "a wait outlived its bound in {kernels}: {report}")
            }
            Error::Nvshmem { call, status } => {
                write!(f, "NVSHMEM: {call} failed (status {status})")
            }
            Error::HeapExhausted { bytes } => write!(
                f,
                "NVSHMEM: nvshmem_malloc of {bytes} bytes returned NULL: the symmetric heap is full \
                 (raise NVSHMEM_SYMMETRIC_SIZE, e.g. NVSHMEM_SYMMETRIC_SIZE=4G)"
            ),
            Error::NeedsMps { pes, gpus } => write!(
                f,
                "{pes} PEs would share {gpus} GPU(s), and NVSHMEM runs several PEs on one GPU only under CUDA MPS, \
                 which is not running (no control pipe in {}). Start it with `nvidia-cuda-mps-control -d` \
                 (stop it with `echo quit | nvidia-cuda-mps-control`), or run at most {gpus} PE(s)",
                crate::launcher::mps_pipe_dir().display()
            ),
            Error::Bootstrap(m) => write!(f, "cannot start NVSHMEM: {m}"),
            Error::UnequalAllocation { mine, min, max } => write!(
                f,
                "collective allocation with unequal sizes: this PE asked for {mine} bytes, others between {min} and {max}; \
                 every PE must allocate the same size (nothing was allocated)"
            ),
            Error::Module(m) => write!(f, "{m}"),
            Error::GridNotCoResident {
                kernel,
                blocks,
                max_blocks,
            } => write!(
                f,
                "kernel `{kernel}` must be launched collectively (it waits for other PEs), but its grid of {blocks} blocks \
                 cannot be resident at once: at most {max_blocks} fit on this GPU with this block size and shared memory. \
                 Launch at most {max_blocks} blocks (a grid-stride loop covers the rest), or use fewer threads/shared memory per block"
            ),
            Error::Invalid(m) => write!(f, "{m}"),
            Error::Launch(m) => write!(f, "{m}"),
            Error::Simulator(m) => write!(f, "simulator: {m}"),
            Error::Capture(m) => write!(
                f,
                "graph capture: {m} (a capture takes launches and on-stream barriers only; see shmem_host::stream)"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Cuda(e.to_string())
    }
}

/// Checks that the CUDA driver library can be loaded, before anything asks cudarc for it
/// (cudarc panics when it is missing; this says what is wrong instead).
pub fn ensure_driver() -> Result<()> {
    static FOUND: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mut errors = Vec::new();
            for name in ["libcuda.so.1", "libcuda.so"] {
                // SAFETY: loading the CUDA driver library runs only its own initialisers; the
                // handle is dropped at once (cudarc loads it again for real).
                match unsafe { libloading::Library::new(name) } {
                    Ok(_) => return Ok(()),
                    Err(e) => errors.push(format!("{name}: {e}")),
                }
            }
            Err(errors.join("; "))
        })
        .clone()
        .map_err(|why| {
            Error::Cuda(format!(
                "no NVIDIA driver: the CUDA driver library could not be loaded ({why}). Install the NVIDIA driver \
                 (it provides libcuda.so.1), or run on a machine with a GPU"
            ))
        })
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;
