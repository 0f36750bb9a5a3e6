//! Configuration of the producer-state table (docs/design.md, "Producer state").

/// The smallest allowed dedup window.
pub const MIN_WINDOW: usize = 1;
/// The largest allowed dedup window (batches retained per producer). Also the bound a snapshot
/// decoder accepts for one producer's batch count.
pub const MAX_WINDOW: usize = 65_536;
/// Kafka's `NUM_BATCHES_TO_RETAIN`, which is also the Kafka client's default
/// `max.in.flight.requests.per.connection`.
pub const DEFAULT_WINDOW: usize = 5;
/// Kafka's `producer.id.expiration.ms` default (KIP-854, Kafka 3.4): one day.
pub const DEFAULT_EXPIRATION_MS: i64 = 86_400_000;

/// What to do when a new producer arrives and the table already holds `max_producers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProducerLimitPolicy {
    /// Admit the new producer and forget the one idle the longest (oldest append wall clock)
    /// among those without an open transaction. A forgotten producer's retries are answered
    /// like an unknown producer's.
    #[default]
    EvictLongestIdle,
    /// Refuse the new producer's batch with [`super::ProducerError::TooManyProducers`].
    Reject,
}

/// Settings of the producer-state table, which decides appended / duplicate / error for each
/// idempotent producer's batch ([`crate::LogConfig::producer_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerStateConfig {
    /// Batches retained per producer for duplicate detection. Kafka: 5, fixed. Valid
    /// `MIN_WINDOW..=MAX_WINDOW`.
    pub window: usize,
    /// The most producers kept; `None` (Kafka's behaviour) means no limit beyond expiry.
    pub max_producers: Option<usize>,
    /// What happens at `max_producers`.
    pub limit_policy: ProducerLimitPolicy,
    /// A producer without an open transaction whose last append (by wall clock) is at least
    /// this old is forgotten by [`crate::Maintenance::expire_producers`]. Kafka:
    /// `producer.id.expiration.ms`, default 86 400 000 (one day).
    pub expiration_ms: i64,
}

impl Default for ProducerStateConfig {
    fn default() -> Self {
        ProducerStateConfig {
            window: DEFAULT_WINDOW,
            max_producers: None,
            limit_policy: ProducerLimitPolicy::default(),
            expiration_ms: DEFAULT_EXPIRATION_MS,
        }
    }
}

with_setters!(ProducerStateConfig {
    with_window => window: usize,
    with_max_producers => max_producers: Option<usize>,
    with_limit_policy => limit_policy: ProducerLimitPolicy,
    with_expiration_ms => expiration_ms: i64,
});

/// A [`ProducerStateConfig`] value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerStateConfigError {
    /// `window` is outside [`MIN_WINDOW`]`..=`[`MAX_WINDOW`].
    #[error("dedup window of {got} batches is out of range {min}..={max}")]
    WindowOutOfRange {
        /// The window asked for.
        got: usize,
        /// [`MIN_WINDOW`].
        min: usize,
        /// [`MAX_WINDOW`].
        max: usize,
    },
    /// `max_producers` is `Some(0)`.
    #[error("max_producers must be at least 1, got 0")]
    ZeroMaxProducers,
    /// `expiration_ms` is zero or negative.
    #[error("expiration_ms must be positive, got {got}")]
    NonPositiveExpiration {
        /// The value asked for.
        got: i64,
    },
}

impl ProducerStateConfigError {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        match self {
            ProducerStateConfigError::WindowOutOfRange { .. } => "window_out_of_range",
            ProducerStateConfigError::ZeroMaxProducers => "zero_max_producers",
            ProducerStateConfigError::NonPositiveExpiration { .. } => "non_positive_expiration",
        }
    }
}

impl ProducerStateConfig {
    /// Checks every field against its valid range.
    pub fn validate(&self) -> Result<(), ProducerStateConfigError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(ProducerStateConfigError::WindowOutOfRange {
                got: self.window,
                min: MIN_WINDOW,
                max: MAX_WINDOW,
            });
        }
        if self.max_producers == Some(0) {
            return Err(ProducerStateConfigError::ZeroMaxProducers);
        }
        if self.expiration_ms <= 0 {
            return Err(ProducerStateConfigError::NonPositiveExpiration {
                got: self.expiration_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = ProducerStateConfig::default();
        assert_eq!(c.window, 5);
        assert_eq!(c.expiration_ms, 86_400_000);
        assert_eq!(c.max_producers, None);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn window_range_is_enforced() {
        let bad = |window| {
            ProducerStateConfig {
                window,
                ..Default::default()
            }
            .validate()
        };
        assert_eq!(
            bad(0),
            Err(ProducerStateConfigError::WindowOutOfRange {
                got: 0,
                min: 1,
                max: MAX_WINDOW
            })
        );
        assert!(bad(MAX_WINDOW + 1).is_err());
        assert_eq!(bad(1024), Ok(()));
        assert_eq!(bad(1), Ok(()));
    }

    #[test]
    fn zero_limit_and_non_positive_expiry_are_refused() {
        let c = ProducerStateConfig {
            max_producers: Some(0),
            ..Default::default()
        };
        assert_eq!(
            c.validate(),
            Err(ProducerStateConfigError::ZeroMaxProducers)
        );
        let c = ProducerStateConfig {
            expiration_ms: 0,
            ..Default::default()
        };
        assert_eq!(
            c.validate(),
            Err(ProducerStateConfigError::NonPositiveExpiration { got: 0 })
        );
    }
}
