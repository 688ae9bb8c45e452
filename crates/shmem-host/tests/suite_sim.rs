//! The device-API suite (`suite/mod.rs`) on the CPU simulator: every case that can run
//! there, at 1, 2 and 4 PEs (from its fewest), as threads of this process with the same host
//! code, kernels, launch shapes and expected results as on GPUs; puts land late and in a
//! seeded order.

mod suite;

use shmem_host::{Shmem, sim};

/// Runs `body` at 1, 2 and 4 PEs, from `min_pes`.
fn simulate(name: &str, min_pes: u32, body: fn(&Shmem)) {
    for n in [1, 2, 4].into_iter().filter(|n| *n >= min_pes) {
        sim::run(n, || {
            let rt = Shmem::init()?;
            body(&rt);
            rt.barrier_all()
        })
        .unwrap_or_else(|e| panic!("{name} on {n} simulated PEs: {e}"));
    }
}

macro_rules! sim_tests {
    ($($name:ident: $pes:literal),* $(,)?) => { $(
        #[test]
        fn $name() {
            simulate(stringify!($name), $pes, suite::$name);
        }
    )* };
}

suite::simulated_cases!(sim_tests);

/// Teams at 8 PEs too (the suite's cases run at 1, 2 and 4): strided splits of more than
/// two, 2D splits into four rows.
#[test]
fn teams_at_8_pes() {
    sim::run(8, || {
        let rt = Shmem::init()?;
        suite::teams(&rt);
        rt.barrier_all()
    })
    .unwrap_or_else(|e| panic!("teams on 8 simulated PEs: {e}"));
}
