//! How the decision bench measures: a counting global allocator (allocations per call),
//! timing with untimed preparation between calls, and reading criterion's medians back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use criterion::Bencher;

/// Counts every allocation (and reallocation) made by the bench process.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations and bytes allocated by one call of `f`.
pub fn allocations_of(f: &mut dyn FnMut()) -> (u64, u64) {
    allocations_between(&mut || {}, f)
}

/// Allocations and bytes allocated by one call of `run`, `prepare` run untimed before it.
pub fn allocations_between(prepare: &mut dyn FnMut(), run: &mut dyn FnMut()) -> (u64, u64) {
    prepare();
    run(); // Once first, so lazily grown buffers do not count.
    prepare();
    let (count, bytes) = (ALLOCATIONS.load(Ordering::Relaxed), ALLOCATED_BYTES.load(Ordering::Relaxed));
    run();
    (ALLOCATIONS.load(Ordering::Relaxed) - count, ALLOCATED_BYTES.load(Ordering::Relaxed) - bytes)
}

/// Times `run` alone, with `prepare` (resetting the mock host between requests) run before
/// each call outside the clock.
pub fn time_between(b: &mut Bencher<'_>, prepare: &mut dyn FnMut(), run: &mut dyn FnMut()) {
    b.iter_custom(|iterations| {
        let mut total = Duration::ZERO;
        for _ in 0..iterations {
            prepare();
            let start = Instant::now();
            run();
            total += start.elapsed();
        }
        total
    });
}

/// Where criterion writes its estimates.
fn criterion_dir() -> std::path::PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| launcher::paths::workspace_root().join("target"));
    target.join("criterion")
}

/// The median of one benchmark, in µs, if criterion measured it in this run. Criterion keeps
/// it under `<group>/<id with / and other unsafe characters as _>/new/estimates.json`.
pub fn criterion_median_us(group: &str, id: &str, since: SystemTime) -> Option<f64> {
    let safe: String = id.chars().map(|c| if "?\"/\\*<>:|^".contains(c) { '_' } else { c }).collect();
    let path = criterion_dir().join(group).join(safe).join("new/estimates.json");
    let fresh = std::fs::metadata(&path).and_then(|m| m.modified()).is_ok_and(|m| m >= since);
    if !fresh {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    Some(json.pointer("/median/point_estimate")?.as_f64()? / 1000.0)
}
