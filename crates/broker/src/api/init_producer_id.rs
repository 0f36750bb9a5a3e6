//! InitProducerId: a new idempotent producer gets an id never handed out before; a producer
//! that already holds one gets its epoch bumped (KIP-360). With a transactional id the
//! transaction coordinator answers ([`super::txn`]).

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{respond, HandleError, Reply};
use crate::broker::Broker;
use crate::codec::Request;
use crate::producer_ids::{ProducerIdAndEpoch, ProducerIdError};

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<Reply, HandleError> {
    let body: InitProducerIdRequest = request.body()?;
    if let Some(id) = body.transactional_id.as_ref().filter(|id| !id.0.is_empty()) {
        let (id, timeout) = (id.0.to_string(), body.transaction_timeout_ms);
        return super::txn::init_producer_id(broker, request, id, timeout).await;
    }
    let response = {
        let held =
            (body.producer_id.0 >= 0 && body.producer_epoch >= 0).then_some(ProducerIdAndEpoch {
                producer_id: body.producer_id.0,
                epoch: body.producer_epoch,
            });
        let (ids, store) = (Arc::clone(&broker.producer_ids), Arc::clone(&broker.store));
        // It may write the reservation file (with an fsync): off the reactor.
        let granted = tokio::task::spawn_blocking(move || {
            ids.init(held, |producer_id| store.producer_epoch(producer_id))
        })
        .await;
        match granted {
            Ok(Ok(granted)) => {
                tracing::info!(
                    producer_id = granted.producer_id,
                    epoch = granted.epoch,
                    held = ?held,
                    "producer id granted"
                );
                InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(granted.producer_id))
                    .with_producer_epoch(granted.epoch)
            }
            Ok(Err(e)) => {
                let error = match e {
                    ProducerIdError::StaleEpoch { .. } => ResponseError::InvalidProducerEpoch,
                    ProducerIdError::Io { .. }
                    | ProducerIdError::Malformed { .. }
                    | ProducerIdError::Exhausted => {
                        tracing::error!(error = %e, "cannot grant a producer id");
                        ResponseError::KafkaStorageError
                    }
                };
                InitProducerIdResponse::default()
                    .with_error_code(error.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
            }
            Err(e) => {
                tracing::error!(error = %e, "producer id task failed");
                InitProducerIdResponse::default()
                    .with_error_code(ResponseError::UnknownServerError.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
            }
        }
    };
    Ok(Reply::Now(respond(request, &response)?))
}
