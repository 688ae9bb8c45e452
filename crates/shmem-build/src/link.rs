//! Steps 2–4: link NVSHMEM's device bitcode into the kernel module, internalize and
//! optimise, emit PTX; then read the facts the manifest records and verify the result.

use crate::Arch;
use crate::error::{Error, IoContext, Result};
use crate::meta::MetaRecord;
use crate::toolchain::{Toolchain, run_stdout};
use crate::{KernelManifest, ParamManifest, Resources};
use crate::{ir, ptx};
use std::path::Path;
use std::process::Command;

/// The globals the host writes, so they must stay visible in the PTX: NVSHMEM's device
/// state, which `nvshmemx_cumodule_init` fills (the IBGDA/GPUNetIO ones exist from NVSHMEM
/// 3.8 on), and shmem-rs's wait configuration (`shmem_device::bound::CONFIG_SYMBOL`,
/// written by `shmem-host` at load).
pub const STATE_GLOBALS: [&str; 5] = [
    "nvshmemi_device_state_d",
    "nvshmemi_ibgda_device_state_d",
    "nvshmemi_gpunetio_device_state_d",
    "nvshmemi_device_lib_version_d",
    "shmem_rs_wait_config",
];

/// Globals every module must export, whatever the NVSHMEM version.
pub const REQUIRED_GLOBALS: [&str; 2] =
    ["nvshmemi_device_state_d", "nvshmemi_device_lib_version_d"];

/// Functions the CUDA driver resolves when it loads PTX; nothing else may stay external.
pub const DRIVER_SYMBOLS: [&str; 4] = ["vprintf", "__assertfail", "malloc", "free"];

/// What linking produced.
pub struct Linked {
    /// The kernels, with collective flags and parameters.
    pub kernels: Vec<KernelManifest>,
    /// `major.minor.patch` of the linked device library.
    pub nvshmem_version: String,
    /// The PTX text.
    pub ptx: String,
}

fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::Tool {
        command: shown.clone(),
        output: e.to_string(),
    })?;
    // NVSHMEM 3.4's bitcode carries an older data layout string than rustc's; LLVM warns on
    // every link although the layouts agree on everything nvptx64 uses. Drop only that line.
    let stderr: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("Linking two modules of different data layouts"))
        .map(|l| format!("{l}\n"))
        .collect();
    if !out.status.success() {
        return Err(Error::Tool {
            command: shown,
            output: stderr,
        });
    }
    if !stderr.trim().is_empty() {
        eprint!("{stderr}");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Links `kernel_bc` with `nvshmem_bc` and produces PTX for `arch`, using `work` for
/// intermediate files.
pub fn link(
    tc: &Toolchain,
    kernel_bc: &Path,
    nvshmem_bc: &Path,
    arch: Arch,
    work: &Path,
) -> Result<Linked> {
    std::fs::create_dir_all(work).ctx(|| format!("creating {}", work.display()))?;
    let linked = work.join("linked.bc");
    let optimized = work.join("optimized.bc");
    let ptx_path = work.join("out.ptx");

    run(Command::new(tc.llvm("llvm-link"))
        .arg(kernel_bc)
        .arg(nvshmem_bc)
        .arg("--only-needed")
        .arg("-o")
        .arg(&linked))?;
    let ir_text = run_stdout(
        Command::new(tc.llvm("llvm-dis"))
            .arg(&linked)
            .arg("-o")
            .arg("-"),
    )?;

    let version = ir::nvshmem_version(&ir_text)
        .map(|(a, b, c)| format!("{a}.{b}.{c}"))
        .ok_or_else(|| Error::Verify {
            ptx: ptx_path.clone(),
            problems: vec![format!(
                "the linked module has no nvshmemi_device_lib_version_d: {} is not an NVSHMEM device library, \
                 or no kernel in the crate calls NVSHMEM",
                nvshmem_bc.display()
            )],
        })?;
    let graph = ir::call_graph(&ir_text);
    let mut metas: Vec<MetaRecord> = Vec::new();
    for (name, json) in ir::meta_records(&ir_text) {
        let rec: MetaRecord = serde_json::from_str(&json).map_err(|e| {
            Error::Crate(format!(
                "kernel `{name}`: unreadable #[shmem_kernel] record ({e}): {json}"
            ))
        })?;
        metas.push(rec);
    }
    if metas.is_empty() {
        return Err(Error::Crate(format!(
            "{} defines no #[shmem_kernel] functions",
            kernel_bc.display()
        )));
    }
    let entries: Vec<String> = metas.iter().map(|m| m.name.clone()).collect();

    let keep: Vec<&str> = entries
        .iter()
        .map(String::as_str)
        .chain(STATE_GLOBALS)
        .collect();
    run(Command::new(tc.llvm("opt"))
        .arg(&linked)
        .arg(format!("--internalize-public-api-list={}", keep.join(",")))
        .arg("-passes=internalize,default<O3>,globaldce")
        .arg("-o")
        .arg(&optimized))?;
    let (maj, min) = arch.ptx_isa();
    run(Command::new(tc.llvm("llc"))
        .arg(&optimized)
        .arg(format!("-mcpu={}", arch.name()))
        .arg(format!("-mattr=+ptx{maj}{min}"))
        .arg("-O3")
        .arg("-o")
        .arg(&ptx_path))?;
    let mut ptx_text =
        std::fs::read_to_string(&ptx_path).ctx(|| format!("reading {}", ptx_path.display()))?;
    for m in &metas {
        let bounds = m.bounds_for(arch.number());
        if bounds != ptx::EntryBounds::default() {
            ptx_text = ptx::with_entry_bounds(&ptx_text, &m.name, bounds).ok_or_else(|| {
                Error::Crate(format!(
                    "kernel `{}`: no PTX entry to give launch bounds",
                    m.name
                ))
            })?;
        }
    }
    std::fs::write(&ptx_path, &ptx_text).ctx(|| format!("writing {}", ptx_path.display()))?;
    let info = ptx::parse(&ptx_text);

    let mut kernels = Vec::new();
    for m in metas {
        let bounds = m.bounds_for(arch.number());
        let entry = info.entries.iter().find(|e| e.name == m.name);
        let layouts = entry.map(|e| e.params.clone()).unwrap_or_default();
        let params = m
            .params
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let (size, align) = layouts.get(i).copied().unwrap_or((0, 0));
                ParamManifest {
                    name: p.name,
                    ty: p.ty,
                    size,
                    align,
                }
            })
            .collect();
        let because = ir::collective_reasons(&graph, &m.name);
        kernels.push(KernelManifest {
            name: m.name,
            collective: !because.is_empty(),
            collective_because: because,
            params,
            max_threads: bounds.max_threads,
            min_blocks: bounds.min_blocks,
            max_registers: bounds.max_registers,
            resources: None,
        });
    }
    Ok(Linked {
        kernels,
        nvshmem_version: version,
        ptx: ptx_text,
    })
}

/// Checks the PTX: every kernel is an entry with the parameter count its signature has,
/// NVSHMEM's state and version globals are visible, and nothing but driver-provided
/// functions is left unresolved.
pub fn verify(ptx_text: &str, kernels: &[KernelManifest], arch: Arch) -> Vec<String> {
    let info = ptx::parse(ptx_text);
    let mut problems = Vec::new();
    let (maj, min) = arch.ptx_isa();
    if info.version != format!("{maj}.{min}") {
        problems.push(format!(
            "PTX ISA is {:?}, expected {maj}.{min}",
            info.version
        ));
    }
    if info.target != arch.name() {
        problems.push(format!(
            "PTX target is {:?}, expected {}",
            info.target,
            arch.name()
        ));
    }
    for k in kernels {
        match info.entries.iter().find(|e| e.name == k.name) {
            None => problems.push(format!("kernel `{}` is not an entry of the PTX", k.name)),
            Some(e) if e.params.len() != k.params.len() => problems.push(format!(
                "kernel `{}` has {} PTX parameters but {} in its Rust signature",
                k.name,
                e.params.len(),
                k.params.len()
            )),
            Some(_) => {}
        }
    }
    for extra in info
        .entries
        .iter()
        .filter(|e| !kernels.iter().any(|k| k.name == e.name))
    {
        problems.push(format!(
            "PTX entry `{}` is not a #[shmem_kernel]",
            extra.name
        ));
    }
    for g in REQUIRED_GLOBALS {
        if !info.visible_globals.iter().any(|v| v == g) {
            problems.push(format!(
                "NVSHMEM global `{g}` is missing or not visible (nvshmemx_cumodule_init needs it)"
            ));
        }
    }
    for x in &info.externs {
        if !DRIVER_SYMBOLS.contains(&x.as_str()) {
            problems.push(format!(
                "unresolved external `{x}` (not provided by the CUDA driver)"
            ));
        }
    }
    if info
        .visible_globals
        .iter()
        .any(|g| g.starts_with(ir::META_PREFIX))
    {
        problems.push("kernel metadata records leaked into the PTX".into());
    }
    problems
}

/// How `ptxas` compiles a module into the cubin the host loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compilation {
    /// One `ptxas` call on the whole module: the best code for kernels whose out-of-line
    /// functions are small (ptxas inlines and allocates registers across calls).
    WholeProgram,
    /// `ptxas -c` (relocatable code, each function compiled by itself), then `nvlink`.
    Separate,
}

/// Out-of-line code (lines of `.func` bodies) above which a module is compiled
/// [`Compilation::Separate`]ly.
///
/// Measured 2026-11-23 (ptxas 13.0.88, sm_90, 2 cores): whole-program `ptxas` inlines the
/// module's functions back into its kernels and its time grows faster than their size. The
/// API-suite kernels with NVSHMEM 3.8.0 (304k lines of out-of-line transport code) took
/// 165 s whole and 25 s separately (kernels at 132–187 registers instead of 103–255 with
/// spills); the collectives kernel with NVSHMEM 3.4.5 (148k lines of out-of-line
/// collectives) 127 s against 13 s. Every other module of the workspace with NVSHMEM 3.4.5
/// has at most 7.3k lines out of line and compiles whole in 5 s or less; compiled
/// separately some of its kernels would take more registers (ABI calls: `ring` 31 → 67,
/// `p_bw` 32 → 52), so they stay whole-program.
pub const SEPARATE_ABOVE_LINES: usize = 20_000;

impl Compilation {
    /// The mode for a module: [`Compilation::Separate`] when its out-of-line code exceeds
    /// [`SEPARATE_ABOVE_LINES`].
    pub fn for_ptx(info: &ptx::PtxInfo) -> Compilation {
        if info.func_lines > SEPARATE_ABOVE_LINES {
            Compilation::Separate
        } else {
            Compilation::WholeProgram
        }
    }
}

/// Compiles `ptx_file` for `arch` into `cubin`; `Ok(mode)` if `ptxas` accepts it. The cubin
/// is what the host loads when the GPU's arch matches exactly: loading PTX instead makes
/// the driver JIT-compile it, which for modules with NVSHMEM's collectives takes minutes.
/// `ptxas` uses every core (`-split-compile 0`, which changes scheduling only: the code is
/// the same byte for byte). [`Compilation::Separate`] needs `nvlink` beside `ptxas` (both
/// come with every CUDA toolkit and the `nvidia-cuda-nvcc` wheel); without it the module is
/// compiled whole, slowly.
pub fn ptxas(
    ptxas: &Path,
    ptx_file: &Path,
    arch: Arch,
    cubin: &Path,
) -> Result<(Compilation, Vec<(String, Resources)>)> {
    let text =
        std::fs::read_to_string(ptx_file).ctx(|| format!("reading {}", ptx_file.display()))?;
    let nvlink = ptxas.with_file_name("nvlink");
    let mode = match Compilation::for_ptx(&ptx::parse(&text)) {
        Compilation::Separate if !nvlink.is_file() => {
            eprintln!(
                "note: no nvlink beside {}: compiling {} as one program (slower)",
                ptxas.display(),
                ptx_file.display()
            );
            Compilation::WholeProgram
        }
        m => m,
    };
    let object = cubin.with_extension("o");
    let separate = mode == Compilation::Separate;
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={}", arch.name()))
        .args(["-split-compile", "0", "-v"])
        .args(separate.then_some("-c"))
        .arg(ptx_file)
        .arg("-o")
        .arg(if separate { &object } else { cubin });
    let info = run_quiet(&mut cmd).map_err(|e| match e {
        Error::Tool { output, .. } => Error::Verify {
            ptx: ptx_file.to_path_buf(),
            problems: vec![format!(
                "ptxas ({}) rejected it:\n{output}",
                ptxas.display()
            )],
        },
        other => other,
    })?;
    if separate {
        run(Command::new(&nvlink)
            .arg(format!("-arch={}", arch.name()))
            .arg(&object)
            .arg("-o")
            .arg(cubin))?;
        let _ = std::fs::remove_file(&object);
    }
    Ok((mode, entry_resources(&info)))
}

/// Each entry's registers, stack and spills from `ptxas -v`'s report: after "Compiling
/// entry function 'NAME'", the "Function properties for NAME" line's next line (stack
/// frame, spill stores, spill loads) and the "Used N registers" line.
pub fn entry_resources(info: &str) -> Vec<(String, Resources)> {
    let number_before = |line: &str, unit: &str| -> Option<u32> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out = Vec::new();
    let mut entry: Option<(String, Resources)> = None;
    let mut lines = info.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            entry = Some((name, Resources::default()));
        } else if let Some((name, r)) = entry.as_mut() {
            if line
                .trim_end()
                .ends_with(&format!("Function properties for {name}"))
            {
                let next = lines.next().unwrap_or_default();
                r.stack_bytes = number_before(next, "bytes stack frame").unwrap_or(0);
                r.spill_stores = number_before(next, "bytes spill stores").unwrap_or(0);
                r.spill_loads = number_before(next, "bytes spill loads").unwrap_or(0);
            } else if let Some(n) = number_before(line, "registers")
                && line.contains("Used ")
            {
                r.registers = n;
                out.extend(entry.take());
            }
        }
    }
    out
}

/// [`run`], returning what the tool wrote to stderr (its report) instead of echoing it.
fn run_quiet(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::Tool {
        command: shown.clone(),
        output: e.to_string(),
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Error::Tool {
            command: shown,
            output: stderr,
        });
    }
    Ok(stderr)
}

#[cfg(test)]
mod resource_tests {
    use super::*;

    /// `ptxas -v` output of CUDA 13.0 (trimmed): callees' properties between entries are
    /// not the entries'.
    #[test]
    fn entry_resources_reads_each_entry_of_ptxas_v() {
        let info = "\
ptxas info    : 8 bytes gmem, 48 bytes cmem[4]
ptxas info    : Compiling entry function 'step_f32' for 'sm_90'
ptxas info    : Function properties for step_f32
    16 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 16 bytes cumulative stack size
ptxas info    : Function properties for _Z23nvshmemi_transfer_quietIL13threadgroup_t0EEvb
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'moe_combine' for 'sm_90'
ptxas info    : Function properties for moe_combine
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 568 bytes smem
";
        let r = entry_resources(info);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0, "step_f32");
        assert_eq!(
            r[0].1,
            Resources {
                registers: 40,
                stack_bytes: 16,
                spill_stores: 16,
                spill_loads: 12
            }
        );
        assert!(r[0].1.spills());
        assert_eq!(r[1].0, "moe_combine");
        assert_eq!(r[1].1.registers, 80);
        assert!(!r[1].1.spills());
    }
}
