//! The SASS (the GPU's own instructions) of a cubin, read without a GPU: `cuobjdump -sass`
//! with NVIDIA's disassembler from pip ([`crate::setup::disassembler`], installed on first
//! use). Behind `shmem sass` and `cargo xtask sass`: where ptxas put a load against a barrier,
//! what it unrolled, what a loop costs a call.

use crate::error::{Error, IoContext, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The listing of `cubin` (every kernel, or `kernel` alone: `None` if it has no kernel of
/// that name), without each instruction's encoding unless `raw`.
pub fn disassemble(cubin: &Path, kernel: Option<&str>, raw: bool) -> Result<Option<String>> {
    std::fs::metadata(cubin).ctx(|| format!("reading {}", cubin.display()))?;
    let bin = crate::setup::disassembler()?;
    // cuobjdump runs the nvdisasm it finds on PATH.
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        ),
    )
    .map_err(|e| Error::Setup(format!("a PATH with {}: {e}", bin.display())))?;
    let mut cmd = Command::new(bin.join("cuobjdump"));
    cmd.arg("-sass").env("PATH", &path);
    if let Some(k) = kernel {
        cmd.args(["-fun", k]);
    }
    cmd.arg(cubin);
    let command = format!("{cmd:?}");
    let out = cmd
        .output()
        .ctx(|| format!("running {}", bin.join("cuobjdump").display()))?;
    if !out.status.success() {
        return Err(Error::Tool {
            command,
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // cuobjdump names a missing `-fun` in a warning and exits 0.
    if let Some(k) = kernel
        && !text.lines().any(|l| l.trim() == format!("Function : {k}"))
    {
        return Ok(None);
    }
    Ok(Some(if raw { text } else { readable(&text) }))
}

/// The cubins under `dir` (every `*.cubin`, depth first, sorted), or `dir` itself if it is a
/// file: what a `build.rs` build leaves in `target/` (`OUT_DIR/<arch>/<crate>.cubin`).
pub fn cubins(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).ctx(|| format!("reading {}", d.display()))? {
            let p = e.ctx(|| format!("reading {}", d.display()))?.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "cubin") {
                found.push(p);
            }
        }
    }
    found.sort();
    Ok(found)
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
    use super::{cubins, readable};

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

    #[test]
    fn cubins_are_found_below_a_directory() {
        let dir = std::env::temp_dir().join(format!("shmem-sass-{}", std::process::id()));
        let deep = dir.join("out/sm_90");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("k.cubin"), b"").unwrap();
        std::fs::write(deep.join("k.ptx"), b"").unwrap();
        std::fs::write(dir.join("a.cubin"), b"").unwrap();
        let found = cubins(&dir).unwrap();
        assert_eq!(found, vec![dir.join("a.cubin"), deep.join("k.cubin")]);
        assert_eq!(
            cubins(&dir.join("a.cubin")).unwrap(),
            vec![dir.join("a.cubin")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
