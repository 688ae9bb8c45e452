//! `cargo xtask sass`: the SASS (the GPU's own instructions) of built kernels, read on this
//! machine, without a GPU: `cuobjdump -sass` of the cubins `build-ptx --require-ptxas` writes,
//! with NVIDIA's disassembler from pip (`shmem_build::setup::disassembler`, installed on first
//! use). What ptxas made of a kernel (where it put a load against a barrier, what it
//! unrolled, what a loop costs a call) is read here instead of on a GPU machine.

use crate::flags::Flags;
use shmem_build::Arch;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn run(args: Vec<String>) -> Result<(), String> {
    let f = Flags::parse(args, &["arch", "kernel"], &["raw"])?;
    let arch = f
        .value("arch")
        .unwrap_or_else(|| "sm_90".into())
        .parse::<Arch>()
        .map_err(|e| e.to_string())?;
    if f.positional.is_empty() {
        return Err(format!(
            "name a kernel crate (built with `cargo xtask build-ptx --arch {arch} --require-ptxas`) or a cubin\n\n{}",
            crate::flags::USAGE
        ));
    }
    let root = crate::project_root();
    let cubins = f
        .positional
        .iter()
        .map(|a| cubin(&root, arch, a))
        .collect::<Result<Vec<_>, _>>()?;
    let bin = shmem_build::setup::disassembler().map_err(|e| e.to_string())?;
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )
    .map_err(|e| e.to_string())?;
    let kernel = f.value("kernel");
    for c in &cubins {
        let mut cmd = Command::new(bin.join("cuobjdump"));
        cmd.arg("-sass").env("PATH", &path);
        if let Some(k) = &kernel {
            cmd.args(["-fun", k]);
        }
        let out = cmd
            .arg(c)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.join("cuobjdump").display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "cuobjdump -sass {} failed: {}",
                c.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // cuobjdump names a missing `-fun` in a warning and exits 0.
        if let Some(k) = &kernel
            && !text.lines().any(|l| l.trim() == format!("Function : {k}"))
        {
            return Err(format!("{} has no kernel `{k}`", c.display()));
        }
        if f.has("raw") {
            print!("{text}");
        } else {
            print!("{}", readable(&text));
        }
    }
    Ok(())
}

/// The cubin of `arg`: a `.cubin` file, or kernel crate `arg`'s in `target/ptx/<arch>/`.
fn cubin(root: &Path, arch: Arch, arg: &str) -> Result<PathBuf, String> {
    let file = PathBuf::from(arg);
    if arg.ends_with(".cubin") {
        return if file.is_file() {
            Ok(file)
        } else {
            Err(format!("no cubin at {arg}"))
        };
    }
    let built = root.join(format!("target/ptx/{arch}/{arg}.cubin"));
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!(
            "no cubin at {}: build it with `cargo xtask build-ptx --arch {arch} --require-ptxas {arg}` \
             (the cubin is written when ptxas checks the PTX)",
            built.display()
        ))
    }
}

/// `cuobjdump`'s listing without each instruction's encoding (the `/* 0x... */` comment after
/// it, and the lines holding only the encoding's second half): address and instruction.
fn readable(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("/* 0x") && t.ends_with("*/") {
            continue;
        }
        let kept = match line.rfind("/* 0x") {
            Some(at) if line.trim_end().ends_with("*/") => line[..at].trim_end(),
            _ => line,
        };
        out.push_str(kept);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn the_encodings_are_left_out() {
        let listing = "\t\tFunction : ring\n\
            \t/*0000*/                   LDC R1, c[0x0][0x28] ;  /* 0x00000a00ff017b82 */\n\
            \t                                                   /* 0x000fe40000000800 */\n\
            \t/*0010*/                   EXIT ;                  /* 0x000000000000794d */\n";
        assert_eq!(
            readable(listing),
            "\t\tFunction : ring\n\t/*0000*/                   LDC R1, c[0x0][0x28] ;\n\t/*0010*/                   EXIT ;\n"
        );
    }
}
