//! Reading a PTX file: its entries and their parameters, external references, globals.

/// One `.entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Entry name.
    pub name: String,
    /// Each parameter's `(size, align)` in bytes, in order.
    pub params: Vec<(u32, u32)>,
}

/// What a PTX file declares.
#[derive(Clone, Debug, Default)]
pub struct PtxInfo {
    /// `.version`.
    pub version: String,
    /// `.target`.
    pub target: String,
    /// `.visible .entry`s.
    pub entries: Vec<Entry>,
    /// Names declared `.extern` (unresolved: the driver must provide them), but for
    /// [`PtxInfo::dynamic_shared`].
    pub externs: Vec<String>,
    /// Names declared `.extern .shared` (an unsized array): the dynamic shared memory a
    /// launch sizes, which the driver places, not a symbol it must find.
    pub dynamic_shared: Vec<String>,
    /// Names of `.visible .global` variables.
    pub visible_globals: Vec<String>,
    /// Lines in the bodies of `.func` definitions: the code kernels call out of line
    /// (NVSHMEM's transport paths, the device crate's out-of-line collectives).
    pub func_lines: usize,
}

/// Parses the parts of PTX that the build checks.
pub fn parse(ptx: &str) -> PtxInfo {
    let mut info = PtxInfo::default();
    let mut lines = ptx.lines().map(str::trim).peekable();
    // A `.func` header seen: `Some(0)` before its body, `Some(depth)` inside it (bodies
    // nest `{ }` blocks: call sequences, inline assembly).
    let mut func: Option<usize> = None;
    while let Some(line) = lines.next() {
        match func {
            Some(depth) if depth > 0 => {
                info.func_lines += 1;
                // Braces of one line: `{` and `}` alone open and close a block; an inline
                // assembly block on one line (`{ .reg .u64 g; ... }`) and vector operands
                // (`{%r1, %r2}`) open and close on the same line.
                let code = line.split("//").next().unwrap_or_default();
                let opens = code.matches('{').count();
                let closes = code.matches('}').count();
                let depth = (depth + opens).saturating_sub(closes);
                func = (depth > 0).then_some(depth);
                continue;
            }
            Some(_) if line.starts_with('{') => {
                func = Some(1);
                continue;
            }
            Some(_) if line.ends_with(';') => func = None,
            _ => {}
        }
        let is_func_header = !line.starts_with(".extern")
            && [".func ", ".visible .func ", ".weak .func "]
                .iter()
                .any(|p| line.starts_with(p));
        if is_func_header {
            func = (!line.ends_with(';')).then_some(0);
        }
        if let Some(v) = line.strip_prefix(".version ") {
            info.version = v.trim().to_string();
        } else if let Some(t) = line.strip_prefix(".target ") {
            info.target = t.trim().to_string();
        } else if line.starts_with(".extern .shared") {
            if let Some(n) = decl_name(line) {
                info.dynamic_shared.push(n);
            }
        } else if line.starts_with(".extern") {
            if let Some(n) = decl_name(line) {
                info.externs.push(n);
            }
        } else if line.starts_with(".visible .global") || line.starts_with(".visible .const") {
            if let Some(n) = decl_name(line) {
                info.visible_globals.push(n);
            }
        } else if let Some(rest) = line
            .strip_prefix(".visible .entry ")
            .or_else(|| line.strip_prefix(".entry "))
        {
            let name: String = rest
                .chars()
                .take_while(|c| *c != '(' && !c.is_whitespace())
                .collect();
            let mut params = Vec::new();
            let mut header = rest.to_string();
            while !header.contains(')') {
                match lines.next() {
                    Some(l) => {
                        header.push(' ');
                        header.push_str(l);
                    }
                    None => break,
                }
            }
            for p in header.split(".param").skip(1) {
                params.push(param_layout(p));
            }
            info.entries.push(Entry { name, params });
        }
    }
    info
}

/// The declared name in `.extern .func (.param .b32 r) vprintf(` or
/// `.visible .global .align 8 .b8 x[16];`.
fn decl_name(line: &str) -> Option<String> {
    let mut rest = line.trim();
    if let Some(i) = rest.find(".func") {
        // `.func [(return params)] name[(params)]`
        rest = rest[i + 5..].trim_start();
        if rest.starts_with('(') {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
            .collect();
        return (!name.is_empty()).then_some(name);
    }
    let head = rest
        .trim_end_matches([';', ' '])
        .split(['[', '='])
        .next()
        .unwrap_or(rest);
    head.split_whitespace()
        .last()
        .map(str::to_string)
        .filter(|s| !s.is_empty())
}

/// `(size, align)` of one `.param` declaration.
fn param_layout(decl: &str) -> (u32, u32) {
    // The last declaration runs on to the list's `)` and llc's `// @name` comment after it.
    let decl = decl.split(['/', ')']).next().unwrap_or(decl);
    let decl = decl.trim().trim_end_matches([',', ' ']);
    let toks: Vec<&str> = decl.split_whitespace().collect();
    let explicit_align = toks
        .windows(2)
        .find(|w| w[0] == ".align")
        .and_then(|w| w[1].parse::<u32>().ok());
    let is_ptr = toks.contains(&".ptr");
    let width = toks.iter().find_map(|t| {
        let t = t.strip_prefix('.')?;
        let bits: u32 = t.get(1..)?.parse().ok()?;
        matches!(t.as_bytes()[0], b'u' | b's' | b'b' | b'f').then_some(bits / 8)
    });
    let count = decl
        .rfind('[')
        .and_then(|i| decl[i + 1..].trim_end_matches(']').parse::<u32>().ok());
    let elem = width.unwrap_or(1);
    let size = elem * count.unwrap_or(1);
    // For `.ptr .align N` the alignment is the pointee's; the parameter itself is aligned to its size.
    let align = if is_ptr {
        elem
    } else {
        explicit_align.unwrap_or(elem)
    };
    (size, align)
}

/// The performance directives of an entry: `#[shmem_kernel]`'s launch bounds or register
/// budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct EntryBounds {
    /// `.maxntid N, 1, 1`: CUDA's `__launch_bounds__(N)`, which lets ptxas budget registers
    /// for that many threads.
    pub max_threads: Option<u32>,
    /// `.minnctapersm M` (with `max_threads`): blocks per SM to budget for.
    pub min_blocks: Option<u32>,
    /// `.maxnreg R`: CUDA's `__maxnreg__(R)`, registers per thread.
    pub max_registers: Option<u32>,
}

/// `ptx` with `bounds`' directives on entry `name` (unchanged if `bounds` gives none). `None`
/// if the entry is not in the text.
pub fn with_entry_bounds(ptx: &str, name: &str, bounds: EntryBounds) -> Option<String> {
    let head = format!(".entry {name}(");
    let start = ptx.find(&head)?;
    // The parameter list closes on a line of its own that starts with `)`.
    let close = start + ptx[start..].find("\n)")? + 1;
    let eol = close + ptx[close..].find('\n')?;
    let mut directives = String::new();
    if let Some(t) = bounds.max_threads {
        directives += &format!("\n.maxntid {t}, 1, 1");
    }
    if let Some(b) = bounds.min_blocks {
        directives += &format!("\n.minnctapersm {b}");
    }
    if let Some(r) = bounds.max_registers {
        directives += &format!("\n.maxnreg {r}");
    }
    Some(format!("{}{directives}{}", &ptx[..eol], &ptx[eol..]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn launch_bounds_go_between_the_parameters_and_the_body() {
        let ptx = ".visible .entry a(\n\t.param .u32 a_param_0\n)\n{\n\tret;\n}\n.visible .entry b(\n\t.param .u32 b_param_0\n)                 // @b\n{\n\tret;\n}\n";
        let b = |t, m, r| EntryBounds {
            max_threads: t,
            min_blocks: m,
            max_registers: r,
        };
        let out = with_entry_bounds(ptx, "b", b(Some(256), Some(2), None)).unwrap();
        assert!(
            out.contains(")                 // @b\n.maxntid 256, 1, 1\n.minnctapersm 2\n{"),
            "{out}"
        );
        assert!(
            out.starts_with(".visible .entry a(\n\t.param .u32 a_param_0\n)\n{"),
            "{out}"
        );
        let only = with_entry_bounds(ptx, "a", b(Some(64), None, None)).unwrap();
        assert!(
            only.contains("a_param_0\n)\n.maxntid 64, 1, 1\n{"),
            "{only}"
        );
        let regs = with_entry_bounds(ptx, "a", b(None, None, Some(80))).unwrap();
        assert!(regs.contains("a_param_0\n)\n.maxnreg 80\n{"), "{regs}");
        assert_eq!(
            with_entry_bounds(ptx, "a", b(None, None, None)).unwrap(),
            ptx
        );
        assert!(with_entry_bounds(ptx, "c", b(Some(64), None, None)).is_none());
    }

    use super::*;

    const PTX: &str = "
.version 8.5
.target sm_90
.address_size 64
.extern .func  (.param .b32 func_retval0) vprintf
(
\t.param .b64 vprintf_param_0,
\t.param .b64 vprintf_param_1
)
;
.extern .shared .align 16 .b8 gpu_launch_sized_workgroup_mem[];
.visible .global .align 8 .b8 nvshmemi_device_state_d[1024];
.visible .global .align 4 .b8 nvshmemi_device_lib_version_d[12] = {3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0};
.global .align 1 .b8 hidden[4];
.func helper
(
\t.param .b64 helper_param_0
)
;
.func helper
(
\t.param .b64 helper_param_0
)
{
\t{ // callseq 0
\t}
\tret;
}
.visible .entry k(
\t.param .u64 .ptr .align 1 k_param_0,
\t.param .align 8 .b8 k_param_1[16],
\t.param .u32 k_param_2
)
{
}
";

    #[test]
    fn the_last_parameter_before_a_comment() {
        let ptx = ".visible .entry rma_bulk(\n\t.param .align 8 .b8 rma_bulk_param_0[16],\n\t.param .align 8 .b8 rma_bulk_param_1[16]\n)                                       // @rma_bulk\n{\n\tret;\n}\n";
        let info = parse(ptx);
        assert_eq!(info.entries[0].params, vec![(16, 8), (16, 8)]);
    }

    /// A function whose body has an inline assembly block on one line (`{ ... }`, as a
    /// 16-byte global store emits) and vector operands: the entry after it is still read.
    #[test]
    fn one_line_blocks_in_a_function_body() {
        let ptx = ".func f(\n\t.param .b64 f_param_0\n)\n{\n\t{ .reg .u64 g; cvta.to.global.u64 g, %rd1; st.global.v4.u32 [g], {%r1, %r2, %r3, %r4}; }\n\tld.v2.u32 {%r5, %r6}, [%rd1]; // {\n\t{\n\tret;\n\t}\n}\n.visible .entry k(\n\t.param .u32 k_param_0\n)\n{\n\tret;\n}\n";
        let info = parse(ptx);
        assert_eq!(info.func_lines, 6);
        assert_eq!(info.entries.len(), 1, "the entry after the function");
        assert_eq!(info.entries[0].name, "k");
    }

    #[test]
    fn reads_entries_externs_globals() {
        let info = parse(PTX);
        assert_eq!(info.version, "8.5");
        assert_eq!(info.target, "sm_90");
        assert_eq!(info.externs, vec!["vprintf"]);
        assert_eq!(info.dynamic_shared, vec!["gpu_launch_sized_workgroup_mem"]);
        assert_eq!(
            info.func_lines, 4,
            "the body of `helper`, its nested block included"
        );
        assert_eq!(
            info.visible_globals,
            vec!["nvshmemi_device_state_d", "nvshmemi_device_lib_version_d"]
        );
        assert_eq!(
            decl_name(".extern .func __assertfail(.param .b64 a)"),
            Some("__assertfail".into())
        );
        assert_eq!(
            info.entries,
            vec![Entry {
                name: "k".into(),
                params: vec![(8, 8), (16, 8), (4, 4)]
            }]
        );
    }
}
