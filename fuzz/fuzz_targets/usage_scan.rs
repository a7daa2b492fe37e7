//! `learn::UsageScanner` on arbitrary answer bytes, as a pod (honest or not) streams them:
//! never panics, and the usage found does not depend on where the chunks split (the whole
//! answer, the answer byte by byte, and the answer cut where the input says all agree), nor
//! is any found in bytes that never spell the key.

#![no_main]

use libfuzzer_sys::fuzz_target;
use picker::learn::{Usage, UsageScanner};

fuzz_target!(|data: &[u8]| {
    // The first byte says how many cut points follow; the rest is the answer.
    let Some((&count, rest)) = data.split_first() else { return };
    let (cuts, answer) = rest.split_at((usize::from(count) % 8).min(rest.len()));
    let whole = scan(std::iter::once(answer));
    assert_eq!(scan(answer.chunks(1)), whole, "byte by byte");
    let mut points: Vec<usize> = cuts.iter().map(|&cut| usize::from(cut) * answer.len() / 256).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points {
        chunks.push(&answer[start..point]);
        start = point;
    }
    chunks.push(&answer[start..]);
    assert_eq!(scan(chunks.into_iter()), whole, "cut at the input's points");
    if !answer.windows(7).any(|window| window == b"\"usage\"") {
        assert_eq!(whole, None, "usage found without its key");
    }
});

fn scan<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Option<Usage> {
    let mut scanner = UsageScanner::default();
    chunks.for_each(|chunk| scanner.feed(chunk));
    scanner.usage()
}
