//! The routing-event batch codec (`prefix::events::decode_batch`, `split_batch`) on arbitrary
//! bytes, as a worker reads them from a ring segment. Never panics; decodes at most
//! `MAX_EVENTS_PER_BATCH` events of at most `MAX_HASHES_PER_EVENT` hashes, each naming a
//! canonical pod address; re-encoding what decoded gives it back; and cutting the batch with
//! `split_batch` at any bound loses and reorders nothing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::prefix::events::{
    decode_batch, encode_batch, split_batch, BATCH_VERSION, MAX_EVENTS_PER_BATCH, MAX_EVENT_BYTES, MAX_HASHES_PER_EVENT,
};
use picker_fuzz::assert_canonical_address;

fuzz_target!(|bytes: &[u8]| {
    let events = decode_batch(bytes);
    assert!(events.len() <= MAX_EVENTS_PER_BATCH);
    for event in &events {
        assert_canonical_address(&event.pod);
        assert!(event.hashes.len() <= MAX_HASHES_PER_EVENT);
    }
    assert_eq!(decode_batch(&encode_batch(&events)), events, "encode(decode(x)) does not decode to the same");

    // Runs of at most 16 KiB hold fewer than MAX_EVENTS_PER_BATCH events each, so decoding
    // run by run sees every event the batch has, and the whole decode is its first part.
    for max_bytes in [0, 100, MAX_EVENT_BYTES + 1, 16 * 1024] {
        let mut rejoined = Vec::new();
        for run in split_batch(bytes, max_bytes) {
            assert!(!run.is_empty());
            assert!(run.len() < max_bytes.max(MAX_EVENT_BYTES + 1), "a run of {} bytes for {max_bytes}", run.len());
            let headed = [&[BATCH_VERSION][..], run].concat();
            rejoined.extend(decode_batch(&headed));
        }
        let cut = rejoined.len().min(MAX_EVENTS_PER_BATCH);
        assert_eq!(rejoined.get(..cut).unwrap_or_default(), &events[..], "split at {max_bytes} changed the events");
    }
});
