//! Parse and validate a `#[shmem_kernel]` item, collecting every error.

use proc_macro2::TokenStream;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type};

/// A validated kernel.
pub(crate) struct Kernel {
    pub item: ItemFn,
    pub params: Vec<Param>,
    pub bounds: LaunchBounds,
}

/// `#[shmem_kernel(max_threads = N, min_blocks = M)]`: CUDA's `__launch_bounds__(N, M)`; or
/// `#[shmem_kernel(max_registers = R)]`: CUDA's `__maxnreg__(R)`.
#[derive(Default)]
pub(crate) struct Bounds {
    /// The most threads per block any launch uses (PTX `.maxntid`).
    pub max_threads: Option<u32>,
    /// Blocks that should fit on one SM at once (PTX `.minnctapersm`).
    pub min_blocks: Option<u32>,
    /// The most registers a thread may use (PTX `.maxnreg`).
    pub max_registers: Option<u32>,
}

/// A kernel's [`Bounds`], and those that replace them from an architecture up:
/// `#[shmem_kernel(max_registers = 72, sm_90(max_registers = 64))]` (CUDA's `#if
/// __CUDA_ARCH__ >= 900` around the attribute).
#[derive(Default)]
pub(crate) struct LaunchBounds {
    /// For every architecture without an entry in `arch`.
    pub base: Bounds,
    /// `(NN, bounds)` for `sm_NN(...)`, in the order given; each for `sm_NN` and newer, up
    /// to the next one given.
    pub arch: Vec<(u32, Bounds)>,
}

/// The bounds arguments the attribute takes, for its error messages.
const ARGUMENTS: &str = "the arguments are `max_threads` and `min_blocks` (CUDA's \
     __launch_bounds__), or `max_registers` (CUDA's __maxnreg__), and `sm_NN(...)` with \
     those for sm_NN and newer";

/// Parses the attribute's arguments.
fn parse_bounds(attr: TokenStream, errors: &mut Errors) -> LaunchBounds {
    let mut b = LaunchBounds::default();
    if attr.is_empty() {
        return b;
    }
    let parser = syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated;
    let args = match syn::parse::Parser::parse2(parser, attr.clone()) {
        Ok(a) => a,
        Err(_) => {
            errors.push(
                &attr,
                "expected `max_threads = N` and optionally `min_blocks = M`, as in \
                 #[shmem_kernel(max_threads = 256, min_blocks = 2)], or `max_registers = R`",
            );
            return b;
        }
    };
    let mut base = Vec::new();
    for arg in &args {
        match arg {
            syn::Meta::NameValue(nv) => base.push(nv.clone()),
            syn::Meta::List(list) => {
                let key = ident_of(&list.path);
                let sm = key
                    .strip_prefix("sm_")
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|n| *n >= 10);
                let Some(sm) = sm else {
                    errors.push(
                        &list.path,
                        format!("unknown #[shmem_kernel] argument `{key}(...)`: {ARGUMENTS}"),
                    );
                    continue;
                };
                if b.arch.iter().any(|(n, _)| *n == sm) {
                    errors.push(&list.path, format!("`{key}(...)` is given twice"));
                    continue;
                }
                let inner = syn::punctuated::Punctuated::<syn::MetaNameValue, syn::Token![,]>::parse_terminated;
                match list.parse_args_with(inner) {
                    Ok(pairs) if !pairs.is_empty() => {
                        let pairs: Vec<_> = pairs.into_iter().collect();
                        b.arch.push((sm, bounds_of(&pairs, &list.tokens, errors)));
                    }
                    _ => errors.push(
                        list,
                        format!(
                            "expected `{key}(max_registers = R)` or `{key}(max_threads = N, \
                             min_blocks = M)`: the bounds for {key} and newer"
                        ),
                    ),
                }
            }
            syn::Meta::Path(path) => errors.push(
                path,
                format!(
                    "#[shmem_kernel] argument `{}` needs a value: {ARGUMENTS}",
                    ident_of(path)
                ),
            ),
        }
    }
    b.base = bounds_of(&base, &attr, errors);
    b
}

/// The name of an argument's path (`""` when it is not one identifier).
fn ident_of(path: &syn::Path) -> String {
    path.get_ident().map(|i| i.to_string()).unwrap_or_default()
}

/// One set of bounds from its `key = value` pairs; `all` (the pairs' tokens) carries the
/// errors about how they combine.
fn bounds_of(args: &[syn::MetaNameValue], all: &TokenStream, errors: &mut Errors) -> Bounds {
    let mut b = Bounds::default();
    for arg in args {
        let value = match &arg.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => i.base10_parse::<u32>().ok().filter(|v| *v > 0),
            _ => None,
        };
        let key = ident_of(&arg.path);
        match (key.as_str(), value) {
            ("max_threads", Some(v)) if v <= 1024 => b.max_threads = Some(v),
            ("min_blocks", Some(v)) => b.min_blocks = Some(v),
            ("max_registers", Some(v)) if (16..=255).contains(&v) => b.max_registers = Some(v),
            ("max_threads", _) => errors.push(
                &arg.value,
                "max_threads must be an integer from 1 to 1024 (threads per block)",
            ),
            ("min_blocks", _) => errors.push(&arg.value, "min_blocks must be a positive integer"),
            ("max_registers", _) => errors.push(
                &arg.value,
                "max_registers must be an integer from 16 to 255 (registers per thread)",
            ),
            _ => errors.push(
                &arg.path,
                format!("unknown #[shmem_kernel] argument `{key}`: {ARGUMENTS}"),
            ),
        }
    }
    if b.max_registers.is_some() && (b.max_threads.is_some() || b.min_blocks.is_some()) {
        errors.push(
            all,
            "max_registers (CUDA's __maxnreg__) cannot be combined with max_threads and \
             min_blocks (__launch_bounds__): give one or the other",
        );
    }
    if b.min_blocks.is_some() && b.max_threads.is_none() {
        errors.push(
            all,
            "min_blocks needs max_threads, as in __launch_bounds__(N, M)",
        );
    }
    b
}

/// One validated parameter.
pub(crate) struct Param {
    pub name: Ident,
    pub ty: Type,
}

/// Collects errors so that the user sees all of them at once.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, tokens: impl quote::ToTokens, msg: impl std::fmt::Display) {
        let e = syn::Error::new_spanned(tokens, msg);
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    fn finish<T>(self, value: T) -> syn::Result<T> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(value),
        }
    }
}

pub(crate) fn parse(attr: TokenStream, item: TokenStream) -> syn::Result<Kernel> {
    let mut errors = Errors::default();
    let bounds = parse_bounds(attr, &mut errors);
    let item: ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            return Err(syn::Error::new(
                e.span(),
                "#[shmem_kernel] applies to a function: `pub unsafe fn name(params) { ... }`",
            ));
        }
    };
    let sig = &item.sig;
    if let Some(a) = &sig.asyncness {
        errors.push(
            a,
            "a kernel cannot be `async`: GPU kernels run to completion; remove `async`",
        );
    }
    if let Some(c) = &sig.constness {
        errors.push(c, "a kernel cannot be `const`; remove `const`");
    }
    if let Some(abi) = &sig.abi {
        errors.push(
            abi,
            "#[shmem_kernel] chooses the ABI (`extern \"ptx-kernel\"`); remove this `extern`",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(
            &sig.generics,
            "a kernel cannot be generic: a PTX entry has one concrete signature. Write a generic \
             inner function and one #[shmem_kernel] per type that calls it",
        );
    }
    if let Some(v) = &sig.variadic {
        errors.push(v, "a kernel cannot be variadic");
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        let unit = matches!(&**ty, Type::Tuple(t) if t.elems.is_empty());
        if !unit {
            errors.push(
                &sig.output,
                "a kernel cannot return a value: write results into a SymSlice or DeviceSlice parameter",
            );
        }
    }
    let mut params = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(r) => {
                errors.push(r, "a kernel cannot take `self`: make it a free function")
            }
            FnArg::Typed(pt) => {
                let name = match &*pt.pat {
                    Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                        Some(pi.ident.clone())
                    }
                    other => {
                        errors.push(
                            other,
                            "kernel parameters must be plain names (`name: Type`), not patterns",
                        );
                        None
                    }
                };
                if let Some(msg) = reject_type(&pt.ty) {
                    errors.push(&pt.ty, msg);
                } else if let Some(name) = name {
                    params.push(Param {
                        name,
                        ty: (*pt.ty).clone(),
                    });
                }
            }
        }
    }
    errors.finish(Kernel {
        item,
        params,
        bounds,
    })
}

/// Type forms that can never be kernel parameters, with what to write instead. Everything
/// else is checked by the `KernelParam` bound, where the compiler knows the type.
fn reject_type(ty: &Type) -> Option<&'static str> {
    Some(match ty {
        Type::Reference(_) => {
            "a kernel parameter cannot be a reference: host references do not point into GPU \
             memory. Use SymSlice<T> / Sym<T> for symmetric memory or DeviceSlice<T> / DevicePtr<T>"
        }
        Type::Ptr(_) => {
            "a kernel parameter cannot be a raw pointer: say what it points to with Sym<T> \
             (symmetric heap) or DevicePtr<T> (device memory)"
        }
        Type::ImplTrait(_) => {
            "a kernel parameter cannot be `impl Trait`: a PTX entry needs concrete types"
        }
        Type::TraitObject(_) => {
            "a kernel parameter cannot be a trait object: a PTX entry needs concrete types"
        }
        Type::Slice(_) | Type::Array(_) => {
            "a kernel parameter cannot be a slice or array: pass SymSlice<T> or DeviceSlice<T>"
        }
        Type::Tuple(_) => {
            "a kernel parameter cannot be a tuple (its layout is unspecified): use a #[repr(C)] struct"
        }
        Type::Infer(_) | Type::Never(_) | Type::BareFn(_) => {
            "this type cannot be a kernel parameter"
        }
        Type::Paren(p) => return reject_type(&p.elem),
        Type::Group(g) => return reject_type(&g.elem),
        _ => return None,
    })
}
