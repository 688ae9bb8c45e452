//! Builds the MoE kernels for the GPU and embeds them in the extension
//! (`SHMEM_KERNELS=simulator`: none, the simulator only).

fn main() {
    shmem_build::embed_kernels("../examples/moe-dispatch");
}
