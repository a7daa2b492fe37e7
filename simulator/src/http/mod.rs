//! The HTTP layer: one hyper server per pod, a router, and thin handlers over `crate::api`
//! and `crate::pod`. File order follows the request path: server → router → handlers.

pub mod admin;
pub mod audio;
pub mod body;
pub mod metrics_endpoint;
pub mod misc;
pub mod openai;
pub mod router;
pub mod server;

pub use router::SERVED_BY_HEADER;
pub use server::{spawn_pod, RunningPod};
