//! Networks between the replicas of a partition: in process, with faults, for tests
//! (`mem`, compiled with the `sim` feature, which the crate's own tests, examples and benches
//! enable); TCP between processes ([`tcp`], one connection per replica; [`mux`], one connection per
//! peer node shared by every group of a [`crate::Host`]).

/// The `RaftNetwork` of a connection whose `call(RaftRpc)` sends one RPC and returns its reply
/// ([`tcp`]'s and [`mux`]'s): each RPC's reply of the right kind is its answer, another kind is
/// the connection's `mismatch`, a failed call its `unreachable`. `|c| backoff` gives the
/// connection's wait between retries.
macro_rules! raft_network_over_call {
    ($conn:ty, |$c:ident| $backoff:expr) => {
        impl openraft::network::RaftNetwork<$crate::TypeConfig> for $conn {
            async fn append_entries(
                &mut self,
                rpc: openraft::raft::AppendEntriesRequest<$crate::TypeConfig>,
                _option: openraft::network::RPCOption,
            ) -> Result<
                openraft::raft::AppendEntriesResponse<$crate::NodeId>,
                openraft::error::RPCError<
                    $crate::NodeId,
                    $crate::Node,
                    openraft::error::RaftError<$crate::NodeId>,
                >,
            > {
                use $crate::network::tcp::{remote, RaftRpc, RaftRpcReply};
                match self.call(RaftRpc::AppendEntries(rpc)).await {
                    Ok(RaftRpcReply::AppendEntries(answer)) => {
                        answer.map_err(|e| remote(self.target, e))
                    }
                    Ok(_) => Err(self.mismatch("append_entries")),
                    Err(e) => Err(self.unreachable("append_entries", e)),
                }
            }

            async fn install_snapshot(
                &mut self,
                rpc: openraft::raft::InstallSnapshotRequest<$crate::TypeConfig>,
                _option: openraft::network::RPCOption,
            ) -> Result<
                openraft::raft::InstallSnapshotResponse<$crate::NodeId>,
                openraft::error::RPCError<
                    $crate::NodeId,
                    $crate::Node,
                    openraft::error::RaftError<
                        $crate::NodeId,
                        openraft::error::InstallSnapshotError,
                    >,
                >,
            > {
                use $crate::network::tcp::{remote, RaftRpc, RaftRpcReply};
                match self.call(RaftRpc::InstallSnapshot(rpc)).await {
                    Ok(RaftRpcReply::InstallSnapshot(answer)) => {
                        answer.map_err(|e| remote(self.target, e))
                    }
                    Ok(_) => Err(self.mismatch("install_snapshot")),
                    Err(e) => Err(self.unreachable("install_snapshot", e)),
                }
            }

            async fn vote(
                &mut self,
                rpc: openraft::raft::VoteRequest<$crate::NodeId>,
                _option: openraft::network::RPCOption,
            ) -> Result<
                openraft::raft::VoteResponse<$crate::NodeId>,
                openraft::error::RPCError<
                    $crate::NodeId,
                    $crate::Node,
                    openraft::error::RaftError<$crate::NodeId>,
                >,
            > {
                use $crate::network::tcp::{remote, RaftRpc, RaftRpcReply};
                match self.call(RaftRpc::Vote(rpc)).await {
                    Ok(RaftRpcReply::Vote(answer)) => answer.map_err(|e| remote(self.target, e)),
                    Ok(_) => Err(self.mismatch("vote")),
                    Err(e) => Err(self.unreachable("vote", e)),
                }
            }

            fn backoff(&self) -> openraft::network::Backoff {
                let $c = self;
                openraft::network::Backoff::new(std::iter::repeat($backoff))
            }
        }
    };
}

#[cfg(feature = "sim")]
pub mod mem;
pub mod mux;
pub mod tcp;
