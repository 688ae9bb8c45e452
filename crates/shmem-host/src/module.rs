//! Kernel modules and their kernels: one [`Module`] type whatever the module's origin
//! ([`ModuleKind`]: built by shmem-rs, a cubin of CUDA C++ kernels, or simulated), one kernel
//! handle ([`KernelFn`]), and one launch description ([`LaunchConfig`]).

use crate::args::{HostArgs, ParamPtrs};
use crate::backend::{Function, LaunchArgs};
use crate::error::{Error, Result};
use crate::runtime::Shmem;
use crate::stream::StreamRef;
use cudarc::driver::sys;
use shmem_device::kernel::Kernel;
use shmem_manifest::{Arch, Manifest};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// How to launch a kernel: grid and block shape, dynamic shared memory, stream, and whether
/// cooperatively. Built with [`LaunchConfig::linear`] (or a struct literal) and the
/// `with_*` methods:
///
/// ```
/// # use shmem_host::LaunchConfig;
/// let cfg = LaunchConfig::linear(132, 256).with_shared_mem(4096).with_cooperative(true);
/// assert_eq!(cfg.threads(), 256);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig<'s> {
    /// Blocks per grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes. Above the 48 KB a block has by default the
    /// runtime opts the kernel in to more, up to what the GPU gives a block (227 KB on
    /// sm_90, less the kernel's static shared memory); more than that is [`Error::Invalid`]
    /// at the launch.
    pub shared_mem_bytes: u32,
    /// Launch cooperatively (the whole grid co-resident, checked before the launch). `None`:
    /// as the module says — a built module's manifest marks the kernels that wait for other
    /// blocks or PEs (collective); a CUDA C++ module's kernels are not cooperative unless
    /// asked.
    pub cooperative: Option<bool>,
    /// The stream to launch on ([`StreamRef::Runtime`] by default: the runtime's own).
    pub stream: StreamRef<'s>,
    /// Launch as a programmatic dependent of the stream's previous kernel (CUDA's
    /// programmatic dependent launch, sm_90 and up): the kernel may start before that kernel
    /// has completed, once each of its blocks has called
    /// `shmem_device::pdl::launch_dependents` or ended, and must call
    /// `shmem_device::pdl::wait` before it touches memory that kernel writes or reads (see
    /// that module). The previous kernel may be cooperative. An ordinary launch where it
    /// cannot overlap safely or at all:
    /// - a cooperative launch: the driver never starts one early (measured on an H200 with
    ///   CUDA 13.0, `scripts/probes/pdl_overlap.cu`);
    /// - a built module for an architecture before sm_90, whose `pdl::wait` is empty;
    /// - a GPU before sm_90, and the simulator;
    /// - a GPU shared by several PEs: under CUDA MPS a grid waiting to start could hold SMs
    ///   that another PE's cooperative grid needs.
    ///
    /// A CUDA C++ module's kernel is trusted to wait (`cudaGridDependencySynchronize`).
    pub dependent: bool,
    /// How the SMs running this kernel split their L1 cache and shared memory (see
    /// [`SharedCarveout`]); `None`: as the kernel was last launched with (the driver's
    /// choice until a launch sets one).
    pub shared_carveout: Option<SharedCarveout>,
}

/// The share of an SM's unified L1 cache and shared memory that a kernel prefers as shared
/// memory: CUDA's preferred shared-memory carveout, a kernel attribute that the runtime sets
/// before a launch whose [`LaunchConfig::shared_carveout`] differs from the kernel's last.
///
/// An SM runs blocks of kernels of different carveouts together only while its
/// configuration gives each the shared memory it needs. Where a kernel overlaps the one
/// before it (a programmatic dependent launch, [`LaunchConfig::dependent`]), give the
/// earlier kernel enough shared memory for the later one's blocks: otherwise a later block
/// that needs shared memory waits for the SM to drain of the earlier kernel's blocks. On
/// one H200, the MoE example's throughput `bf16` dispatch (43.6 KB of shared memory a
/// block) started 5.6 µs into its layout kernel's run (no shared memory, the driver's
/// carveout), and 1.2 µs in with the layout at [`SharedCarveout::Percent`]`(100)`
/// (BENCHMARKS.md, forty-ninth session). A hint: the driver takes more shared memory than
/// asked where the launch needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedCarveout {
    /// The driver's choice for the kernel.
    Default,
    /// This percentage (0 to 100) of the most shared memory an SM can have; 100 leaves the
    /// least L1 cache. Above 100 is [`Error::Invalid`] at the launch.
    Percent(u8),
}

impl SharedCarveout {
    /// The value of `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`: -1 for the
    /// default, else the percentage.
    pub fn attribute(self) -> i32 {
        match self {
            SharedCarveout::Default => -1,
            SharedCarveout::Percent(p) => i32::from(p),
        }
    }
}

impl LaunchConfig<'static> {
    /// A 1-D launch of `blocks` blocks of `threads` threads on the runtime's stream.
    pub fn linear(blocks: u32, threads: u32) -> LaunchConfig<'static> {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
            cooperative: None,
            stream: StreamRef::Runtime,
            dependent: false,
            shared_carveout: None,
        }
    }
}

impl<'s> LaunchConfig<'s> {
    /// With `bytes` of dynamic shared memory per block (above 48 KB, see
    /// [`shared_mem_bytes`](Self::shared_mem_bytes)).
    pub fn with_shared_mem(self, bytes: u32) -> Self {
        LaunchConfig {
            shared_mem_bytes: bytes,
            ..self
        }
    }
    /// Launched cooperatively or not, whatever the module says.
    pub fn with_cooperative(self, cooperative: bool) -> Self {
        LaunchConfig {
            cooperative: Some(cooperative),
            ..self
        }
    }
    /// Launched as a programmatic dependent of the stream's previous kernel, or not (see
    /// [`dependent`](Self::dependent)).
    pub fn with_dependent_launch(self, dependent: bool) -> Self {
        LaunchConfig { dependent, ..self }
    }
    /// With the SMs' split of L1 cache and shared memory that `carveout` asks for (see
    /// [`SharedCarveout`]).
    pub fn with_shared_carveout(self, carveout: SharedCarveout) -> Self {
        LaunchConfig {
            shared_carveout: Some(carveout),
            ..self
        }
    }
    /// On `stream` (a cudarc stream of this PE's context, or any [`StreamRef`]) instead of
    /// the runtime's.
    pub fn on_stream<'t>(self, stream: impl Into<StreamRef<'t>>) -> LaunchConfig<'t> {
        LaunchConfig {
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
            cooperative: self.cooperative,
            stream: stream.into(),
            dependent: self.dependent,
            shared_carveout: self.shared_carveout,
        }
    }
    /// Blocks in the grid.
    pub fn blocks(&self) -> u32 {
        self.grid.0 * self.grid.1 * self.grid.2
    }
    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.block.0 * self.block.1 * self.block.2
    }
}

/// Where a [`Module`] came from, and so what can be checked about its kernels.
#[derive(Clone, Debug, PartialEq)]
pub enum ModuleKind {
    /// Built by shmem-rs (`build-ptx` or a `build.rs`): its manifest lists every kernel with
    /// its parameters, collective flag and launch bounds, and launches are checked against it.
    Built(Box<Manifest>),
    /// A cubin (or PTX) of CUDA C++ kernels linked with NVSHMEM's device library; nothing
    /// records its kernels' signatures (see [`Shmem::load_cuda_module`]).
    Cuda,
    /// Under the CPU simulator: the kernels of crate `crate_name` run from this program's own
    /// build. An embedded module keeps its manifest, and its kernels are checked against it
    /// as on a GPU.
    Simulated {
        /// The kernel crate's package name.
        crate_name: String,
        /// The manifest of an embedded build, if there was one.
        manifest: Option<Box<Manifest>>,
    },
}

/// A kernel module loaded on this PE and registered with NVSHMEM (`nvshmemx_cumodule_init`),
/// so that its kernels share the runtime's symmetric heap. Unloaded on drop.
pub struct Module<'rt> {
    rt: &'rt Shmem,
    cu_module: sys::CUmodule,
    kind: ModuleKind,
    origin: PathBuf,
}

/// Where `cargo xtask build-ptx` put the kernels: `SHMEM_PTX_DIR` if set, else `default`
/// (a program's `target/ptx`, e.g. relative to its `CARGO_MANIFEST_DIR`).
pub fn ptx_dir_or(default: impl Into<PathBuf>) -> PathBuf {
    std::env::var_os("SHMEM_PTX_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| default.into())
}

/// The GPU's compute capability as `major * 10 + minor`.
fn compute_capability(rt: &Shmem) -> Result<u32> {
    use sys::CUdevice_attribute::*;
    let ctx = rt.context()?;
    let major = ctx.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = ctx.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok((major * 10 + minor) as u32)
}

/// Of builds by architecture number, the newest that a GPU of compute capability `cc` runs
/// (none newer than it); else the architectures there are, for the error (`none` if none).
fn newest_runnable<T>(mut builds: Vec<(u32, T)>, cc: u32) -> std::result::Result<T, String> {
    builds.sort_by_key(|(arch, _)| *arch);
    let found = builds
        .iter()
        .map(|(a, _)| format!("sm_{a}"))
        .collect::<Vec<_>>()
        .join(", ");
    match builds.into_iter().rev().find(|(a, _)| *a <= cc) {
        Some((_, b)) => Ok(b),
        None if found.is_empty() => Err("none".into()),
        None => Err(found),
    }
}

/// Decides whether a module built as `manifest` can run with NVSHMEM `runtime` on a GPU of
/// compute capability `cc`, and from which file: `Ok(true)` for the cubin, `Ok(false)` for PTX.
pub fn check_compatible(manifest: &Manifest, runtime: (u32, u32, u32), cc: u32) -> Result<bool> {
    let module_err = |e: shmem_manifest::ManifestError| Error::Module(e.0);
    let linked = manifest.nvshmem_release().map_err(module_err)?;
    if linked > runtime {
        let (a, b, c) = runtime;
        return Err(Error::Module(format!(
            "module `{}` was linked against NVSHMEM {} but this process runs NVSHMEM {a}.{b}.{c}: device code may not be \
             newer than the host library. Rebuild it against {a}.{b}.{c} (`cargo xtask build-ptx --nvshmem DIR`) or upgrade the host library",
            manifest.crate_name, manifest.nvshmem_version,
        )));
    }
    let arch = manifest.target_arch().map_err(module_err)?.number();
    if arch > cc {
        return Err(Error::Module(format!(
            "module `{}` was built for {} but this GPU is sm_{cc}: build it with `cargo xtask build-ptx --arch sm_{cc}`",
            manifest.crate_name, manifest.arch
        )));
    }
    Ok(arch == cc && manifest.cubin.is_some())
}

impl Shmem {
    /// Loads kernel crate `krate` from `ptx_dir` (as written by `cargo xtask build-ptx`:
    /// `<ptx_dir>/<arch>/<krate>.{json,cubin,ptx}`), for this GPU's architecture, checks it
    /// against this runtime and registers it with NVSHMEM (`nvshmemx_cumodule_init`).
    /// Collective: every PE loads the same modules in the same order.
    ///
    /// Under the CPU simulator nothing is read: the kernels run from the program itself
    /// (their host build), so `build-ptx` is not needed.
    pub fn load_module(&self, ptx_dir: &Path, krate: &str) -> Result<Module<'_>> {
        if self.is_simulated() {
            return self.simulated_module(krate, None);
        }
        let cc = compute_capability(self)?;
        let archs: Vec<(u32, PathBuf)> = std::fs::read_dir(ptx_dir)
            .map_err(|e| {
                Error::Module(format!(
                    "cannot read {}: {e} (run `cargo xtask build-ptx`)",
                    ptx_dir.display()
                ))
            })?
            .flatten()
            .filter_map(|e| {
                let a: Arch = e.file_name().to_str()?.parse().ok()?;
                e.path()
                    .join(format!("{krate}.json"))
                    .is_file()
                    .then_some((a.number(), e.path()))
            })
            .collect();
        let dir = newest_runnable(archs, cc).map_err(|found| {
            Error::Module(format!(
                "no build of `{krate}` in {} runs on this sm_{cc} GPU (found: {found}); run `cargo xtask build-ptx --arch sm_{cc}`",
                ptx_dir.display(),
            ))
        })?;
        let manifest = Manifest::read(&dir.join(format!("{krate}.json")))
            .map_err(|e| Error::Module(e.to_string()))?;
        let use_cubin = check_compatible(&manifest, self.version(), cc)?;
        let file = if use_cubin {
            dir.join(manifest.cubin.clone().unwrap_or_default())
        } else {
            dir.join(&manifest.ptx)
        };
        let image = std::fs::read(&file)
            .map_err(|e| Error::Module(format!("cannot read {}: {e}", file.display())))?;
        self.register(ModuleKind::Built(Box::new(manifest)), image, file)
    }

    /// Loads a module embedded in the program: its manifest (the `.json`) and the cubin or PTX
    /// it names, e.g. through `include_str!`/`include_bytes!` of `build-ptx`'s output or of a
    /// `build.rs` that ran `shmem_build::Builder`. The same checks as [`Shmem::load_module`]
    /// apply; `is_cubin` says which of the two `image` is.
    pub fn load_module_embedded(
        &self,
        manifest_json: &str,
        image: &[u8],
        is_cubin: bool,
    ) -> Result<Module<'_>> {
        let manifest = Manifest::from_json(manifest_json)
            .map_err(|e| Error::Module(format!("embedded manifest: {e}")))?;
        if self.is_simulated() {
            let name = manifest.crate_name.clone();
            return self.simulated_module(&name, Some(manifest));
        }
        let cc = compute_capability(self)?;
        let cubin_ok = check_compatible(&manifest, self.version(), cc)?;
        if is_cubin && !cubin_ok {
            return Err(Error::Module(format!(
                "the embedded cubin of `{}` is for {}, this GPU is sm_{cc}: embed the PTX instead, or build for sm_{cc}",
                manifest.crate_name, manifest.arch
            )));
        }
        let origin = PathBuf::from(format!("<embedded {}>", manifest.crate_name));
        self.register(
            ModuleKind::Built(Box::new(manifest)),
            image.to_vec(),
            origin,
        )
    }

    /// Loads kernels embedded in the program ([`crate::include_kernels!`]): the build for
    /// this GPU's architecture (its cubin), else the newest older one's PTX, which the driver
    /// compiles for this GPU; checked against this runtime as [`Shmem::load_module`] checks.
    /// The program needs no files beside it. Under the simulator nothing is loaded (the
    /// kernels run from the program's own build). Collective.
    pub fn load_embedded(&self, kernels: &EmbeddedKernels) -> Result<Module<'_>> {
        let first = kernels
            .builds
            .first()
            .map(|b| {
                Manifest::from_json(b.manifest).map_err(|e| {
                    Error::Module(format!(
                        "embedded manifest of `{}`: {e}",
                        kernels.crate_name
                    ))
                })
            })
            .transpose()?;
        if self.is_simulated() {
            return self.simulated_module(kernels.crate_name, first);
        }
        if kernels.builds.is_empty() {
            return Err(Error::Module(format!(
                "`{}` was built for the CPU simulator only (SHMEM_KERNELS=simulator when the program was built): \
                 rebuild without it to run on a GPU",
                kernels.crate_name
            )));
        }
        let cc = compute_capability(self)?;
        let builds = kernels
            .builds
            .iter()
            .map(|b| {
                let m = Manifest::from_json(b.manifest).map_err(|e| {
                    Error::Module(format!(
                        "embedded manifest of `{}`: {e}",
                        kernels.crate_name
                    ))
                })?;
                let arch = m.target_arch().map_err(|e| Error::Module(e.0))?.number();
                Ok((arch, (m, b)))
            })
            .collect::<Result<Vec<_>>>()?;
        let (manifest, build) = newest_runnable(builds, cc).map_err(|found| {
            Error::Module(format!(
                "`{}` embeds builds for {found}, none of which runs on this sm_{cc} GPU: rebuild the program with SHMEM_ARCHS=sm_{cc}",
                kernels.crate_name
            ))
        })?;
        let use_cubin = check_compatible(&manifest, self.version(), cc)?;
        let image = match (use_cubin, build.cubin) {
            (true, Some(cubin)) => cubin,
            _ => build.ptx,
        };
        let origin = PathBuf::from(format!(
            "<embedded {} {}, {}>",
            kernels.crate_name,
            manifest.arch,
            if std::ptr::eq(image, build.ptx) {
                "PTX"
            } else {
                "cubin"
            }
        ));
        self.register(
            ModuleKind::Built(Box::new(manifest)),
            image.to_vec(),
            origin,
        )
    }

    /// Loads a module that was *not* built by shmem-rs: a cubin (or PTX) of CUDA C++ kernels
    /// linked with NVSHMEM's device library, as `nvcc -rdc=true -c k.cu && nvcc -dlink -cubin
    /// k.o libnvshmem_device.a -o k.cubin` makes it. It is registered with NVSHMEM like a Rust
    /// module, so its kernels share this runtime's symmetric heap with the Rust ones: how the
    /// benchmarks run a CUDA C++ twin next to a Rust kernel in one process. Its kernels are
    /// looked up by the name of a Rust kernel type ([`Module::kernel`]) and launched with
    /// that type's parameters; cooperatively only when [`LaunchConfig::cooperative`] says so.
    ///
    /// # Safety
    /// Every kernel asked for as `module.kernel::<K>()` takes exactly `K::Params` (same
    /// number, order, sizes and meaning) and upholds `K`'s contract. Nothing can check this:
    /// a CUDA C++ cubin carries no signatures.
    pub unsafe fn load_cuda_module(&self, path: &Path) -> Result<Module<'_>> {
        if self.is_simulated() {
            return Err(Error::Simulator(format!(
                "{} cannot run on the CPU simulator: it runs Rust kernels only (CUDA C++ \
                 kernels need a GPU)",
                path.display()
            )));
        }
        let image = std::fs::read(path)
            .map_err(|e| Error::Module(format!("cannot read {}: {e}", path.display())))?;
        self.register(ModuleKind::Cuda, image, path.to_path_buf())
    }

    fn simulated_module(&self, krate: &str, manifest: Option<Manifest>) -> Result<Module<'_>> {
        let origin = PathBuf::from(format!("<{krate}, simulated>"));
        let kind = ModuleKind::Simulated {
            crate_name: krate.into(),
            manifest: manifest.map(Box::new),
        };
        self.register(kind, Vec::new(), origin)
    }

    /// Loads `image` and registers it with NVSHMEM (nothing to load under the simulator).
    fn register(&self, kind: ModuleKind, image: Vec<u8>, origin: PathBuf) -> Result<Module<'_>> {
        let cu_module = self
            .backend
            .load(image, &origin)?
            .unwrap_or(std::ptr::null_mut());
        Ok(Module {
            rt: self,
            cu_module,
            kind,
            origin,
        })
    }
}

/// A kernel crate embedded in the program by `shmem_build::embed_kernels` (in `build.rs`)
/// and [`crate::include_kernels!`]: one build per architecture. [`Shmem::load_embedded`]
/// loads the right one for the GPU at hand.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedKernels {
    /// The kernel crate's package name.
    pub crate_name: &'static str,
    /// Its builds (none when it was built for the simulator only, `SHMEM_KERNELS=simulator`).
    pub builds: &'static [EmbeddedBuild],
}

/// One architecture's build of an [`EmbeddedKernels`].
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedBuild {
    /// The manifest (JSON).
    pub manifest: &'static str,
    /// The PTX.
    pub ptx: &'static [u8],
    /// The cubin `ptxas` made for exactly this architecture, if it ran.
    pub cubin: Option<&'static [u8]>,
}

/// The kernels a `build.rs` built with `shmem_build::embed_kernels`, embedded in the program:
/// `static KERNELS: EmbeddedKernels = shmem_host::include_kernels!("my-kernels");`, then
/// [`Shmem::load_embedded`]`(&KERNELS)`. The name is the kernel crate's package name.
#[macro_export]
macro_rules! include_kernels {
    ($crate_name:literal) => {
        include!(concat!(
            env!("OUT_DIR"),
            "/shmem-kernels/",
            $crate_name,
            ".rs"
        ))
    };
}

/// Whose kernels a program runs: a kernel crate built by shmem-rs, or a CUDA C++ cubin whose
/// kernels have the same names and parameters (the examples' `--cuda` and the benchmarks'
/// twins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// The Rust kernels, from `build-ptx`'s output directory.
    Rust {
        /// The directory `cargo xtask build-ptx` wrote (`target/ptx`).
        ptx_dir: PathBuf,
    },
    /// CUDA C++ kernels, device-linked with NVSHMEM's device library into a cubin.
    Cuda {
        /// The cubin.
        cubin: PathBuf,
    },
}

impl Implementation {
    /// Loads kernel crate `krate` from `ptx_dir`, or the cubin. Collective.
    ///
    /// # Safety
    /// For [`Implementation::Cuda`], the contract of [`Shmem::load_cuda_module`]: the cubin's
    /// kernels take the parameters of `krate`'s kernels of the same names.
    pub unsafe fn load<'rt>(&self, rt: &'rt Shmem, krate: &str) -> Result<Module<'rt>> {
        match self {
            Implementation::Rust { ptx_dir } => rt.load_module(ptx_dir, krate),
            // SAFETY: the caller's contract.
            Implementation::Cuda { cubin } => unsafe { rt.load_cuda_module(cubin) },
        }
    }

    /// `"Rust"` or `"CUDA C++"`.
    pub fn label(&self) -> &'static str {
        match self {
            Implementation::Rust { .. } => "Rust",
            Implementation::Cuda { .. } => "CUDA C++",
        }
    }
}

impl<'rt> Module<'rt> {
    /// Where the module came from, and what it records.
    pub fn kind(&self) -> &ModuleKind {
        &self.kind
    }

    /// The manifest, for a module built by shmem-rs.
    pub fn manifest(&self) -> Option<&Manifest> {
        match &self.kind {
            ModuleKind::Built(m) => Some(m),
            _ => None,
        }
    }

    /// Whether this module's kernels can be launched as dependents (they wait in
    /// `shmem_device::pdl::wait`): built for sm_90 or later, or CUDA C++ (the loader's
    /// promise); not simulated (the simulator runs launches in order).
    fn can_wait_for_previous(&self) -> bool {
        match &self.kind {
            ModuleKind::Built(m) => m
                .arch
                .parse::<Arch>()
                .is_ok_and(|a| a.number() >= Arch::Sm90.number()),
            ModuleKind::Cuda => true,
            ModuleKind::Simulated { .. } => false,
        }
    }

    /// The file loaded (cubin or PTX), or a description of an embedded or simulated module.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// The runtime the module was loaded into.
    pub fn runtime(&self) -> &'rt Shmem {
        self.rt
    }

    /// The kernel `K` (a type generated by `#[shmem_kernel]`). In a built module it is
    /// checked against the manifest: it must be an entry, with the parameters the Rust
    /// signature has now (a stale build is an error). In a CUDA C++ module it is looked up
    /// by name (its parameters are the loader's promise).
    pub fn kernel<K: Kernel>(&self) -> Result<KernelFn<'_, K>> {
        let module_crate = match &self.kind {
            ModuleKind::Built(m) => Some(m.crate_name.as_str()),
            ModuleKind::Simulated { crate_name, .. } => Some(crate_name.as_str()),
            ModuleKind::Cuda => None,
        };
        if let Some(name) = module_crate
            && name != K::CRATE
        {
            return Err(Error::Module(format!(
                "kernel `{}` is defined in crate `{}`, but this module is `{name}`: load `{}` for it",
                K::NAME,
                K::CRATE,
                K::CRATE
            )));
        }
        let manifest = match &self.kind {
            ModuleKind::Built(m) => Some(m),
            ModuleKind::Simulated { manifest, .. } => manifest.as_ref(),
            ModuleKind::Cuda => None,
        };
        let (collective, max_threads) = match manifest {
            Some(manifest) => {
                let entry = manifest.kernel(K::NAME).ok_or_else(|| {
                    Error::Module(format!(
                        "kernel `{}` is not in module `{}`: rebuild it (`cargo xtask build-ptx`)",
                        K::NAME,
                        manifest.crate_name
                    ))
                })?;
                let built: Vec<(&str, &str)> = entry
                    .params
                    .iter()
                    .map(|p| (p.name.as_str(), p.ty.as_str()))
                    .collect();
                let now: Vec<(&str, &str)> = K::PARAMS.iter().map(|p| (p.name, p.ty)).collect();
                if built != now {
                    return Err(Error::Module(format!(
                        "kernel `{}` changed since module `{}` was built ({built:?} then, {now:?} now): rebuild it",
                        K::NAME,
                        manifest.crate_name
                    )));
                }
                (entry.collective, entry.max_threads)
            }
            None => (false, None),
        };
        // The simulator runs any grid; occupancy and launch bounds are a GPU's.
        let (collective, max_threads) = if self.rt.is_simulated() {
            (false, None)
        } else {
            (collective, max_threads)
        };
        let f = self
            .rt
            .backend
            .function(self.cu_module, K::NAME, &self.origin)?;
        Ok(KernelFn {
            module: self,
            f,
            collective,
            max_threads,
            fit: FitCache::default(),
            _k: PhantomData,
        })
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        if !self.cu_module.is_null() {
            // SAFETY: loaded by the backend in `register`, unloaded once, here.
            unsafe { self.rt.backend.unload(self.cu_module) }
        }
    }
}

/// The co-residency limit of the last block shape asked about, so that a launch loop does
/// not ask the occupancy API every time.
#[derive(Default)]
struct FitCache(std::cell::Cell<Option<(u32, u32, u32)>>);

/// A kernel of a loaded [`Module`], launched with host arguments typed by `K`.
pub struct KernelFn<'m, K> {
    module: &'m Module<'m>,
    f: Function,
    collective: bool,
    max_threads: Option<u32>,
    fit: FitCache,
    _k: PhantomData<K>,
}

/// A kernel's parameters on their way to a backend.
struct Params<K: Kernel>(K::Params);

/// Kernel parameters hold raw symmetric addresses, which are not `Send`.
#[cfg(feature = "sim")]
struct Crossing<T>(T);
// SAFETY: the addresses point into the simulator's heaps, which outlive the launch; the
// simulator runs one thread at a time, and the host threads wait while it runs.
#[cfg(feature = "sim")]
unsafe impl<T> Send for Crossing<T> {}
// SAFETY: as above.
#[cfg(feature = "sim")]
unsafe impl<T> Sync for Crossing<T> {}

impl<K: Kernel> LaunchArgs for Params<K>
where
    K::Params: ParamPtrs,
{
    fn param_ptrs(&mut self) -> Vec<*mut c_void> {
        self.0.param_ptrs()
    }

    #[cfg(feature = "sim")]
    fn host_call(&self) -> crate::backend::HostCall {
        let params = Crossing(self.0);
        std::sync::Arc::new(move || {
            let p = &params;
            // SAFETY: the launch's caller promised the kernel's contract for these
            // parameters (`KernelFn::launch`).
            unsafe { K::call_on_host(p.0) }
        })
    }
}

impl<K: Kernel> KernelFn<'_, K>
where
    K::Params: ParamPtrs,
{
    /// Whether the module says it must be launched cooperatively (a collective kernel of a
    /// built module).
    pub fn is_collective(&self) -> bool {
        self.collective
    }

    /// How many blocks of `cfg`'s shape this PE can count on being resident at once: what
    /// the GPU holds, divided among the PEs that share it (several PEs on one GPU under CUDA
    /// MPS run at once, on SMs that MPS does not keep apart). Cooperative launches are
    /// checked against it.
    pub fn max_coresident_blocks(&self, cfg: &LaunchConfig) -> Result<u32> {
        let key = (cfg.threads(), cfg.shared_mem_bytes);
        if let Some((t, m, max)) = self.fit.0.get()
            && (t, m) == key
        {
            return Ok(max);
        }
        let max = self.module.rt.backend.coresident_blocks(self.f, cfg)?;
        self.fit.0.set(Some((key.0, key.1, max)));
        Ok(max)
    }

    /// Launches the kernel as `cfg` says. Cooperative launches (collective kernels of a built
    /// module, unless `cfg` says otherwise) are checked first: a grid that cannot be
    /// co-resident is [`Error::GridNotCoResident`], not a deadlock. A block larger than the
    /// kernel's `max_threads` is an error too.
    ///
    /// # Safety
    /// The kernel's own `# Safety` contract holds for these arguments and this shape (which
    /// PEs launch it, buffer sizes, block shape). For a collective kernel, every PE launches it.
    pub unsafe fn launch(&self, cfg: LaunchConfig, args: impl HostArgs<K::Params>) -> Result<()> {
        if cfg.blocks() == 0 || cfg.threads() == 0 {
            return Err(Error::Invalid(format!(
                "launch of `{}` with an empty grid or block: {cfg:?}",
                K::NAME
            )));
        }
        if let Some(max) = self.max_threads
            && cfg.threads() > max
        {
            return Err(Error::Invalid(format!(
                "kernel `{}` was built for at most {max} threads per block \
                 (#[shmem_kernel(max_threads = {max})]); this launch has {}",
                K::NAME,
                cfg.threads()
            )));
        }
        if let Some(SharedCarveout::Percent(p)) = cfg.shared_carveout
            && p > 100
        {
            return Err(Error::Invalid(format!(
                "launch of `{}` with a shared-memory carveout of {p} %: at most 100",
                K::NAME
            )));
        }
        let cooperative = cfg.cooperative.unwrap_or(self.collective);
        if cooperative {
            let max = self.max_coresident_blocks(&cfg)?;
            if cfg.blocks() > max {
                return Err(Error::GridNotCoResident {
                    kernel: K::NAME.to_string(),
                    blocks: cfg.blocks(),
                    max_blocks: max,
                });
            }
        }
        // A built module for an architecture before sm_90 has an empty `pdl::wait`; a
        // cooperative launch never starts early.
        let cfg = LaunchConfig {
            dependent: cfg.dependent && !cooperative && self.module.can_wait_for_previous(),
            ..cfg
        };
        let mut params = Params::<K>(args.to_params());
        // SAFETY: `params` are `K::Params` (checked against the manifest for a built module,
        // the loader's promise for a CUDA C++ one); the caller's contract covers the rest.
        unsafe {
            self.module
                .rt
                .backend
                .launch(self.f, K::NAME, &cfg, cooperative, &mut params)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmem_manifest::MANIFEST_FORMAT;

    fn manifest(version: &str, arch: &str, cubin: bool) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            crate_name: "k".into(),
            arch: arch.into(),
            ptx_isa: "8.5".into(),
            ptx: "k.ptx".into(),
            nvshmem_version: version.into(),
            nvshmem_bitcode: String::new(),
            toolchain: String::new(),
            ptxas_verified: cubin,
            cubin: cubin.then(|| "k.cubin".into()),
            kernels: vec![],
            fingerprint: String::new(),
        }
    }

    #[test]
    fn newer_device_library_than_host_is_refused() {
        let e = check_compatible(&manifest("3.8.0", "sm_90", true), (3, 4, 5), 90)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("linked against NVSHMEM 3.8.0") && e.contains("3.4.5"),
            "{e}"
        );
        assert!(check_compatible(&manifest("3.4.5", "sm_90", true), (3, 8, 0), 90).unwrap());
    }

    #[test]
    fn the_newest_build_not_newer_than_the_gpu() {
        let builds = || vec![(90, "b90"), (80, "b80"), (100, "b100")];
        assert_eq!(newest_runnable(builds(), 90), Ok("b90"));
        assert_eq!(newest_runnable(builds(), 89), Ok("b80"));
        assert_eq!(
            newest_runnable(builds(), 75),
            Err("sm_80, sm_90, sm_100".into())
        );
        assert_eq!(
            newest_runnable(Vec::<(u32, ())>::new(), 90),
            Err("none".into())
        );
    }

    #[test]
    fn arch_rules() {
        let e = check_compatible(&manifest("3.4.5", "sm_90", true), (3, 4, 5), 80)
            .unwrap_err()
            .to_string();
        assert!(e.contains("built for sm_90 but this GPU is sm_80"), "{e}");
        // Same arch: the cubin; older arch: PTX (JIT); no cubin: PTX.
        assert!(check_compatible(&manifest("3.4.5", "sm_90", true), (3, 4, 5), 90).unwrap());
        assert!(!check_compatible(&manifest("3.4.5", "sm_80", true), (3, 4, 5), 90).unwrap());
        assert!(!check_compatible(&manifest("3.4.5", "sm_90", false), (3, 4, 5), 90).unwrap());
    }
}
