//! Stored responses (`--responses-store`), as vLLM keeps them with
//! `VLLM_ENABLE_RESPONSES_API_STORE=1`: in the pod's memory, keyed by response id, each the
//! conversation that led to it (its input, without `instructions`, which a continuation does
//! not inherit) and its answer, and the response object itself. A request naming
//! `previous_response_id` continues that conversation, and `GET /v1/responses/{id}` returns
//! the object; another pod does not know the id and answers 404, which is why a router must
//! send both back to the pod that answered.

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use crate::chat_template::ChatMessage;

#[derive(Debug)]
struct Stored {
    conversation: Vec<ChatMessage>,
    response: Value,
}

/// Responses kept per pod at most; the oldest go first (vLLM's store is unbounded).
pub const MAX_STORED_RESPONSES: usize = 4096;

#[derive(Debug, Default)]
pub struct ResponseStore {
    conversations: HashMap<String, Stored>,
    order: VecDeque<String>,
    /// Requests that named an id this pod does not hold.
    pub not_found: u64,
}

impl ResponseStore {
    /// The conversation response `id` ended, if stored here.
    pub fn conversation(&self, id: &str) -> Option<&[ChatMessage]> {
        self.conversations.get(id).map(|stored| stored.conversation.as_slice())
    }

    /// The response object stored under `id`.
    pub fn response(&self, id: &str) -> Option<&Value> {
        self.conversations.get(id).map(|stored| &stored.response)
    }

    /// Stores `conversation` (input and answer) and the `response` object under `id`.
    pub fn store(&mut self, id: String, conversation: Vec<ChatMessage>, response: Value) {
        if self.conversations.insert(id.clone(), Stored { conversation, response }).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > MAX_STORED_RESPONSES {
            if let Some(oldest) = self.order.pop_front() {
                self.conversations.remove(&oldest);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.conversations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_responses_within_the_bound() {
        let mut store = ResponseStore::default();
        for i in 0..MAX_STORED_RESPONSES + 10 {
            store.store(format!("resp_{i}"), vec![ChatMessage::text("user", "x")], Value::Null);
        }
        assert_eq!(store.len(), MAX_STORED_RESPONSES);
        assert!(store.conversation("resp_0").is_none());
        assert!(store.conversation(&format!("resp_{}", MAX_STORED_RESPONSES + 9)).is_some());
        assert!(store.response("resp_0").is_none() && store.response("resp_10").is_some());
    }
}
