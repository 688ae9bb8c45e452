//! Expansion snapshots: the exact code `#[shmem_kernel]` generates for representative
//! kernels, kept in `tests/snapshots/*.expanded.rs`. Run with `SHMEM_BLESS=1` to rewrite
//! them after an intended change, and review the diff.

use quote::quote;
use std::path::PathBuf;

fn check(name: &str, input: proc_macro2::TokenStream) {
    let out = crate::expand(proc_macro2::TokenStream::new(), input);
    let file: syn::File = syn::parse2(out).expect("expansion is a valid file");
    let text = prettyplease::unparse(&file);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.expanded.rs"));
    if std::env::var_os("SHMEM_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing snapshot {}; run with SHMEM_BLESS=1",
            path.display()
        )
    });
    assert_eq!(
        text, want,
        "expansion of `{name}` changed; review and rerun with SHMEM_BLESS=1"
    );
}

#[test]
fn ring_kernel() {
    check(
        "ring",
        quote! {
            /// Ring.
            pub unsafe fn ring(dst: Sym<i32>) {
                unsafe { p(dst, my_pe(), (my_pe() + 1) % n_pes()) };
            }
        },
    );
}

#[test]
fn many_params() {
    check(
        "many_params",
        quote! {
            pub(crate) unsafe fn halo(grid: SymSlice<f32>, scratch: DeviceSlice<f32>, sig: Sym<u64>, nx: u32, team: Team) {
                let _ = (grid, scratch, sig, nx, team);
            }
        },
    );
}

#[test]
fn errors_are_collected_and_item_reemitted() {
    check(
        "errors",
        quote! {
            pub async fn bad<T>(x: &mut [T], y: *mut f32) -> i32 { 0 }
        },
    );
}

#[test]
fn metadata_record() {
    let item: syn::ItemFn = syn::parse_quote! { pub unsafe fn k(a: SymSlice<u64>, b: crate::X) {} };
    let k = crate::parse::parse(proc_macro2::TokenStream::new(), quote!(#item)).unwrap();
    assert_eq!(
        crate::device::metadata_json(&k),
        r#"{"name":"k","params":[{"name":"a","type":"SymSlice<u64>"},{"name":"b","type":"crate::X"}]}"#
    );
}

#[test]
fn metadata_record_with_bounds_per_arch() {
    let item: syn::ItemFn = syn::parse_quote! { pub unsafe fn k(n: u32) {} };
    let attr = quote!(
        max_registers = 72,
        sm_90(max_registers = 64),
        sm_100(max_threads = 256, min_blocks = 2)
    );
    let k = crate::parse::parse(attr, quote!(#item)).unwrap();
    assert_eq!(
        crate::device::metadata_json(&k),
        r#"{"name":"k","params":[{"name":"n","type":"u32"}],"max_registers":72,"arch":[{"sm":90,"max_registers":64},{"sm":100,"max_threads":256,"min_blocks":2}]}"#
    );
}
