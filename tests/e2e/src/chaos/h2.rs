//! The chaos test's HTTP/2 clients: what the OpenAI SDKs (httpx with `http2=True`), gRPC-style
//! gateways and sidecars send. One connection (cleartext, prior knowledge) carries several
//! requests at once, and a client that gives up resets its stream (RST_STREAM, CANCEL) while
//! the connection and its other streams go on: Envoy then ends that one stream's filter
//! callbacks, where an HTTP/1 client's leaving closes its whole connection.
//!
//! The same requests as the HTTP/1 clients (`super::plan`), left at the same moments: mid-body,
//! while waiting (in flow control's queue or generating) and mid-stream; and answers left
//! unread a while, their stream's flow-control window shut (`Kind::StopsReading`): each
//! stream's window is small (`STREAM_WINDOW`), so Envoy, not the client's buffer, holds the
//! rest of such an answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{Reason, RecvStream, SendStream};

use super::{Draw, Kind, Outcome, Planned, MID_BODY_PAUSE, REQUEST_TIMEOUT};

/// Most of an answer's body kept, as the HTTP/1 clients keep.
const BODY_LIMIT: usize = 4 << 20;

/// Each stream's initial flow-control window (the client's SETTINGS_INITIAL_WINDOW_SIZE, in
/// place of HTTP/2's 64 KiB): smaller than most answers here (a stream of a few dozen events,
/// a whole answer of several choices), so one the client stops reading stalls in Envoy, whose
/// stream then cannot end until the client reads on or resets. Clients that read give each
/// chunk back at once, so their answers flow as before.
const STREAM_WINDOW: u32 = 2048;

/// Which of `clients` client threads speak HTTP/2: `share` of them (rounded), drawn from
/// `seed` so a replayed run makes the same ones HTTP/2.
pub fn chosen(seed: u64, clients: usize, share: f64) -> Vec<bool> {
    let count = ((clients as f64) * share.clamp(0.0, 1.0)).round() as usize;
    let mut draw = Draw::new(seed ^ 0x6832_6832_6832_6832);
    let mut order: Vec<usize> = (0..clients).collect();
    // Fisher-Yates: the first `count` of a seeded shuffle.
    for i in (1..order.len()).rev() {
        order.swap(i, draw.below(i as u64 + 1) as usize);
    }
    let mut http2 = vec![false; clients];
    order.iter().take(count).for_each(|&client| http2[client] = true);
    http2
}

/// One stream slot of a connection: its own draw, so a replay plans the same requests.
struct Slot {
    draw: Draw,
    sent: usize,
    /// A request the connection closed before taking: sent again on the next one.
    pending: Option<Planned>,
}

/// Runs one HTTP/2 client until `stop`: a connection to the gateway on `port` with one
/// stream at a time per draw in `draws`, each sending `plan(draw, index)` after the other
/// and handing each outcome to `record`. A new connection replaces one that closes.
pub fn run(
    port: u16,
    draws: Vec<Draw>,
    plan: impl Fn(&mut Draw, usize) -> Planned,
    stop: &AtomicBool,
    record: impl Fn(Outcome),
) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let streams = draws.len();
    let mut slots: Vec<Slot> = draws.into_iter().map(|draw| Slot { draw, sent: 0, pending: None }).collect();
    let (plan, record) = (&plan, &record);
    runtime.block_on(async {
        while !stop.load(Ordering::Relaxed) {
            let Some(sender) = connect(port).await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let senders = slots.iter_mut().enumerate().map(|(stream, slot)| {
                // Request numbers unique across the client's streams (they name the prompt).
                let plan = move |draw: &mut Draw, sent: usize| plan(draw, sent * streams + stream);
                Box::pin(keep_sending(slot, sender.clone(), port, plan, stop, record))
            });
            join_all(senders.collect()).await;
        }
    });
}

async fn connect(port: u16) -> Option<SendRequest<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let (sender, connection) =
        h2::client::Builder::new().initial_window_size(STREAM_WINDOW).handshake(tcp).await.ok()?;
    tokio::spawn(connection);
    Some(sender)
}

/// Sends one request after another on the connection of `sender` until `stop`, or until the
/// connection takes no more (the request not taken stays in `slot`).
async fn keep_sending(
    slot: &mut Slot,
    sender: SendRequest<Bytes>,
    port: u16,
    plan: impl Fn(&mut Draw, usize) -> Planned,
    stop: &AtomicBool,
    record: &impl Fn(Outcome),
) {
    while !stop.load(Ordering::Relaxed) {
        let planned = match slot.pending.take() {
            Some(planned) => planned,
            None => {
                slot.sent += 1;
                plan(&mut slot.draw, slot.sent - 1)
            }
        };
        match exchange(sender.clone(), port, planned).await {
            Ok(mut outcome) => {
                outcome.http2 = true;
                record(outcome);
            }
            Err(planned) => {
                slot.pending = Some(planned);
                return;
            }
        }
    }
}

/// One request on its own stream. `Err` gives the request back when the connection did not
/// take it (closed, or the stream refused: never processed, so safe to send again).
async fn exchange(sender: SendRequest<Bytes>, port: u16, planned: Planned) -> Result<Outcome, Planned> {
    let started = Instant::now();
    let Ok(mut sender) = sender.ready().await else { return Err(planned) };
    let Ok((response, mut body)) = sender.send_request(head(&planned, port), false) else { return Err(planned) };
    let whole_body = Bytes::from(planned.body.clone());
    match planned.kind {
        Kind::LeavesMidBody => {
            let _ = body.send_data(whole_body.slice(..whole_body.len() / 2), false);
            tokio::time::sleep(MID_BODY_PAUSE).await;
        }
        Kind::LeavesWaiting => {
            let _ = body.send_data(whole_body, true);
            tokio::time::sleep(planned.patience()).await;
        }
        _ => {
            let _ = body.send_data(whole_body, true);
            let answer = tokio::time::timeout(REQUEST_TIMEOUT, answer(response, &mut body, planned.clone(), started));
            return match answer.await {
                Ok(Answer::Came(outcome)) => Ok(*outcome),
                Ok(Answer::Refused) => Err(planned),
                Ok(Answer::Failed(why)) => Ok(Outcome::unanswered(planned, started, why)),
                Err(_) => {
                    body.send_reset(Reason::CANCEL);
                    Ok(Outcome::unanswered(planned, started, format!("no answer in {REQUEST_TIMEOUT:?}")))
                }
            };
        }
    }
    // The client gives up: its stream alone is reset, the connection stays.
    body.send_reset(Reason::CANCEL);
    drop(response);
    Ok(Outcome::unanswered(planned, started, "left".into()))
}

fn head(planned: &Planned, port: u16) -> hyper::Request<()> {
    let mut request = hyper::Request::post(format!("http://127.0.0.1:{port}{}", planned.path))
        .header("content-type", &planned.content_type)
        .header("content-length", planned.body.len());
    for (name, value) in &planned.headers {
        request = request.header(name, value);
    }
    request.body(()).unwrap()
}

enum Answer {
    Came(Box<Outcome>),
    /// RST_STREAM with REFUSED_STREAM: the gateway did not process it.
    Refused,
    Failed(String),
}

async fn answer(response: ResponseFuture, send: &mut SendStream<Bytes>, planned: Planned, started: Instant) -> Answer {
    let response = match response.await {
        Ok(response) => response,
        Err(error) if error.reason() == Some(Reason::REFUSED_STREAM) => return Answer::Refused,
        Err(error) => return Answer::Failed(error.to_string()),
    };
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let pod = header("x-served-by").or_else(|| header("x-gateway-destination-endpoint-served"));
    let dropped_reason = header("x-llm-d-request-dropped-reason");
    let queue_duration = header("x-llm-d-flow-queue-duration-ms");
    let local_reply = header("x-wasm-epp").as_deref() == Some("local-reply");
    let status = response.status().as_u16();
    let mut received = response.into_body();
    let (body, whole) = match planned.kind {
        Kind::LeavesMidStream => {
            // Read the first bytes, then go: a reset of this stream alone.
            let _ = received.data().await;
            send.send_reset(Reason::CANCEL);
            (String::new(), false)
        }
        Kind::StopsReading { resumes, .. } => {
            // Read the first bytes without giving them back to the window, which stays shut
            // a while (the connection and its other streams go on), then read on or reset.
            let first = received.data().await;
            tokio::time::sleep(planned.pause()).await;
            match first {
                Some(Ok(first)) if resumes => {
                    let _ = received.flow_control().release_capacity(first.len());
                    let (rest, whole) = read_to_end(&mut received).await;
                    (String::from_utf8_lossy(&first).into_owned() + &rest, whole)
                }
                Some(Ok(_)) => {
                    send.send_reset(Reason::CANCEL);
                    (String::new(), false)
                }
                Some(Err(_)) => (String::new(), false),
                // An empty body, ended: nothing was left unread.
                None => (String::new(), resumes),
            }
        }
        _ => read_to_end(&mut received).await,
    };
    Answer::Came(Box::new(Outcome {
        planned,
        started,
        ended: Instant::now(),
        status: Ok(status),
        pod,
        dropped_reason,
        queue_duration,
        local_reply,
        body,
        whole,
        http2: true,
    }))
}

/// The answer's body (its first `BODY_LIMIT` bytes) and whether it ended without a reset or
/// a broken connection. Each chunk read is given back to the flow-control window, as a
/// client does, so Envoy may send more.
async fn read_to_end(received: &mut RecvStream) -> (String, bool) {
    let mut body = Vec::new();
    while let Some(chunk) = received.data().await {
        let Ok(chunk) = chunk else { return (String::from_utf8_lossy(&body).into_owned(), false) };
        let _ = received.flow_control().release_capacity(chunk.len());
        let room = BODY_LIMIT.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    match String::from_utf8(body) {
        Ok(body) => (body, true),
        Err(error) => (String::from_utf8_lossy(error.as_bytes()).into_owned(), false),
    }
}

/// Polls every future until all have finished (the e2e crate has no `futures`).
async fn join_all<F: Future<Output = ()> + Unpin>(mut futures: Vec<F>) {
    let mut done = vec![false; futures.len()];
    std::future::poll_fn(|context| {
        for (future, done) in futures.iter_mut().zip(done.iter_mut()).filter(|(_, done)| !**done) {
            *done = Pin::new(future).poll(context).is_ready();
        }
        if done.iter().all(|done| *done) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
