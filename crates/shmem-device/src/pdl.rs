//! Programmatic dependent launch: a kernel that starts while the kernel before it on its
//! stream is still running. CUDA: `cudaGridDependencySynchronize` and
//! `cudaTriggerProgrammaticLaunchCompletion`; PTX: `griddepcontrol` (sm_90 and up).
//!
//! A launch made with `LaunchConfig::with_dependent_launch(true)` (shmem-host) may begin
//! before the previous kernel on its stream has finished: once every block of that kernel
//! has called [`launch_dependents`] or ended, the new kernel's blocks are scheduled as SMs
//! have room. Everything the new kernel does before [`wait`] therefore overlaps the previous
//! kernel: its launch, its prologue, loads of data the previous kernel does not write (a
//! bulk copy of its inputs into shared memory, say). After [`wait`], the previous kernel
//! has completed and its writes are visible to the calling thread.
//!
//! ```ignore
//! // The previous kernel: let the next one start once this block is under way.
//! pdl::launch_dependents();
//! // The dependent kernel: independent work first, then everything that reads the
//! // previous kernel's results.
//! let row = load_inputs();
//! pdl::wait();
//! let slot = read_what_the_previous_kernel_wrote();
//! ```
//!
//! Both are no-ops in a kernel launched the ordinary way (it starts after the previous kernel
//! has completed), in builds for architectures before sm_90 (whose kernels the host always
//! launches the ordinary way), and on the simulator (which runs a stream's launches one after
//! another).
//!
//! A kernel launched as a dependent must call [`wait`], in every thread that reads memory the
//! previous kernel writes (or writes memory that kernel reads), before it does so: nothing
//! else orders the two kernels.

/// Waits until the kernels this launch depends on (the previous kernel on its stream, when
/// launched as a dependent) have completed, and their memory operations are visible to this
/// thread. PTX `griddepcontrol.wait`; a no-op where the launch has no such dependency, before
/// sm_90, and on the simulator.
#[inline(always)]
pub fn wait() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    // SAFETY: `griddepcontrol.wait` has no operands and no precondition; the clobber (asm
    // without `nomem`) keeps the compiler from moving memory accesses across it.
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack, preserves_flags));
    }
}

/// Lets the kernel launched after this one as a dependent be scheduled once every block of
/// this grid has called it (or ended). Calling it changes nothing that this kernel's threads
/// see; it orders nothing: the dependent still [`wait`]s for this grid to complete. PTX
/// `griddepcontrol.launch_dependents`; a no-op where no dependent follows, before sm_90, and
/// on the simulator.
#[inline(always)]
pub fn launch_dependents() {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    // SAFETY: `griddepcontrol.launch_dependents` has no operands and no precondition; it
    // affects only when a dependent grid is scheduled.
    unsafe {
        core::arch::asm!(
            "griddepcontrol.launch_dependents;",
            options(nostack, preserves_flags)
        );
    }
}
