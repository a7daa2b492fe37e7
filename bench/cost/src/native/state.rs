//! The state one native case starts from: the pool's pods and their table as the pool
//! service publishes it, in-flight counts, and a warm prefix replica.

use picker::address::PodAddress;
use picker::inflight::WorkerInflight;
use picker::keys;
use picker::pod_table::{encode_version, PodState, PodTable};
use picker::prefix::{hash_prompt, HashParams, WorkerPrefix};
use picker::request::{parse_request, Endpoint};
use picker::store::SharedStore;

use crate::workload;

/// The host clock the decision sees; pods were scraped 40 ms before it.
pub const NOW_MS: u64 = 1_700_000_000_000;

/// The plugin configuration: the filter's defaults, as Envoy would pass `{}`.
pub const FILTER_CONFIG: &str = "{}";

/// Entries in the warm prefix index: most of the filter's default budget (262,144).
pub const WARM_INDEX_ENTRIES: usize = 200_000;

/// KV capacity per pod in blocks (the simulator's small preset).
pub const POD_CAPACITY_BLOCKS: usize = 16_384;

/// Block size the pods report, in tokens.
pub const BLOCK_SIZE: u32 = 16;

/// Prompts recorded at most while warming (each adds up to 64 entries).
const MAX_WARM_PROMPTS: usize = 100_000;

/// Requests between two worker ticks (the filter ticks every 20 ms; at tens of µs per request
/// a busy worker serves far more than this in between, so this overstates the tick's share).
pub const PICKS_PER_SYNC: u32 = 32;

/// The tie-breaking and keyed-hashing seed of the benchmark's worker (fixed: runs compare).
pub const WORKER_SEED: u64 = 7;

/// `10.x.y.z:8000` for pod `i`: distinct literal addresses for any pool size.
pub fn pod_address(i: usize) -> String {
    let n = i + 1;
    format!("10.{}.{}.{}:8000", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// A table of `pods` healthy pods with queues, KV usage and running counts that differ.
pub fn pod_table(pods: usize) -> Result<PodTable, String> {
    let mut table = PodTable { version: 1, published_at_ms: NOW_MS, poll_interval_ms: 100, ..PodTable::default() };
    for i in 0..pods {
        let mut pod = PodState::unknown(&PodAddress::parse(&pod_address(i))?);
        pod.healthy = true;
        pod.waiting = (i % 7) as f64;
        pod.running = (i % 13) as f64 + 1.0;
        pod.kv_usage = Some(((i * 37) % 100) as f64 / 100.0);
        pod.block_size = Some(BLOCK_SIZE);
        pod.num_gpu_blocks = Some(POD_CAPACITY_BLOCKS as u64);
        pod.last_success_ms = NOW_MS - 40;
        table.pods.push(pod);
    }
    Ok(table)
}

/// Publishes `table` as the pool service does (table, then version) with its heartbeat.
pub fn publish(store: &dyn SharedStore, table: &PodTable) -> Result<(), String> {
    let writes = [
        (keys::POD_TABLE, table.encode()),
        (keys::POD_TABLE_VERSION, encode_version(table.version).to_vec()),
        (keys::SERVICE_HEARTBEAT, encode_version(NOW_MS).to_vec()),
    ];
    for (key, value) in writes {
        store.set(key, &value, None).map_err(|e| format!("publish {key}: {e:?}"))?;
    }
    Ok(())
}

/// In-flight counts for most pods (0..4 each), as another busy worker publishes them on its
/// tick (the benchmarked worker adds them to its view at its own next tick).
pub fn count_inflight(store: &dyn SharedStore, pods: usize, expiry_ms: u64) -> Result<(), String> {
    let mut other_worker = WorkerInflight::new();
    for i in 0..pods {
        for _ in 0..i % 5 {
            other_worker.started(&pod_address(i), 1, NOW_MS);
        }
    }
    if other_worker.sync(store, NOW_MS, expiry_ms).published {
        Ok(())
    } else {
        Err("the other worker's in-flight slot was not published".into())
    }
}

fn hashes_of(body: &str, endpoint: Endpoint, params: &HashParams) -> Result<Vec<u64>, String> {
    let request = parse_request(body.as_bytes(), endpoint).map_err(|e| e.to_string())?;
    let mut hashes = Vec::new();
    hash_prompt(&request, endpoint, params, &mut hashes).map_err(|e| e.to_string())?;
    Ok(hashes)
}

/// Warms a worker's prefix replica: unrelated prompts up to [`WARM_INDEX_ENTRIES`] (or what
/// the pool's KV capacity holds), then the request's own first half on every fourth pod.
pub fn warm_prefix(
    prefix: &mut WorkerPrefix,
    params: &HashParams,
    pods: usize,
    body: &str,
    endpoint: Endpoint,
) -> Result<(), String> {
    // Small pools cannot hold the whole warm set: their pods' KV capacity bounds them.
    let target = WARM_INDEX_ENTRIES.min(prefix.index().max_entries()).min(pods * POD_CAPACITY_BLOCKS * 9 / 10);
    for seed in 1_000_000..1_000_000 + MAX_WARM_PROMPTS as u64 {
        if prefix.index().len() >= target {
            break;
        }
        let hashes = hashes_of(&workload::completions_body(4096, seed), Endpoint::Completions, params)?;
        prefix.record_pick(&pod_address(seed as usize % pods.max(1)), 0, &hashes, None, POD_CAPACITY_BLOCKS);
        prefix.take_batch();
    }
    let hashes = hashes_of(body, endpoint, params)?;
    let half = hashes.get(..hashes.len() / 2).unwrap_or(&hashes);
    for i in (0..pods).step_by(4) {
        prefix.record_pick(&pod_address(i), 0, half, None, POD_CAPACITY_BLOCKS);
    }
    prefix.take_batch();
    Ok(())
}
