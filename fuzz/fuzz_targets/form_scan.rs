//! An upload's form read as Envoy delivers it: `request::FormScan` (the `model` an upload is
//! routed by) and `request::ModelWatch` (another `model` after it, read as the rest streams
//! past), on any bytes cut into chunks of one size, and into chunks of sizes that vary (drawn
//! from the first byte: a cut may fall anywhere, not only at multiples of one size). Beyond
//! "no panic": each answers the same however the body is cut (the routing cannot depend on
//! the network's chunking); a model read is the bytes its range names; the watch keeps no
//! more than a part's bounded header line and value between chunks, however long the form.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::request::{FormRead, FormScan, ModelWatch, Watched};

const BOUNDARY: &str = "b0";

/// Bytes the watch may keep between chunks: a part's header line (4 KiB), a value (256 bytes),
/// and a delimiter cut twice, with room to spare.
const MOST_KEPT: usize = 4096 + 256 + 4 * (BOUNDARY.len() + 4) + 64;

fuzz_target!(|input: &[u8]| {
    let Some((&chunk, body)) = input.split_first() else { return };
    let chunk = usize::from(chunk).max(1);
    let (whole, scan) = read(body, body.len().max(1));
    let (cut, _) = read(body, chunk);
    assert_eq!(whole, cut, "the form's model depends on its chunking ({chunk})");
    let (uneven, _) = read_in(body, &mut Sizes::new(chunk));
    assert_eq!(whole, uneven, "the form's model depends on its chunking (uneven from {chunk})");
    let FormRead::Model(model) = whole else { return };
    assert_eq!(body.get(model.value.clone()), Some(model.name.as_bytes()), "the range is not the name");
    let rest = body.get(model.value.end..).unwrap_or_default();
    for rewritten in [false, true] {
        let at_once = watch(&scan, &model, rewritten, rest, rest.len().max(1));
        assert_eq!(watch(&scan, &model, rewritten, rest, chunk), at_once, "the watch depends on chunking ({chunk})");
        let uneven = watch_in(&scan, &model, rewritten, rest, &mut Sizes::new(chunk));
        assert_eq!(uneven, at_once, "the watch depends on chunking (uneven from {chunk})");
    }
});

/// Chunk sizes of 1 to 256 bytes, a different one each time, drawn from a seed.
struct Sizes(u64);

impl Sizes {
    fn new(seed: usize) -> Self {
        Self(seed as u64)
    }
}

impl Iterator for Sizes {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        Some((self.0 >> 56) as usize + 1)
    }
}

/// The scan's answer on `body` fed `chunk` bytes at a time, and the scan that gave it.
fn read(body: &[u8], chunk: usize) -> (FormRead, FormScan) {
    read_in(body, &mut std::iter::repeat(chunk))
}

/// The scan's answer on `body` fed in chunks of the sizes `sizes` gives, and the scan.
fn read_in(body: &[u8], sizes: &mut dyn Iterator<Item = usize>) -> (FormRead, FormScan) {
    let mut scan = FormScan::new(BOUNDARY);
    let mut arrived: usize = 0;
    loop {
        arrived = arrived.saturating_add(sizes.next().unwrap_or(1)).min(body.len());
        let bytes = body.get(scan.resume_at().min(arrived)..arrived).unwrap_or_default();
        let answer = scan.scan(bytes, arrived == body.len());
        if answer != FormRead::More {
            return (answer, scan);
        }
        assert!(arrived < body.len(), "the whole body read and still More");
    }
}

/// The watch's answer after `model` on `rest`, fed `chunk` bytes at a time.
fn watch(scan: &FormScan, model: &picker::request::FormModel, rewritten: bool, rest: &[u8], chunk: usize) -> Watched {
    watch_in(scan, model, rewritten, rest, &mut std::iter::repeat(chunk))
}

/// The watch's answer after `model` on `rest`, fed in chunks of the sizes `sizes` gives.
fn watch_in(
    scan: &FormScan,
    model: &picker::request::FormModel,
    rewritten: bool,
    rest: &[u8],
    sizes: &mut dyn Iterator<Item = usize>,
) -> Watched {
    let mut watch = ModelWatch::after(scan, model, rewritten);
    if rest.is_empty() {
        return watch.feed(&[], true);
    }
    let mut start = 0;
    while start < rest.len() {
        let end = start.saturating_add(sizes.next().unwrap_or(1).max(1)).min(rest.len());
        let bytes = rest.get(start..end).unwrap_or_default();
        start = end;
        let answer = watch.feed(bytes, end == rest.len());
        assert!(watch.kept_len() <= MOST_KEPT, "kept {} bytes", watch.kept_len());
        if answer != Watched::Fine {
            return answer;
        }
    }
    Watched::Fine
}
