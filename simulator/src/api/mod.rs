//! The OpenAI-compatible surface: request parsing, response shapes, streaming, and errors.
//! Plain data in and out; the HTTP layer (`crate::http`) wires it to sockets.

pub mod errors;
pub mod lax;
pub mod messages_api;
pub mod request;
pub mod responses;
pub mod responses_api;
pub mod sse;
