//! The ejections one worker publishes for the other workers of its Envoy.
//!
//! Each worker judges the answers it proxies, so without sharing, every worker of an Envoy
//! has to see a broken pod fail `consecutive_failures` times before it passes it over: with 8
//! workers, 8 times as many failed attempts, and as many chances for a request whose every
//! choice is a broken pod. A worker publishes its ejections under its in-flight slot (a plain
//! write: nobody else writes that key) and reads the others' on its tick; an ejection read
//! there is adopted ([`super::Outliers::adopt`]) as if the worker had made it, so probation
//! and the doubling carry over.
//!
//! The record is `VERSION`, a `u16` count, then per ejection: the address's length (`u8`)
//! and bytes, the pod's table epoch (`u32`), its strikes (`u32`), when the ejection was made
//! and when it ends (`u64` each, ms on the Envoy's clock, which every worker shares). Times
//! are absolute, so a record left by a worker that is gone expires by itself, and the time an
//! ejection was made tells it from any other: read back by a worker that holds it already
//! (its maker included), it changes nothing.

use crate::address::PodAddress;
use crate::wire::Reader;

const VERSION: u8 = 1;

/// The record of no ejections.
pub const EMPTY: [u8; 3] = [VERSION, 0, 0];

/// Ejections per record at most: a worker publishes and adopts no more (far above the pods
/// any pool has out of rotation at once; the rest are found from the answers as before).
pub const MAX_SHARED: usize = 256;

/// One pod a worker took out of rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ejection {
    pub pod: PodAddress,
    /// The pod's table epoch at the ejection: a restarted engine is not the one that failed.
    pub epoch: u32,
    /// Ejections since its last success: the next one lasts `base << strikes`.
    pub strikes: u32,
    /// When the worker that made it ejected the pod.
    pub ejected_at_ms: u64,
    pub until_ms: u64,
}

/// The record of `ejections` (at most [`MAX_SHARED`] of them).
pub fn encode(ejections: &[Ejection]) -> Vec<u8> {
    // A pod address is far shorter than 255 bytes (ip:port, IPv6 in brackets); one that is not
    // is left out rather than cut into another address.
    let written: Vec<(&Ejection, u8)> =
        ejections.iter().filter_map(|e| Some((e, u8::try_from(e.pod.as_str().len()).ok()?))).take(MAX_SHARED).collect();
    let mut bytes = Vec::with_capacity(3 + written.len() * 48);
    bytes.push(VERSION);
    bytes.extend_from_slice(&u16::try_from(written.len()).unwrap_or(u16::MAX).to_le_bytes());
    for (ejection, length) in written {
        bytes.push(length);
        bytes.extend_from_slice(ejection.pod.as_str().as_bytes());
        bytes.extend_from_slice(&ejection.epoch.to_le_bytes());
        bytes.extend_from_slice(&ejection.strikes.to_le_bytes());
        bytes.extend_from_slice(&ejection.ejected_at_ms.to_le_bytes());
        bytes.extend_from_slice(&ejection.until_ms.to_le_bytes());
    }
    bytes
}

/// The ejections in `bytes`, or `None` if the record is not one (another version, cut short,
/// an address that does not parse): a bad record is ignored whole.
pub fn decode(bytes: &[u8]) -> Option<Vec<Ejection>> {
    let mut reader = Reader::new(bytes);
    if reader.u8()? != VERSION {
        return None;
    }
    let count = usize::from(reader.u16()?);
    let mut ejections = Vec::with_capacity(count.min(MAX_SHARED));
    for _ in 0..count {
        let length = usize::from(reader.u8()?);
        let address = std::str::from_utf8(reader.take(length)?).ok()?;
        let pod = PodAddress::parse(address).ok()?;
        let (epoch, strikes, ejected_at_ms, until_ms) = (reader.u32()?, reader.u32()?, reader.u64()?, reader.u64()?);
        if ejections.len() < MAX_SHARED {
            ejections.push(Ejection { pod, epoch, strikes, ejected_at_ms, until_ms });
        }
    }
    reader.rest().is_empty().then_some(ejections)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ejection(address: &str, until_ms: u64) -> Ejection {
        Ejection { pod: PodAddress::parse(address).unwrap(), epoch: 3, strikes: 2, ejected_at_ms: 7, until_ms }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let ejections = vec![ejection("10.0.0.1:8000", 12_345), ejection("[fd00::2]:8000", u64::MAX)];
        assert_eq!(decode(&encode(&ejections)), Some(ejections));
        assert_eq!(encode(&[]), EMPTY);
        assert_eq!(decode(&EMPTY), Some(Vec::new()));
    }

    #[test]
    fn a_bad_record_is_ignored_whole_and_a_long_one_is_capped() {
        let bytes = encode(&[ejection("10.0.0.1:8000", 5)]);
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), None);
        let mut other_version = bytes.clone();
        other_version[0] = VERSION + 1;
        assert_eq!(decode(&other_version), None);
        let mut not_an_address = bytes;
        not_an_address[4] = b'x';
        assert_eq!(decode(&not_an_address), None);
        let many: Vec<Ejection> =
            (0..MAX_SHARED + 5).map(|i| ejection(&format!("10.0.{}.{}:80", i / 256, i % 256), 9)).collect();
        assert_eq!(decode(&encode(&many)).map(|e| e.len()), Some(MAX_SHARED));
    }
}
