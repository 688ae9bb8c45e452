//! The sys layer: NVSHMEM's host library as C types and a raw function table ([`Lib`]),
//! loaded at run time (`libnvshmem_host.so.3`) by [`lib`], once, from the first place it is
//! found. No logic: the result layer ([`super`]) turns each call's status into a `Result`.
//! Nothing links against NVSHMEM at build time.
//!
//! Search order: `NVSHMEM_HOME/lib`, each `LD_LIBRARY_PATH` directory, Python's site-packages
//! (`nvidia/nvshmem/lib`, pip's `nvidia-nvshmem-cu13`, PyTorch virtualenvs included), the
//! per-user installs of `shmem setup` (`~/.cache/shmem-rs/nvshmem-*`), then the system loader
//! by name.

#![allow(missing_docs)]

use crate::error::{Error, Result};
use std::ffi::{c_int, c_long, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `nvshmemx_uniqueid_t`: 128 bytes, first word a version.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawUniqueId {
    pub version: c_int,
    pub internal: [u8; 124],
}

/// `nvshmemx_uniqueid_args_v1` (24 bytes).
#[repr(C)]
pub struct UniqueIdArgs {
    pub version: c_int,
    pub id: *mut RawUniqueId,
    pub myrank: c_int,
    pub nranks: c_int,
}

/// `nvshmemx_init_args_v1` (128 bytes).
#[repr(C)]
pub struct InitArgs {
    pub version: c_int,
    pub uid_args: UniqueIdArgs,
    pub content: [u8; 96],
}

/// `nvshmemx_init_attr_v1` (144 bytes). Versions are `(1 << 16) + sizeof`, as the headers'
/// `nvshmemx_init_init_attr_ver_only` sets them; 3.4 and 3.8 both accept v1.
#[repr(C)]
pub struct InitAttr {
    pub version: c_int,
    pub mpi_comm: *mut c_void,
    pub args: InitArgs,
}

const _: () = assert!(std::mem::size_of::<RawUniqueId>() == 128);
const _: () = assert!(std::mem::size_of::<UniqueIdArgs>() == 24);
const _: () = assert!(std::mem::size_of::<InitArgs>() == 128);
const _: () = assert!(std::mem::size_of::<InitAttr>() == 144);

impl InitAttr {
    /// An attribute block with the version words set.
    pub fn new() -> InitAttr {
        let v = |size: usize| (1 << 16) + size as c_int;
        InitAttr {
            version: v(std::mem::size_of::<InitAttr>()),
            mpi_comm: std::ptr::null_mut(),
            args: InitArgs {
                version: v(std::mem::size_of::<InitArgs>()),
                uid_args: UniqueIdArgs {
                    version: v(std::mem::size_of::<UniqueIdArgs>()),
                    id: std::ptr::null_mut(),
                    myrank: -1,
                    nranks: -1,
                },
                content: [0; 96],
            },
        }
    }
}

impl Default for InitAttr {
    fn default() -> Self {
        InitAttr::new()
    }
}

/// `NVSHMEMX_INIT_WITH_UNIQUEID`.
pub const INIT_WITH_UNIQUEID: c_uint = 1 << 3;
/// `NVSHMEM_TEAM_WORLD`.
pub const TEAM_WORLD: c_int = 0;
/// `NVSHMEMX_TEAM_NODE`.
pub const TEAM_NODE: c_int = 2;

pub type Stream = *mut c_void;

macro_rules! nvshmem_lib {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The function table of `libnvshmem_host.so.3`.
        pub struct Lib {
            _lib: libloading::Library,
            /// Where it was loaded from.
            pub path: PathBuf,
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Lib {
            /// # Safety
            /// `lib` is NVSHMEM's host library, whose symbols have the C signatures above.
            unsafe fn from_library(lib: libloading::Library, path: PathBuf) -> std::result::Result<Lib, String> {
                $(
                    // SAFETY: the symbol's type is its C signature from NVSHMEM's headers.
                    let $name = unsafe {
                        *lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(concat!(stringify!($name), "\0").as_bytes())
                            .map_err(|e| format!("{} lacks {}: {e}", path.display(), stringify!($name)))?
                    };
                )*
                Ok(Lib { _lib: lib, path, $($name,)* })
            }
        }
    };
}

nvshmem_lib! {
    nvshmemx_get_uniqueid: fn(*mut RawUniqueId) -> c_int;
    nvshmemx_set_attr_uniqueid_args: fn(c_int, c_int, *const RawUniqueId, *mut InitAttr) -> c_int;
    nvshmemx_hostlib_init_attr: fn(c_uint, *mut InitAttr) -> c_int;
    nvshmemx_hostlib_finalize: fn();
    nvshmemx_init_status: fn() -> c_int;
    nvshmemx_vendor_get_version_info: fn(*mut c_int, *mut c_int, *mut c_int);
    nvshmem_my_pe: fn() -> c_int;
    nvshmem_n_pes: fn() -> c_int;
    nvshmem_team_my_pe: fn(c_int) -> c_int;
    nvshmem_team_n_pes: fn(c_int) -> c_int;
    nvshmem_malloc: fn(usize) -> *mut c_void;
    nvshmem_align: fn(usize, usize) -> *mut c_void;
    nvshmem_free: fn(*mut c_void);
    nvshmem_ptr: fn(*const c_void, c_int) -> *mut c_void;
    nvshmem_barrier_all: fn();
    nvshmem_sync_all: fn();
    nvshmem_quiet: fn();
    nvshmemx_barrier_all_on_stream: fn(Stream);
    nvshmemx_sync_all_on_stream: fn(Stream);
    nvshmemx_quiet_on_stream: fn(Stream);
    nvshmemx_int64_max_reduce_on_stream: fn(c_int, *mut i64, *const i64, usize, Stream) -> c_int;
    nvshmemx_cumodule_init: fn(*mut c_void) -> c_int;
    nvshmemx_cumodule_finalize: fn(*mut c_void) -> c_int;
    nvshmem_global_exit: fn(c_int);
    nvshmem_team_split_strided: fn(c_int, c_int, c_int, c_int, *const c_void, c_long, *mut c_int) -> c_int;
    nvshmem_team_split_2d: fn(c_int, c_int, *const c_void, c_long, *mut c_int, *const c_void, c_long, *mut c_int) -> c_int;
    nvshmem_team_destroy: fn(c_int);
    nvshmem_team_translate_pe: fn(c_int, c_int, c_int) -> c_int;
    nvshmemx_barrier_on_stream: fn(c_int, Stream) -> c_int;
    nvshmemx_team_sync_on_stream: fn(c_int, Stream) -> c_int;
    nvshmemx_broadcastmem_on_stream: fn(c_int, *mut c_void, *const c_void, usize, c_int, Stream) -> c_int;
    nvshmemx_fcollectmem_on_stream: fn(c_int, *mut c_void, *const c_void, usize, Stream) -> c_int;
    nvshmemx_alltoallmem_on_stream: fn(c_int, *mut c_void, *const c_void, usize, Stream) -> c_int;
    nvshmemx_buffer_register: fn(*mut c_void, usize) -> c_int;
    nvshmemx_buffer_unregister: fn(*mut c_void) -> c_int;
}

/// `nvshmemx_TYPE_OP_reduce_on_stream(team, dest, src, nreduce, stream)`, for any `TYPE`.
pub type ReduceOnStream =
    unsafe extern "C" fn(c_int, *mut c_void, *const c_void, usize, Stream) -> c_int;

impl Lib {
    /// `nvshmemx_{ty}_{op}_reduce_on_stream` (`ty` as NVSHMEM names it: `int32`, `float`…),
    /// looked up by name: the library has one per type and operation.
    pub fn reduce_on_stream(&self, ty: &str, op: &str) -> Result<ReduceOnStream> {
        let name = format!("nvshmemx_{ty}_{op}_reduce_on_stream");
        // SAFETY: every `nvshmemx_*_reduce_on_stream` has this signature, with `TYPE *` for
        // the two pointers (NVSHMEM's `nvshmemx_coll_api.h`).
        unsafe { self._lib.get::<ReduceOnStream>(name.as_bytes()) }
            .map(|f| *f)
            .map_err(|e| Error::Invalid(format!("{} has no {name}: {e}", self.path.display())))
    }
}

const LIB_NAME: &str = "libnvshmem_host.so.3";

/// The directories that may hold NVSHMEM's host library, in search order.
pub fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // NVSHMEM_HOME means what it means to the builder: an NVSHMEM root, or a wheel's
    // install root that holds one.
    if let Some(home) = std::env::var_os("NVSHMEM_HOME").filter(|h| !h.is_empty()) {
        let home = PathBuf::from(home);
        dirs.push(home.join("lib"));
        dirs.push(shmem_manifest::search::wheel_nvshmem_root(&home).join("lib"));
    }
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&ld).filter(|p| !p.as_os_str().is_empty()));
    }
    for sp in shmem_manifest::search::site_packages() {
        dirs.push(shmem_manifest::search::wheel_nvshmem_root(&sp).join("lib"));
    }
    dirs.extend(
        shmem_manifest::search::nvshmem_installs()
            .iter()
            .map(|d| shmem_manifest::search::wheel_nvshmem_root(d).join("lib")),
    );
    dirs
}

fn load_from(dirs: &[PathBuf]) -> Result<Lib> {
    let mut tried = Vec::new();
    let mut errors = Vec::new();
    for dir in dirs {
        let path = dir.join(LIB_NAME);
        tried.push(path.clone());
        if !path.is_file() {
            continue;
        }
        // SAFETY: loading NVSHMEM's host library runs its initialisers, which only set up
        // NVSHMEM's own state.
        match unsafe { libloading::Library::new(&path) } {
            // SAFETY: the file is NVSHMEM's host library (its name and location say so).
            Ok(lib) => match unsafe { Lib::from_library(lib, path) } {
                Ok(l) => return Ok(l),
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    // Last, the system loader's own search (ldconfig, RUNPATH).
    tried.push(PathBuf::from(format!("{LIB_NAME} (system loader)")));
    // SAFETY: as above.
    if let Ok(lib) = unsafe { libloading::Library::new(LIB_NAME) } {
        // SAFETY: as above.
        match unsafe { Lib::from_library(lib, PathBuf::from(LIB_NAME)) } {
            Ok(l) => return Ok(l),
            Err(e) => errors.push(e),
        }
    }
    Err(Error::NvshmemLibrary {
        problem: if errors.is_empty() {
            format!("{LIB_NAME} not found")
        } else {
            errors.join("; ")
        },
        tried,
    })
}

/// The loaded library, loaded on first use; a failure is remembered and reported again as it
/// was (what went wrong and every path tried).
pub fn lib() -> Result<&'static Lib> {
    static LIB: OnceLock<std::result::Result<Lib, (String, Vec<PathBuf>)>> = OnceLock::new();
    let loaded = LIB.get_or_init(|| {
        load_from(&candidate_dirs()).map_err(|e| match e {
            Error::NvshmemLibrary { problem, tried } => (problem, tried),
            other => (other.to_string(), Vec::new()),
        })
    });
    loaded
        .as_ref()
        .map_err(|(problem, tried)| Error::NvshmemLibrary {
            problem: problem.clone(),
            tried: tried.clone(),
        })
}

/// The NVSHMEM bootstrap plugins shipped beside the host library, by environment variable.
pub fn bootstrap_plugins(lib_path: &Path) -> Vec<(&'static str, PathBuf)> {
    let dir = lib_path.parent().unwrap_or(Path::new("."));
    [
        ("NVSHMEM_BOOTSTRAP_UID_PLUGIN", "nvshmem_bootstrap_uid.so.3"),
        ("NVSHMEM_BOOTSTRAP_PMI_PLUGIN", "nvshmem_bootstrap_pmi.so.3"),
        (
            "NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
            "nvshmem_bootstrap_pmi2.so.3",
        ),
        (
            "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
            "nvshmem_bootstrap_pmix.so.3",
        ),
        ("NVSHMEM_BOOTSTRAP_MPI_PLUGIN", "nvshmem_bootstrap_mpi.so.3"),
        (
            "NVSHMEM_BOOTSTRAP_SHMEM_PLUGIN",
            "nvshmem_bootstrap_shmem.so.3",
        ),
    ]
    .into_iter()
    .map(|(var, file)| (var, dir.join(file)))
    .filter(|(_, p)| p.is_file())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_lists_where_it_looked() {
        let dir = std::env::temp_dir().join(format!("shmem-nolib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = match load_from(std::slice::from_ref(&dir)) {
            Err(e) => e.to_string(),
            // A system-wide NVSHMEM satisfies the loader's own search; nothing to test then.
            Ok(l) => return eprintln!("system loader found {}", l.path.display()),
        };
        assert!(
            err.contains(&dir.join(LIB_NAME).display().to_string()),
            "{err}"
        );
        assert!(
            err.contains("pip install nvidia-nvshmem-cu13") && err.contains("NVSHMEM_HOME"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_load_reports_once_and_again_the_same() {
        // Where the library loads (a GPU machine) there is nothing to check.
        let (Err(first), Err(second)) = (lib(), lib()) else {
            return;
        };
        let (first, second) = (first.to_string(), second.to_string());
        assert_eq!(first, second);
        assert_eq!(first.matches("NVSHMEM host library").count(), 1, "{first}");
        assert_eq!(first.matches("fix:").count(), 1, "{first}");
    }

    #[test]
    fn attribute_layout_matches_the_headers() {
        let a = InitAttr::new();
        assert_eq!(a.version, (1 << 16) + 144);
        assert_eq!(a.args.version, (1 << 16) + 128);
        assert_eq!(a.args.uid_args.version, (1 << 16) + 24);
        assert_eq!(std::mem::offset_of!(InitAttr, args), 16);
        assert_eq!(std::mem::offset_of!(InitArgs, uid_args), 8);
    }
}
