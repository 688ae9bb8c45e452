//! Reading facts from a linked module's textual IR (`llvm-dis` output): the kernels'
//! metadata records, the NVSHMEM version that was linked, and the call graph from which
//! collective kernels are derived.

use std::collections::{BTreeSet, HashMap, VecDeque};

/// Name prefix of the per-kernel metadata statics that `#[shmem_kernel]` emits.
pub const META_PREFIX: &str = "__shmem_kernel_meta_";

/// `(kernel name, JSON record)` for each `#[shmem_kernel]` in the module.
pub fn meta_records(ir: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in ir.lines() {
        let Some(rest) = line
            .strip_prefix('@')
            .and_then(|l| l.strip_prefix(META_PREFIX))
        else {
            continue;
        };
        let name: String = rest.chars().take_while(|c| is_ident_char(*c)).collect();
        if let Some(start) = line.find("c\"") {
            let body = &line[start + 2..];
            if let Some(end) = body.rfind('"') {
                out.push((name, decode_c_string(&body[..end])));
            }
        }
    }
    out
}

/// Decodes LLVM's `c"..."` escapes (`\22`, `\5C`, ...).
fn decode_c_string(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(hex) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(hex);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The NVSHMEM device library version linked in (`nvshmemi_device_lib_version_d`).
pub fn nvshmem_version(ir: &str) -> Option<(u32, u32, u32)> {
    let line = ir
        .lines()
        .find(|l| l.starts_with("@nvshmemi_device_lib_version_d "))?;
    let inner = &line[line.find('{')? + 1..line.find('}')?];
    let nums: Vec<u32> = inner
        .split(',')
        .filter_map(|p| p.trim().strip_prefix("i32 ")?.trim().parse().ok())
        .collect();
    match nums[..] {
        [a, b, c] => Some((a, b, c)),
        _ => None,
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-')
}

/// Function name → names it references (callees, and functions whose address it takes).
pub fn call_graph(ir: &str) -> HashMap<String, BTreeSet<String>> {
    let mut graph: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in ir.lines() {
        if line.starts_with("define ") {
            current = line.find(" @").map(|i| global_name(&line[i + 2..]));
            if let Some(c) = &current {
                graph.entry(c.clone()).or_default();
            }
            continue;
        }
        if line.starts_with('}') {
            current = None;
            continue;
        }
        let Some(cur) = &current else { continue };
        let mut rest = line;
        while let Some(i) = rest.find('@') {
            let name = global_name(&rest[i + 1..]);
            if !name.is_empty() && !name.starts_with("llvm.") {
                graph.get_mut(cur).map(|s| s.insert(name));
            }
            rest = &rest[i + 1..];
        }
    }
    graph
}

fn global_name(s: &str) -> String {
    if let Some(q) = s.strip_prefix('"') {
        return q.split('"').next().unwrap_or_default().to_string();
    }
    s.chars().take_while(|c| is_ident_char(*c)).collect()
}

/// Whether an NVSHMEM API function makes the calling kernel *collective*: it waits for
/// other PEs (barrier, sync, wait, or a collective operation), so every block of every PE
/// must be resident at once or the kernel can deadlock.
pub fn is_collective_api(name: &str) -> bool {
    let api = name.starts_with("nvshmem_") || name.starts_with("nvshmemx_");
    api && [
        "barrier",
        "sync_all",
        "team_sync",
        "wait_until",
        "broadcast",
        "alltoall",
        "fcollect",
        "collect",
        "_reduce",
    ]
    .iter()
    .any(|k| name.contains(k))
}

/// The collective NVSHMEM API functions reachable from `entry`, sorted; empty means the
/// kernel is not collective.
pub fn collective_reasons(graph: &HashMap<String, BTreeSet<String>>, entry: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    let mut queue = VecDeque::from([entry.to_string()]);
    while let Some(f) = queue.pop_front() {
        if !seen.insert(f.clone()) {
            continue;
        }
        if is_collective_api(&f) {
            reasons.insert(f.clone());
        }
        if let Some(callees) = graph.get(&f) {
            queue.extend(callees.iter().filter(|c| !seen.contains(*c)).cloned());
        }
    }
    reasons.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IR: &str = r#"@__shmem_kernel_meta_k = constant [31 x i8] c"{\22name\22:\22k\22,\22params\22:[]}", align 1
@nvshmemi_device_lib_version_d = dso_local addrspace(4) externally_initialized global %struct.nvshmemi_version_t { i32 3, i32 4, i32 5 }, align 4
define ptx_kernel void @k(ptr %a) {
  call void @helper()
  ret void
}
define internal void @helper() {
  tail call void @nvshmem_barrier_all()
  ret void
}
define ptx_kernel void @r(ptr %a) {
  call void @nvshmem_int32_p(ptr %a, i32 1, i32 0)
  ret void
}
declare void @nvshmem_barrier_all()
declare void @nvshmem_int32_p(ptr, i32, i32)
"#;

    #[test]
    fn reads_metadata_and_version() {
        assert_eq!(
            meta_records(IR),
            vec![("k".to_string(), r#"{"name":"k","params":[]}"#.to_string())]
        );
        assert_eq!(nvshmem_version(IR), Some((3, 4, 5)));
    }

    #[test]
    fn collective_through_a_helper_but_not_a_put() {
        let g = call_graph(IR);
        assert_eq!(
            collective_reasons(&g, "k"),
            vec!["nvshmem_barrier_all".to_string()]
        );
        assert!(collective_reasons(&g, "r").is_empty());
    }

    #[test]
    fn api_classification() {
        for c in [
            "nvshmemx_barrier_all_block",
            "nvshmem_uint64_wait_until_any",
            "nvshmem_signal_wait_until",
            "nvshmemx_float_sum_reduce_block",
            "nvshmemx_alltoallmem_warp",
            "nvshmem_team_sync",
        ] {
            assert!(is_collective_api(c), "{c}");
        }
        for c in [
            "nvshmem_quiet",
            "nvshmem_putmem_signal_nbi",
            "nvshmem_uint64_test_any",
            "nvshmemi_barrier_internal",
            "nvshmem_int_atomic_fetch_add",
        ] {
            assert!(!is_collective_api(c), "{c}");
        }
    }
}
