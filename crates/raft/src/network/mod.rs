//! Networks between the replicas of a partition: in process, with faults, for tests
//! (`mem`, compiled with the `sim` feature, which the crate's own tests, examples and benches
//! enable); TCP between processes ([`tcp`], one connection per replica; [`mux`], one connection per
//! peer node shared by every group of a [`crate::Host`]).

#[cfg(feature = "sim")]
pub mod mem;
pub mod mux;
pub mod tcp;
