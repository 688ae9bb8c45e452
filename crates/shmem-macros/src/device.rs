//! Device half: the PTX entry and the metadata record the build reads back.

use crate::parse::{Bounds, Kernel};
use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};

/// The exported static through which a kernel's parameter list reaches the manifest.
/// `shmem-build` reads it from the linked bitcode and then removes it from the PTX.
pub(crate) const META_PREFIX: &str = "__shmem_kernel_meta_";

pub(crate) fn generate(k: &Kernel) -> TokenStream {
    let f = &k.item;
    let attrs = &f.attrs;
    let name = &f.sig.ident;
    let unsafety = &f.sig.unsafety;
    let inputs = &f.sig.inputs;
    let body = &f.block;
    let meta_ident = format_ident!("{}{}", META_PREFIX, name);
    let meta = metadata_json(k);
    let meta_len = meta.len();
    let meta_lit = syn::LitByteStr::new(meta.as_bytes(), proc_macro2::Span::call_site());
    quote! {
        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub #unsafety extern "ptx-kernel" fn #name(#inputs) #body

        #[cfg(target_arch = "nvptx64")]
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub static #meta_ident: [u8; #meta_len] = *#meta_lit;
    }
}

/// `{"name":"ring","params":[{"name":"dst","type":"Sym<i32>"}]}`, plus `"max_threads"`,
/// `"min_blocks"` and `"max_registers"` when the attribute gives them, and `"arch"`, a list of
/// `{"sm":90,...}` with the same keys, for its `sm_NN(...)`.
pub(crate) fn metadata_json(k: &Kernel) -> String {
    let params: Vec<String> = k
        .params
        .iter()
        .map(|p| {
            format!(
                r#"{{"name":"{}","type":"{}"}}"#,
                json_escape(&p.name.to_string()),
                json_escape(&type_string(&p.ty))
            )
        })
        .collect();
    let mut bounds = bounds_json(&k.bounds.base);
    if !k.bounds.arch.is_empty() {
        let arch: Vec<String> = k
            .bounds
            .arch
            .iter()
            .map(|(sm, b)| format!(r#"{{"sm":{sm}{}}}"#, bounds_json(b)))
            .collect();
        bounds += &format!(r#","arch":[{}]"#, arch.join(","));
    }
    format!(
        r#"{{"name":"{}","params":[{}]{bounds}}}"#,
        json_escape(&k.item.sig.ident.to_string()),
        params.join(",")
    )
}

/// `,"max_threads":N,...`: the bounds `b` gives, each with its leading comma.
fn bounds_json(b: &Bounds) -> String {
    let mut out = String::new();
    for (key, v) in [
        ("max_threads", b.max_threads),
        ("min_blocks", b.min_blocks),
        ("max_registers", b.max_registers),
    ] {
        if let Some(v) = v {
            out += &format!(r#","{key}":{v}"#);
        }
    }
    out
}

/// A type as a user would write it: `SymSlice<i32>`, not `SymSlice < i32 >`.
pub(crate) fn type_string(ty: &syn::Type) -> String {
    let raw = ty.to_token_stream().to_string();
    let mut out = String::with_capacity(raw.len());
    for (i, c) in raw.char_indices() {
        if c == ' ' {
            let prev = raw[..i].chars().next_back().unwrap_or(' ');
            let next = raw[i + 1..].chars().next().unwrap_or(' ');
            let glue = |ch: char| {
                matches!(
                    ch,
                    '<' | '>' | ':' | ',' | '&' | '*' | '(' | ')' | '[' | ']' | ';'
                )
            };
            if (glue(prev) && prev != ',' && prev != ';')
                || (glue(next) && next != '&' && next != '*')
            {
                continue;
            }
        }
        out.push(c);
    }
    out.replace(",", ", ").replace(";", "; ")
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
