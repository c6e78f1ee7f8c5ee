//! sbm-rpm and sbm-rpm-server: the IETF's responsiveness (RPM) test
//! (draft-ietf-ippm-responsiveness-09) with a choice of readiness rule at each endpoint.
//!
//! - `method`: the draft's arithmetic (trimmed means, RPM, stability, confidence), pure.
//! - `nq_config`: the `/.well-known/nq` configuration object, read and written.
//! - `rule`: the readiness rule at an endpoint, and the socket wrapper that applies its
//!   per-write part.

pub mod body;
pub mod client;
pub mod connect;
pub mod ledger;
pub mod method;
pub mod nq_config;
pub mod record;
pub mod rule;
pub mod server;
pub mod tls;
