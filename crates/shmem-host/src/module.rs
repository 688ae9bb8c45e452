//! Loading kernel modules built by `cargo xtask build-ptx` and launching their kernels.

use crate::args::{HostArgs, ParamPtrs};
use crate::error::{Error, Result};
use crate::runtime::Shmem;
use cudarc::driver::{result, sys};
use shmem_build::Manifest;
use shmem_device::kernel::Kernel;
use std::ffi::{CString, c_void};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Grid and block shape of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks per grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `blocks` blocks of `threads` threads.
    pub fn linear(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
    fn blocks(&self) -> u32 {
        self.grid.0 * self.grid.1 * self.grid.2
    }
    fn threads(&self) -> u32 {
        self.block.0 * self.block.1 * self.block.2
    }
    /// An error for an empty grid or block (a launch of kernel `name`).
    fn check_nonempty(&self, name: &str) -> Result<()> {
        if self.blocks() == 0 || self.threads() == 0 {
            return Err(Error::Invalid(format!(
                "launch of `{name}` with an empty grid or block: {self:?}"
            )));
        }
        Ok(())
    }
}

/// A loaded, NVSHMEM-registered module. Only a registered module hands out kernels.
pub struct Module<'rt> {
    rt: &'rt Shmem,
    cu_module: sys::CUmodule,
    manifest: Manifest,
    /// The file loaded (cubin or PTX).
    pub loaded_from: PathBuf,
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
    let major = rt
        .context()?
        .attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = rt
        .context()?
        .attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok((major * 10 + minor) as u32)
}

fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// Decides whether a module built as `manifest` can run with NVSHMEM `runtime` on a GPU of
/// compute capability `cc`, and from which file: `Ok(true)` for the cubin, `Ok(false)` for PTX.
pub fn check_compatible(manifest: &Manifest, runtime: (u32, u32, u32), cc: u32) -> Result<bool> {
    let linked = parse_version(&manifest.nvshmem_version).ok_or_else(|| {
        Error::Module(format!(
            "manifest has an unreadable NVSHMEM version {:?}",
            manifest.nvshmem_version
        ))
    })?;
    if linked > runtime {
        return Err(Error::Module(format!(
            "module `{}` was linked against NVSHMEM {} but this process runs NVSHMEM {}.{}.{}: device code may not be \
             newer than the host library. Rebuild it against {}.{}.{} (`cargo xtask build-ptx --nvshmem DIR`) or upgrade the host library",
            manifest.crate_name,
            manifest.nvshmem_version,
            runtime.0,
            runtime.1,
            runtime.2,
            runtime.0,
            runtime.1,
            runtime.2
        )));
    }
    let arch: u32 = manifest
        .arch
        .trim_start_matches("sm_")
        .parse()
        .unwrap_or(u32::MAX);
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
    /// (their host build), so `build-ptx` is not needed, and the module's manifest is a
    /// stand-in with arch `sim`.
    pub fn load_module(&self, ptx_dir: &Path, krate: &str) -> Result<Module<'_>> {
        #[cfg(feature = "sim")]
        if self.is_simulated() {
            return Ok(Module {
                rt: self,
                cu_module: std::ptr::null_mut(),
                manifest: simulated_manifest(krate),
                loaded_from: PathBuf::from(format!("<{krate}, simulated>")),
            });
        }
        let cc = compute_capability(self)?;
        let mut archs: Vec<(u32, PathBuf)> = std::fs::read_dir(ptx_dir)
            .map_err(|e| {
                Error::Module(format!(
                    "cannot read {}: {e} (run `cargo xtask build-ptx`)",
                    ptx_dir.display()
                ))
            })?
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                let a: u32 = n.strip_prefix("sm_")?.parse().ok()?;
                e.path()
                    .join(format!("{krate}.json"))
                    .is_file()
                    .then_some((a, e.path()))
            })
            .collect();
        archs.sort();
        let dir = archs
            .iter()
            .rev()
            .find(|(a, _)| *a <= cc)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| {
                Error::Module(format!(
                    "no build of `{krate}` in {} runs on this sm_{cc} GPU (found: {}); run `cargo xtask build-ptx --arch sm_{cc}`",
                    ptx_dir.display(),
                    if archs.is_empty() { "none".into() } else { archs.iter().map(|(a, _)| format!("sm_{a}")).collect::<Vec<_>>().join(", ") }
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
        self.register(manifest, image, file)
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
        let manifest: Manifest = serde_json::from_str(manifest_json)
            .map_err(|e| Error::Module(format!("embedded manifest is unreadable: {e}")))?;
        #[cfg(feature = "sim")]
        if self.is_simulated() {
            return self.load_module(Path::new(""), &manifest.crate_name);
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
        self.register(manifest, image.to_vec(), origin)
    }

    /// Loads `image` (cubin or PTX) into this GPU's context and registers it with NVSHMEM.
    fn register(&self, manifest: Manifest, image: Vec<u8>, origin: PathBuf) -> Result<Module<'_>> {
        let cu_module = self.load_and_init(image, &origin)?;
        Ok(Module {
            rt: self,
            cu_module,
            manifest,
            loaded_from: origin,
        })
    }

    /// Loads `image` into this GPU's context, then `nvshmemx_cumodule_init` on it.
    fn load_and_init(&self, mut image: Vec<u8>, origin: &Path) -> Result<sys::CUmodule> {
        image.push(0);
        let lib = self.gpu()?.lib;
        self.context()?.bind_to_thread()?;
        // SAFETY: `image` is a NUL-terminated PTX text or a cubin, alive for the call.
        let cu_module =
            unsafe { result::module::load_data(image.as_ptr().cast()) }.map_err(|e| {
                Error::Module(format!(
                    "the CUDA driver rejected {}: {e}",
                    origin.display()
                ))
            })?;
        // SAFETY: a freshly loaded module of this context; NVSHMEM is running.
        let rc = unsafe { (lib.nvshmemx_cumodule_init)(cu_module.cast()) };
        if rc != 0 {
            // SAFETY: the module was loaded above and is not used elsewhere.
            let _ = unsafe { result::module::unload(cu_module) };
            return Err(Error::Nvshmem {
                call: "nvshmemx_cumodule_init",
                status: rc,
            });
        }
        Ok(cu_module)
    }

    /// Loads a module that was *not* built by shmem-rs: a cubin (or PTX) of CUDA C++ kernels
    /// linked with NVSHMEM's device library, as `nvcc -rdc=true -c k.cu && nvcc -dlink -cubin
    /// k.o libnvshmem_device.a -o k.cubin` makes it. It is registered with NVSHMEM like a Rust
    /// module, so its kernels share this runtime's symmetric heap with the Rust ones; this is
    /// how the benchmarks run a CUDA C++ reference next to a Rust kernel in one process.
    ///
    /// Nothing records the NVSHMEM version or the kernels' signatures of such a file: its
    /// kernels are looked up by name and launched through [`ForeignModule::kernel`], whose
    /// caller states their parameter types.
    pub fn load_foreign_module(&self, path: &Path) -> Result<ForeignModule<'_>> {
        if self.is_simulated() {
            return Err(Error::Simulator(format!(
                "{} cannot run on the CPU simulator: it runs Rust kernels only (CUDA C++ \
                 kernels need a GPU)",
                path.display()
            )));
        }
        let image = std::fs::read(path)
            .map_err(|e| Error::Module(format!("cannot read {}: {e}", path.display())))?;
        let cu_module = self.load_and_init(image, path)?;
        Ok(ForeignModule {
            rt: self,
            cu_module,
            loaded_from: path.to_path_buf(),
        })
    }
}

/// The manifest of a module under the simulator, which builds nothing.
#[cfg(feature = "sim")]
fn simulated_manifest(krate: &str) -> Manifest {
    Manifest {
        format: 1,
        crate_name: krate.into(),
        arch: "sim".into(),
        ptx_isa: String::new(),
        ptx: String::new(),
        nvshmem_version: format!(
            "{}.{}.{}",
            crate::sim::NVSHMEM_VERSION.0,
            crate::sim::NVSHMEM_VERSION.1,
            crate::sim::NVSHMEM_VERSION.2
        ),
        nvshmem_bitcode: String::new(),
        toolchain: String::new(),
        ptxas_verified: false,
        cubin: None,
        kernels: vec![],
        fingerprint: String::new(),
    }
}

/// Unloads a registered module once no launch of it is in flight.
fn unload(rt: &Shmem, cu_module: sys::CUmodule) {
    let Ok(g) = rt.gpu() else { return };
    let _ = g.stream.synchronize();
    // SAFETY: registered by `load_and_init`; no launch of it is in flight (synchronised); the
    // caller drops its only handle.
    unsafe {
        (g.lib.nvshmemx_cumodule_finalize)(cu_module.cast());
        let _ = result::module::unload(cu_module);
    }
}

/// Looks up `name` in `cu_module`.
fn function(cu_module: sys::CUmodule, name: &str, origin: &Path) -> Result<sys::CUfunction> {
    let c = CString::new(name).map_err(|_| Error::Invalid("kernel name has a NUL".into()))?;
    // SAFETY: the module is loaded; `c` is NUL-terminated.
    unsafe { result::module::get_function(cu_module, c) }.map_err(|e| {
        Error::Module(format!(
            "kernel `{name}` is not in {}: {e}",
            origin.display()
        ))
    })
}

/// How many blocks of `cfg`'s shape of `f` can be resident on the runtime's GPU at once.
fn coresident_blocks(rt: &Shmem, f: sys::CUfunction, cfg: &LaunchConfig) -> Result<u32> {
    #[cfg(feature = "sim")]
    if rt.is_simulated() {
        return Ok(crate::sim::coresident_blocks(cfg.threads()));
    }
    // SAFETY: `f` is a function of a loaded module of the runtime's context.
    let per_sm = unsafe {
        result::occupancy::max_active_block_per_multiprocessor(
            f,
            cfg.threads() as i32,
            cfg.shared_mem_bytes as usize,
        )
    }?;
    let sms = rt
        .context()?
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok((per_sm.max(0) * sms) as u32)
}

/// The co-residency limit of the last block shape launched, so that a launch loop does not
/// ask the occupancy API every time.
#[derive(Default)]
struct FitCache(std::cell::Cell<Option<(u32, u32, u32)>>);

impl FitCache {
    fn get(&self, rt: &Shmem, f: sys::CUfunction, cfg: &LaunchConfig) -> Result<u32> {
        let key = (cfg.threads(), cfg.shared_mem_bytes);
        if let Some((t, m, max)) = self.0.get()
            && (t, m) == key
        {
            return Ok(max);
        }
        let max = coresident_blocks(rt, f, cfg)?;
        self.0.set(Some((key.0, key.1, max)));
        Ok(max)
    }
}

/// Launches `f` on the runtime's stream; cooperatively (after the co-residency check) when
/// `collective`.
///
/// # Safety
/// `ptrs` point at values whose types are `f`'s parameters, alive for the call; the kernel's
/// own contract holds for them and for `cfg`.
#[allow(clippy::too_many_arguments)]
unsafe fn launch_raw(
    rt: &Shmem,
    f: sys::CUfunction,
    name: &str,
    collective: bool,
    fit: &FitCache,
    cfg: LaunchConfig,
    ptrs: &mut [*mut c_void],
) -> Result<()> {
    cfg.check_nonempty(name)?;
    let stream = rt.stream()?.cu_stream();
    rt.context()?.bind_to_thread()?;
    if collective {
        let max = fit.get(rt, f, &cfg)?;
        if cfg.blocks() > max {
            return Err(Error::GridNotCoResident {
                kernel: name.to_string(),
                blocks: cfg.blocks(),
                max_blocks: max,
            });
        }
        // SAFETY: the caller's contract: `ptrs` match `f`'s parameters and live for the call
        // (the driver copies them).
        unsafe {
            result::launch_cooperative_kernel(
                f,
                cfg.grid,
                cfg.block,
                cfg.shared_mem_bytes,
                stream,
                ptrs,
            )
        }?;
    } else {
        // SAFETY: as above.
        unsafe {
            result::launch_kernel(f, cfg.grid, cfg.block, cfg.shared_mem_bytes, stream, ptrs)
        }?;
    }
    Ok(())
}

impl<'rt> Module<'rt> {
    /// The manifest the module was built with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The kernel `K` (a type generated by `#[shmem_kernel]`), checked against the module:
    /// it must be an entry, with the parameters the Rust signature has now.
    pub fn kernel<K: Kernel>(&self) -> Result<KernelFn<'_, K>> {
        if self.cu_module.is_null() {
            // Simulated: the kernel runs from this program's own build of it.
            return Ok(KernelFn {
                module: self,
                f: std::ptr::null_mut(),
                collective: false,
                max_threads: None,
                fit: FitCache::default(),
                _k: PhantomData,
            });
        }
        let entry = self.manifest.kernel(K::NAME).ok_or_else(|| {
            Error::Module(format!(
                "kernel `{}` is not in module `{}`: rebuild it (`cargo xtask build-ptx`)",
                K::NAME,
                self.manifest.crate_name
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
                self.manifest.crate_name
            )));
        }
        let f = function(self.cu_module, K::NAME, &self.loaded_from)?;
        Ok(KernelFn {
            module: self,
            f,
            collective: entry.collective,
            max_threads: entry.max_threads,
            fit: FitCache::default(),
            _k: PhantomData,
        })
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        if !self.cu_module.is_null() {
            unload(self.rt, self.cu_module);
        }
    }
}

/// A kernel of a registered module, launched with host arguments typed by `K`.
pub struct KernelFn<'m, K> {
    module: &'m Module<'m>,
    f: sys::CUfunction,
    collective: bool,
    max_threads: Option<u32>,
    fit: FitCache,
    _k: PhantomData<K>,
}

impl<K: Kernel> KernelFn<'_, K>
where
    K::Params: ParamPtrs,
{
    /// Whether the manifest says it must be launched collectively.
    pub fn is_collective(&self) -> bool {
        self.collective
    }

    /// How many blocks of `cfg`'s shape can be resident on this GPU at once.
    pub fn max_coresident_blocks(&self, cfg: &LaunchConfig) -> Result<u32> {
        coresident_blocks(self.module.rt, self.f, cfg)
    }

    /// Launches the kernel on the runtime's stream. Collective kernels (per the manifest) are
    /// launched cooperatively, after checking that the whole grid fits on the GPU at once; a
    /// grid that does not is an error, not a deadlock.
    ///
    /// # Safety
    /// The kernel's own `# Safety` contract holds for these arguments and this shape (which
    /// PEs launch it, buffer sizes, block shape). For a collective kernel, every PE launches it.
    pub unsafe fn launch(&self, cfg: LaunchConfig, args: impl HostArgs<K::Params>) -> Result<()> {
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
        let mut params = args.to_params();
        #[cfg(feature = "sim")]
        if let Some(sim) = self.module.rt.sim() {
            cfg.check_nonempty(K::NAME)?;
            let shape = shmem_device::sim::Shape {
                grid: cfg.grid,
                block: cfg.block,
            };
            return sim.launch::<K>(shape, params);
        }
        let mut ptrs: Vec<*mut c_void> = params.param_ptrs();
        // SAFETY: `ptrs` point at the fields of `params` (alive until the call returns), whose
        // types are the kernel's parameters (`K::Params`, checked against the manifest).
        unsafe {
            launch_raw(
                self.module.rt,
                self.f,
                K::NAME,
                self.collective,
                &self.fit,
                cfg,
                &mut ptrs,
            )
        }
    }
}

/// A module of CUDA C++ (or any non-shmem-rs) kernels, registered with NVSHMEM; from
/// [`Shmem::load_foreign_module`].
pub struct ForeignModule<'rt> {
    rt: &'rt Shmem,
    cu_module: sys::CUmodule,
    /// The file loaded.
    pub loaded_from: PathBuf,
}

impl ForeignModule<'_> {
    /// The `extern "C"` kernel `name`, whose parameters are the tuple `P` (for example
    /// `(SymSlice<f32>, u32)` for `__global__ void k(float *, unsigned)`). Launches take the
    /// same host arguments as a Rust kernel with those parameters.
    ///
    /// # Safety
    /// `P` is the kernel's parameter list: same number, order, sizes and meaning. Nothing can
    /// check this: a CUDA C++ cubin carries no signatures.
    pub unsafe fn kernel<P: ParamPtrs>(&self, name: &str) -> Result<ForeignKernel<'_, P>> {
        Ok(ForeignKernel {
            rt: self.rt,
            f: function(self.cu_module, name, &self.loaded_from)?,
            name: name.to_string(),
            fit: FitCache::default(),
            _p: PhantomData,
        })
    }
}

impl Drop for ForeignModule<'_> {
    fn drop(&mut self) {
        unload(self.rt, self.cu_module);
    }
}

/// A kernel of a [`ForeignModule`], with parameter tuple `P`.
pub struct ForeignKernel<'m, P> {
    rt: &'m Shmem,
    f: sys::CUfunction,
    name: String,
    fit: FitCache,
    _p: PhantomData<P>,
}

impl<P: ParamPtrs> ForeignKernel<'_, P> {
    /// How many blocks of `cfg`'s shape can be resident on this GPU at once.
    pub fn max_coresident_blocks(&self, cfg: &LaunchConfig) -> Result<u32> {
        coresident_blocks(self.rt, self.f, cfg)
    }

    /// Launches the kernel on the runtime's stream; cooperatively, after the co-residency
    /// check, when `cooperative` (which a kernel that waits on other blocks or PEs needs).
    ///
    /// # Safety
    /// The kernel's own contract holds for these arguments and this shape.
    pub unsafe fn launch(
        &self,
        cfg: LaunchConfig,
        cooperative: bool,
        args: impl HostArgs<P>,
    ) -> Result<()> {
        let mut params = args.to_params();
        let mut ptrs = params.param_ptrs();
        // SAFETY: `ptrs` point at the fields of `params`, alive for the call; `P` is the
        // kernel's parameter list (the contract of `ForeignModule::kernel`).
        unsafe {
            launch_raw(
                self.rt,
                self.f,
                &self.name,
                cooperative,
                &self.fit,
                cfg,
                &mut ptrs,
            )
        }
    }
}

/// Whose kernels a program runs: a kernel crate built by shmem-rs, or a CUDA C++ cubin whose
/// kernels have the same names and parameters (the examples' `--cuda` and `--compare`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// The Rust kernels, from `build-ptx`'s output directory.
    Rust {
        /// The directory `cargo xtask build-ptx` wrote (`target/ptx`).
        ptx_dir: PathBuf,
    },
    /// CUDA C++ kernels, device-linked with NVSHMEM's device library into a cubin
    /// (`scripts/nvcc-cubin.sh`).
    Cuda {
        /// The cubin.
        cubin: PathBuf,
    },
}

impl Implementation {
    /// Loads kernel crate `krate` from `ptx_dir`, or the cubin. Collective.
    pub fn load<'rt>(&self, rt: &'rt Shmem, krate: &str) -> Result<AnyModule<'rt>> {
        Ok(match self {
            Implementation::Rust { ptx_dir } => {
                AnyModule::Rust(Box::new(rt.load_module(ptx_dir, krate)?))
            }
            Implementation::Cuda { cubin } => AnyModule::Foreign(rt.load_foreign_module(cubin)?),
        })
    }
}

/// A module of either kind: a shmem-rs module or a [`ForeignModule`] whose kernels have the
/// same names and parameters (for running a Rust kernel and its CUDA C++ counterpart through
/// the same host code).
pub enum AnyModule<'rt> {
    /// Built by shmem-rs.
    Rust(Box<Module<'rt>>),
    /// Built from CUDA C++.
    Foreign(ForeignModule<'rt>),
}

impl AnyModule<'_> {
    /// The kernel named like `K` with `K`'s parameters. For a foreign module, `collective`
    /// says whether to launch it cooperatively (a Rust module's manifest says it itself).
    ///
    /// # Safety
    /// For a foreign module, the kernel named `K::NAME` takes exactly `K::Params` (see
    /// [`ForeignModule::kernel`]).
    pub unsafe fn kernel<K: Kernel>(&self, collective: bool) -> Result<AnyKernel<'_, K>>
    where
        K::Params: ParamPtrs,
    {
        Ok(match self {
            AnyModule::Rust(m) => AnyKernel::Rust(m.kernel::<K>()?),
            AnyModule::Foreign(m) => AnyKernel::Foreign {
                // SAFETY: the caller's contract.
                kernel: unsafe { m.kernel::<K::Params>(K::NAME)? },
                collective,
            },
        })
    }
}

/// A kernel of an [`AnyModule`].
pub enum AnyKernel<'m, K: Kernel> {
    /// From a shmem-rs module.
    Rust(KernelFn<'m, K>),
    /// From a foreign module.
    Foreign {
        /// The kernel.
        kernel: ForeignKernel<'m, K::Params>,
        /// Launched cooperatively.
        collective: bool,
    },
}

impl<K: Kernel> AnyKernel<'_, K>
where
    K::Params: ParamPtrs,
{
    /// How many blocks of `cfg`'s shape can be resident on this GPU at once.
    pub fn max_coresident_blocks(&self, cfg: &LaunchConfig) -> Result<u32> {
        match self {
            AnyKernel::Rust(k) => k.max_coresident_blocks(cfg),
            AnyKernel::Foreign { kernel, .. } => kernel.max_coresident_blocks(cfg),
        }
    }

    /// Launches it (see [`KernelFn::launch`] and [`ForeignKernel::launch`]).
    ///
    /// # Safety
    /// The kernel's own contract holds for these arguments and this shape.
    pub unsafe fn launch(&self, cfg: LaunchConfig, args: impl HostArgs<K::Params>) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                AnyKernel::Rust(k) => k.launch(cfg, args),
                AnyKernel::Foreign { kernel, collective } => kernel.launch(cfg, *collective, args),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(version: &str, arch: &str, cubin: bool) -> Manifest {
        Manifest {
            format: 1,
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
