::core::compile_error! {
    "a kernel cannot be `async`: GPU kernels run to completion; remove `async`"
}
::core::compile_error! {
    "a kernel cannot be generic: a PTX entry has one concrete signature. Write a generic inner function and one #[shmem_kernel] per type that calls it"
}
::core::compile_error! {
    "a kernel cannot return a value: write results into a SymSlice or DeviceSlice parameter"
}
::core::compile_error! {
    "a kernel parameter cannot be a reference: host references do not point into GPU memory. Use SymSlice<T> / Sym<T> for symmetric memory or DeviceSlice<T> / DevicePtr<T>"
}
::core::compile_error! {
    "a kernel parameter cannot be a raw pointer: say what it points to with Sym<T> (symmetric heap) or DevicePtr<T> (device memory)"
}
pub async fn bad<T>(x: &mut [T], y: *mut f32) -> i32 {
    0
}
