//! Builds the kernels for the GPU and embeds them in the program (`include_kernels!`).
//! `SHMEM_ARCHS=sm_80,sm_90` chooses the GPU architectures; `SHMEM_KERNELS=simulator`
//! builds nothing for the GPU (the program then runs on the CPU simulator only).

fn main() {
    shmem_build::embed_kernels("../kernels");
}
