//! `#[shmem_kernel]` from a user's point of view: every rejected form fails to compile with
//! the message in `ui/<case>.stderr`, and accepted forms compile and describe themselves.
//! Rewrite the `.stderr` files after an intended change with `TRYBUILD=overwrite`.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

#[test]
fn compile_pass() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui-pass/*.rs");
}
