//! What a gateway replica receives from its peers (`peer::PeerMessage::decode`, then
//! `PeerLedger::admit`): arbitrary bytes, as a broken or hostile peer with the secret could
//! send. Never panics; a decoded message holds at most `MAX_PODS` pods and a bounded batch of
//! decisions, every address canonical; encoding what decoded gives it back; the ledger admits
//! it once, refuses its replay, a message from this replica itself and one sent too long ago.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::peer::{PeerLedger, PeerMessage, Refused, MAX_MESSAGE_AGE_MS, MAX_MESSAGE_BYTES};
use picker::pod_table::MAX_PODS;
use picker::prefix::events::{encode_batch, MAX_EVENTS_PER_BATCH, MAX_HASHES_PER_EVENT};
use picker_fuzz::assert_canonical_address;

fuzz_target!(|bytes: &[u8]| {
    let message = match PeerMessage::decode(bytes) {
        Ok(message) => message,
        Err(refused) => {
            let expected = if bytes.len() > MAX_MESSAGE_BYTES { Refused::TooLarge } else { Refused::Malformed };
            assert_eq!(refused, expected);
            return;
        }
    };
    assert!(message.pods.len() <= MAX_PODS);
    for pod in &message.pods {
        assert_canonical_address(pod.address.as_str());
    }
    assert!(message.events.len() <= MAX_EVENTS_PER_BATCH);
    for event in &message.events {
        assert_canonical_address(&event.pod);
        assert!(event.hashes.len() <= MAX_HASHES_PER_EVENT);
    }
    let encoded = message.encode(&encode_batch(&message.events));
    assert_eq!(PeerMessage::decode(&encoded).as_ref(), Ok(&message), "encode(decode(x)) does not decode to the same");

    let mut ledger = PeerLedger::default();
    let receiver = message.replica.wrapping_add(1);
    let now = message.sent_ms;
    assert_eq!(ledger.admit(&message, message.replica, now), Err(Refused::FromSelf));
    if let Some(late) = now.checked_add(MAX_MESSAGE_AGE_MS + 1) {
        assert_eq!(ledger.admit(&message, receiver, late), Err(Refused::OutOfTime));
    }
    assert_eq!(ledger.admit(&message, receiver, now), Ok(()));
    assert_eq!(ledger.admit(&message, receiver, now), Err(Refused::Replayed));
});
