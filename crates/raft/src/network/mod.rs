//! Networks between the replicas of a partition: in process, with faults, for tests
//! (`mem`, compiled with the `sim` feature, which the crate's own tests, examples and benches
//! enable); TCP between processes ([`tcp`]).

#[cfg(feature = "sim")]
pub mod mem;
pub mod tcp;
