//! A small blocking HTTP client for checks and tests: every status is a value, not an error.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The pod that served the request, as the simulator reports it.
    pub fn served_by(&self) -> Option<&str> {
        self.header("x-served-by")
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(timeout).build()
}

fn into_reply(result: Result<ureq::Response, ureq::Error>) -> Result<Reply, String> {
    let response = match result {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(ureq::Error::Transport(error)) => return Err(error.to_string()),
    };
    let status = response.status();
    let headers = response
        .headers_names()
        .into_iter()
        .filter_map(|name| response.header(&name).map(|value| (name.clone(), value.to_string())))
        .collect();
    let body = response.into_string().map_err(|e| e.to_string())?;
    Ok(Reply { status, headers, body })
}

pub fn get(url: &str, timeout: Duration) -> Result<Reply, String> {
    into_reply(agent(timeout).get(url).call())
}

/// POSTs `body` with the given extra headers (content type JSON unless given).
pub fn post(url: &str, headers: &[(&str, &str)], body: &str, timeout: Duration) -> Result<Reply, String> {
    let mut request = agent(timeout).post(url);
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        request = request.set("content-type", "application/json");
    }
    for (name, value) in headers {
        request = request.set(name, value);
    }
    into_reply(request.send_string(body))
}

/// POSTs raw bytes (for bodies that are not valid UTF-8) with the given headers.
pub fn post_bytes(url: &str, headers: &[(&str, &str)], body: &[u8], timeout: Duration) -> Result<Reply, String> {
    let mut request = agent(timeout).post(url);
    for (name, value) in headers {
        request = request.set(name, value);
    }
    into_reply(request.send_bytes(body))
}

/// Sends `method` with an optional body.
pub fn request(method: &str, url: &str, body: Option<&str>, timeout: Duration) -> Result<Reply, String> {
    let request = agent(timeout).request(method, url);
    into_reply(match body {
        Some(body) => request.set("content-type", "application/json").send_string(body),
        None => request.call(),
    })
}

pub fn delete(url: &str, timeout: Duration) -> Result<Reply, String> {
    into_reply(agent(timeout).delete(url).call())
}
