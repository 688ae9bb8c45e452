//! The device-API suite (`suite/mod.rs`) on the CPU simulator: every case that can run
//! there, at 1, 2 and 4 PEs (from its fewest), as threads of this process with the same host
//! code, kernels, launch shapes and expected results as on GPUs; puts land late and in a
//! seeded order.

mod suite;

use shmem_host::{Shmem, sim};

/// Runs `case` at each PE count it allows.
fn simulate(name: &str) {
    let case = suite::CASES
        .iter()
        .find(|c| c.name == name)
        .expect("a suite case");
    assert!(case.simulated, "{name} is GPU-only");
    for n in [1, 2, 4].into_iter().filter(|n| *n >= case.min_pes) {
        sim::run(n, || {
            let rt = Shmem::init()?;
            (case.body)(&rt);
            rt.barrier_all()
        })
        .unwrap_or_else(|e| panic!("{name} on {n} simulated PEs: {e}"));
    }
}

macro_rules! sim_tests {
    ($($name:ident),* $(,)?) => { $(
        #[test]
        fn $name() {
            simulate(stringify!($name));
        }
    )* };
}

sim_tests!(
    ring,
    rma_p_g,
    rma_bulk,
    signals,
    waits,
    atomics,
    ordering,
    barriers,
    collectives,
    peer_memory,
    unequal_allocation_fails_on_every_pe,
);

#[test]
fn every_simulated_case_has_a_test() {
    let listed = [
        "ring",
        "rma_p_g",
        "rma_bulk",
        "signals",
        "waits",
        "atomics",
        "ordering",
        "barriers",
        "collectives",
        "peer_memory",
        "unequal_allocation_fails_on_every_pe",
    ];
    for c in suite::CASES.iter().filter(|c| c.simulated) {
        assert!(listed.contains(&c.name), "{} has no simulator test", c.name);
    }
}
