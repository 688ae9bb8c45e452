//! A small flag parser: `--name value`, `--name=value`, `--switch`, positionals.

pub const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup       install toolchain components, NVSHMEM's wheels and ptxas into ~/.cache/shmem-rs (idempotent)
              --nvshmem-version V   (repeatable; default 3.4.5)   --no-ptxas   --toolchain T
  build-ptx   build kernel crates to target/ptx/<arch>/<crate>.{ptx,json}
              --arch A[,B]  (sm_80, sm_90, sm_100; default sm_90)   --nvshmem DIR   --toolchain T
              --require-ptxas   --out DIR   [CRATE|PATH]...  (default: every kernel crate)
              --deny-spills CRATE[,CRATE]  (fail if ptxas spills in their kernels, sm_90 and newer)
  sass        the SASS of built kernels, read here without a GPU (cuobjdump and nvdisasm from pip,
              installed on first use): CRATE (its target/ptx/<arch>/CRATE.cubin) or a .cubin
              --arch A  (default sm_90)   --kernel NAME (that kernel only)   --raw (with encodings)
  ci          the test command: setup, fmt, clippy -D warnings, rustdoc -D warnings, tests
  gpu-bundle  build what a GPU machine runs into carry/ (kernels, release programs, GPU tests)
              --nvshmem-3.8 (ring kernels against NVSHMEM 3.8.0)   --openmpi (Open MPI, mpirun stage)
              --twins (the CUDA C++ twins into carry/cuda, built here with nvcc 13.0.88 from pip)
              --project (a project of `shmem new`, built as a user builds it: carry/bin/demo)
              then, on the GPU machine: bash scripts/gpu-run.sh --help";

/// Parsed arguments.
pub struct Flags {
    pairs: Vec<(String, Option<String>)>,
    /// Positional arguments.
    pub positional: Vec<String>,
}

impl Flags {
    /// Parses `args`; `takes_value` lists the flags that consume a value.
    pub fn parse(
        args: Vec<String>,
        takes_value: &[&str],
        switches: &[&str],
    ) -> Result<Flags, String> {
        let mut pairs = Vec::new();
        let mut positional = Vec::new();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                let (name, inline) = match name.split_once('=') {
                    Some((n, v)) => (n.to_string(), Some(v.to_string())),
                    None => (name.to_string(), None),
                };
                if takes_value.contains(&name.as_str()) {
                    let v = match inline {
                        Some(v) => v,
                        None => it
                            .next()
                            .ok_or_else(|| format!("--{name} needs a value\n\n{USAGE}"))?,
                    };
                    pairs.push((name, Some(v)));
                } else if switches.contains(&name.as_str()) {
                    pairs.push((name, None));
                } else {
                    return Err(format!("unknown option --{name}\n\n{USAGE}"));
                }
            } else {
                positional.push(a);
            }
        }
        Ok(Flags { pairs, positional })
    }

    /// Every value of `name`, comma-separated values split.
    pub fn values(&self, name: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, v)| v.clone())
            .flat_map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The last value of `name`.
    pub fn value(&self, name: &str) -> Option<String> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.clone())
    }

    /// Whether switch `name` was given.
    pub fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(n, _)| n == name)
    }
}
