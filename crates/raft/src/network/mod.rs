//! Networks between the replicas of a partition: in process, with faults, for tests
//! ([`mem`]); TCP between processes ([`tcp`]).

pub mod mem;
pub mod tcp;
