//! NVSHMEM on this process's GPU: the backend of a PE started by the launcher, `mpirun` or
//! `srun`.

use super::{Backend, Function, LaunchArgs, PeInfo};
use crate::error::{Error, Result};
use crate::module::LaunchConfig;
use crate::nvshmem::{HostSync, Nvshmem, sys::RawUniqueId};
use crate::runtime::Mark;
use cudarc::driver::{CudaContext, CudaStream, result, sys};
use std::ffi::{CString, c_void};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether NVSHMEM runs in this process (it allows one start per process).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// NVSHMEM on a GPU.
pub(crate) struct Gpu {
    pub(crate) nv: Nvshmem,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pe: PeInfo,
    /// 4 symmetric `i64`s for the runtime's own agreement checks.
    ctl: *mut i64,
}

/// How NVSHMEM learns who its PEs are.
pub(crate) enum Start<'a> {
    /// From a unique id handed over by the caller.
    UniqueId {
        rank: i32,
        nranks: i32,
        uid: &'a RawUniqueId,
    },
    /// Through its own PMI/PMIx/MPI bootstrap.
    Bootstrapped,
}

/// Clears [`RUNNING`] if a start fails half-way.
struct StartGuard(bool);
impl Drop for StartGuard {
    fn drop(&mut self) {
        if !self.0 {
            RUNNING.store(false, Ordering::SeqCst);
        }
    }
}

impl Gpu {
    /// Starts NVSHMEM on GPU `device`.
    pub(crate) fn start(device: usize, how: Start<'_>) -> Result<Gpu> {
        crate::error::ensure_driver()?;
        let nv = Nvshmem::load()?;
        if RUNNING.swap(true, Ordering::SeqCst) {
            return Err(Error::Bootstrap(
                "NVSHMEM is already running in this process (one Shmem per process)".into(),
            ));
        }
        let mut guard = StartGuard(false);
        for (var, path) in crate::nvshmem::sys::bootstrap_plugins(&nv.lib.path) {
            if std::env::var_os(var).is_none() {
                // SAFETY: set before NVSHMEM starts and before this crate starts any thread;
                // NVSHMEM reads these variables during init.
                unsafe { std::env::set_var(var, path) };
            }
        }
        let ctx = CudaContext::new(device).map_err(|e| {
            Error::Cuda(format!(
                "cannot open GPU {device}: {e} (is the NVIDIA driver installed and the GPU visible?)"
            ))
        })?;
        ctx.bind_to_thread()?;
        // SAFETY: this GPU's context is current; NVSHMEM is not running (RUNNING).
        unsafe {
            match how {
                Start::UniqueId { rank, nranks, uid } => {
                    nv.init_with_uniqueid(rank, nranks, uid)?
                }
                Start::Bootstrapped => nv.init_bootstrapped()?,
            }
        }
        let world = crate::nvshmem::sys::TEAM_WORLD;
        // SAFETY: NVSHMEM is running.
        let ((my_pe, n_pes), (node_pe, node_n_pes)) = unsafe {
            (
                nv.team_pe_and_size(world),
                nv.team_pe_and_size(crate::nvshmem::sys::TEAM_NODE),
            )
        };
        let stream = ctx.new_stream()?;
        // SAFETY: collective allocation, made by every PE at the same point of its start.
        let ctl = unsafe { nv.malloc(4 * std::mem::size_of::<i64>())? }.cast::<i64>();
        guard.0 = true;
        Ok(Gpu {
            nv,
            ctx,
            stream,
            pe: PeInfo {
                my_pe,
                n_pes,
                node_pe,
                node_n_pes,
                version: nv.version(),
                kind: crate::runtime::BackendKind::Gpu,
            },
            ctl,
        })
    }

    fn cu_stream(&self) -> crate::nvshmem::sys::Stream {
        self.stream.cu_stream().cast()
    }
}

impl Backend for Gpu {
    fn pe(&self) -> PeInfo {
        self.pe
    }

    fn gpu(&self) -> Result<&Gpu> {
        Ok(self)
    }

    fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    fn mark(&self) -> Result<Mark> {
        Ok(Mark::event(self.stream.record_event(Some(
            sys::CUevent_flags::CU_EVENT_DEFAULT,
        ))?))
    }

    fn sync(&self, op: HostSync) -> Result<()> {
        if !op.on_stream() {
            self.stream.synchronize()?;
        }
        // SAFETY: NVSHMEM is running; the stream is this context's; collective calls are
        // made by every PE (the caller's contract, documented on `Shmem`).
        unsafe { self.nv.sync(op, self.cu_stream()) };
        Ok(())
    }

    fn min_max(&self, value: i64) -> Result<(i64, i64)> {
        let ctl = self.ctl as sys::CUdeviceptr;
        // SAFETY: `ctl` holds 4 i64s of this PE's symmetric heap; the copies are synchronous
        // and no kernel uses the control block; every PE makes this call (collective).
        unsafe {
            result::memcpy_htod_sync(ctl, &[value, -value])?;
            self.nv
                .int64_max_reduce_on_stream(self.ctl.add(2), self.ctl, 2, self.cu_stream())?;
            self.stream.synchronize()?;
            let mut out = [0i64; 2];
            result::memcpy_dtoh_sync(&mut out, ctl + 16)?;
            Ok((-out[1], out[0]))
        }
    }

    fn alloc(&self, bytes: usize) -> Result<*mut u8> {
        let (min, max) = self.min_max(bytes as i64)?;
        super::unequal(bytes, (min as usize, max as usize))?;
        // SAFETY: collective by the caller's contract; every PE asked for `bytes`.
        let p = unsafe { self.nv.malloc(bytes)? }.cast::<u8>();
        // SAFETY: `bytes` bytes of this PE's symmetric heap, just allocated.
        unsafe { self.fill_zero(p, bytes)? };
        Ok(p)
    }

    unsafe fn free(&self, p: *mut u8) {
        let _ = self.stream.synchronize();
        // SAFETY: the caller's contract.
        unsafe { self.nv.free(p.cast()) }
    }

    unsafe fn write(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.stream.synchronize()?;
        // SAFETY: the caller's contract; the stream is idle, so no kernel touches `dst`.
        unsafe {
            result::memcpy_htod_sync(
                dst as sys::CUdeviceptr,
                std::slice::from_raw_parts(src, bytes),
            )?
        };
        Ok(())
    }

    unsafe fn read(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.stream.synchronize()?;
        // SAFETY: the caller's contract; the stream is idle.
        unsafe {
            result::memcpy_dtoh_sync(
                std::slice::from_raw_parts_mut(dst, bytes),
                src as sys::CUdeviceptr,
            )?
        };
        Ok(())
    }

    unsafe fn fill_zero(&self, p: *mut u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memset_d8_sync(p as sys::CUdeviceptr, 0, bytes)? };
        Ok(())
    }

    fn peer_ptr(&self, p: *const u8, pe: i32) -> Option<u64> {
        // SAFETY: NVSHMEM is running; `p` is a live symmetric address and `pe` in range
        // (checked by the caller); the call only translates the address.
        unsafe { self.nv.ptr(p.cast(), pe) }.map(|q| q as u64)
    }

    fn load(&self, mut image: Vec<u8>, origin: &Path) -> Result<Option<sys::CUmodule>> {
        image.push(0);
        self.ctx.bind_to_thread()?;
        // SAFETY: `image` is a NUL-terminated PTX text or a cubin, alive for the call.
        let m = unsafe { result::module::load_data(image.as_ptr().cast()) }.map_err(|e| {
            Error::Module(format!(
                "the CUDA driver rejected {}: {e}",
                origin.display()
            ))
        })?;
        // SAFETY: a freshly loaded module of this context; NVSHMEM is running.
        if let Err(e) = unsafe { self.nv.cumodule_init(m.cast()) } {
            // SAFETY: loaded above and not used elsewhere.
            let _ = unsafe { result::module::unload(m) };
            return Err(e);
        }
        Ok(Some(m))
    }

    unsafe fn unload(&self, m: sys::CUmodule) {
        let _ = self.stream.synchronize();
        // SAFETY: registered by `load`; no launch of it is in flight (synchronised); the
        // caller unloads it once.
        unsafe {
            let _ = self.nv.cumodule_finalize(m.cast());
            let _ = result::module::unload(m);
        }
    }

    fn function(&self, m: sys::CUmodule, name: &str, origin: &Path) -> Result<Function> {
        let c = CString::new(name).map_err(|_| Error::Invalid("kernel name has a NUL".into()))?;
        // SAFETY: the module is loaded; `c` is NUL-terminated.
        unsafe { result::module::get_function(m, c) }.map_err(|e| {
            Error::Module(format!(
                "kernel `{name}` is not in {}: {e}",
                origin.display()
            ))
        })
    }

    fn coresident_blocks(&self, f: Function, cfg: &LaunchConfig) -> Result<u32> {
        // SAFETY: `f` is a function of a loaded module of this context.
        let per_sm = unsafe {
            result::occupancy::max_active_block_per_multiprocessor(
                f,
                cfg.threads() as i32,
                cfg.shared_mem_bytes as usize,
            )
        }?;
        let sms = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok((per_sm.max(0) * sms) as u32)
    }

    unsafe fn launch(
        &self,
        f: Function,
        _name: &'static str,
        cfg: &LaunchConfig<'_>,
        cooperative: bool,
        args: &mut dyn LaunchArgs,
    ) -> Result<()> {
        let stream = cfg.stream.unwrap_or(&self.stream).cu_stream();
        self.ctx.bind_to_thread()?;
        let mut ptrs: Vec<*mut c_void> = args.param_ptrs();
        // SAFETY: `ptrs` point at the fields of `args` (alive until the call returns, the
        // driver copies them), whose types are `f`'s parameters (the caller's contract).
        unsafe {
            if cooperative {
                result::launch_cooperative_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_mem_bytes,
                    stream,
                    &mut ptrs,
                )?
            } else {
                result::launch_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_mem_bytes,
                    stream,
                    &mut ptrs,
                )?
            }
        };
        Ok(())
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        // SAFETY: every buffer and module borrowing the `Shmem` is gone (lifetimes); the
        // control block was allocated at start by every PE and is freed by every PE here,
        // before NVSHMEM is finalized.
        unsafe {
            self.nv.free(self.ctl.cast());
            self.nv.finalize();
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}
