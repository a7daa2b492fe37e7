//! `answer_encoding::Inflater` on arbitrary bytes, as a pod (or a proxy before it) sends a
//! compressed answer: never panics, never gives more than its bound, and what it gives (or
//! the error it stops at) does not depend on where the chunks split (the whole answer, byte
//! by byte, cut where the input says). And the same bytes taken as the plain answer, gzip- or
//! deflate-compressed and cut there, inflate back to themselves.

#![no_main]

use libfuzzer_sys::fuzz_target;
use miniz_oxide::deflate::{compress_to_vec, compress_to_vec_zlib};
use wasm_epp_router::answer_encoding::{ContentEncoding, Inflater, Unreadable, MAX_INFLATED_BYTES};

fuzz_target!(|data: &[u8]| {
    // The first byte: the coding (low bit) and how many cut points follow; the rest is the answer.
    let Some((&first, rest)) = data.split_first() else { return };
    let encoding = if first & 1 == 0 { ContentEncoding::Gzip } else { ContentEncoding::Deflate };
    let (cuts, answer) = rest.split_at((usize::from(first >> 1) % 8).min(rest.len()));
    let whole = inflate(encoding, &[answer]);
    if let Ok(plain) = &whole {
        assert!(plain.len() <= MAX_INFLATED_BYTES);
    }
    let bytes: Vec<&[u8]> = answer.chunks(1).collect();
    same(&inflate(encoding, &bytes), &whole, "byte by byte");
    let chunks = cut(answer, cuts);
    same(&inflate(encoding, &chunks), &whole, "cut at the input's points");
    // The answer as plain text, compressed as a pod's proxy would send it.
    let compressed = match encoding {
        ContentEncoding::Gzip => {
            let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
            bytes.extend(compress_to_vec(answer, 6));
            bytes.extend([0; 8]);
            bytes
        }
        _ if first & 2 == 0 => compress_to_vec_zlib(answer, 6),
        _ => compress_to_vec(answer, 1),
    };
    let chunks = cut(&compressed, cuts);
    assert_eq!(inflate(encoding, &chunks).as_deref(), Ok(answer), "round trip");
});

/// The plain bytes of `chunks` inflated in turn, or the error the decoder stopped at (with the
/// bytes it gave before).
fn inflate(encoding: ContentEncoding, chunks: &[&[u8]]) -> Result<Vec<u8>, (Unreadable, Vec<u8>)> {
    let Some(mut inflater) = Inflater::new(encoding) else { return Ok(Vec::new()) };
    let mut plain = Vec::new();
    for chunk in chunks {
        if let Err(error) = inflater.inflate(chunk, &mut plain) {
            return Err((error, plain));
        }
    }
    Ok(plain)
}

/// The same plain bytes, or the same error (the bytes given before it may end at another
/// point of the chunk it was found in: one is the start of the other).
fn same(found: &Result<Vec<u8>, (Unreadable, Vec<u8>)>, whole: &Result<Vec<u8>, (Unreadable, Vec<u8>)>, how: &str) {
    match (found, whole) {
        (Err((error, before)), Err((whole_error, whole_before))) => {
            assert_eq!(error, whole_error, "{how}");
            assert!(before.starts_with(whole_before) || whole_before.starts_with(before), "{how}");
        }
        _ => assert_eq!(found, whole, "{how}"),
    }
}

/// `bytes` cut where `cuts` say (each a share of 256 of its length).
fn cut<'a>(bytes: &'a [u8], cuts: &[u8]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|&cut| usize::from(cut) * bytes.len() / 256).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points {
        chunks.push(&bytes[start..point]);
        start = point;
    }
    chunks.push(&bytes[start..]);
    chunks
}
