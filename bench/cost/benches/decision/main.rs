//! One request through wasm-epp's shipped request path (`wasm_epp_router`), natively, on a
//! `MockHost`: what the filter computes per request, without Envoy.
//!
//! `decision` is the body parse and the router's decision (`wasm_epp_router::decision::decide`:
//! table and in-flight read, prefix block hashes, Filter → Score → Pick with a warm prefix
//! index, the pick recorded in the prefix replica and counted in flight) for completions and
//! chat prompts of 1, 4, 32 and 128 KB and pools of 8, 64 and 256 pods; its in-flight release
//! runs between iterations, untimed. `filter_path` is the whole `RequestStream` as Envoy drives
//! it: headers (client destination headers checked, request held), body read from the host,
//! decision, destination header written, `on_log` (in-flight release), and the worker's tick
//! every 32 requests. `step` times each step alone, to show where the time goes (among them
//! `observe_answer`: a whole 4 KB answer's `usage` scan, plain and sent gzip). The state is
//! built by `bench_cost::native`; no step of the pipeline is copied here.
//!
//! `decision_pd` is the decision under P/D with 8, 64 and 256 prefill pods (both picks).
//!
//! `many_names` is what the pool service's `max_names_per_pod` costs: a table of 64 pods
//! registering 64 or 512 adapters decoded and indexed by a worker, and a pod's names read by
//! the pool service per scrape.
//!
//! A counting global allocator reports allocations per call; the medians and allocation
//! counts are merged into `bench/results/cost.json` (benchmark `native_decision`).
//! Run: `cargo bench -p bench-cost` (filter: `cargo bench -p bench-cost -- decision/chat`).

mod measure;

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use bench_cost::native::{self, Case, NOW_MS};
use bench_cost::results::Results;
use criterion::{BenchmarkId, Criterion};
use measure::{allocations_between, allocations_of, criterion_median_us, time_between};
use picker::inflight::WorkerInflight;
use picker::learn::UsageScanner;
use picker::pod_table::PodTable;
use picker::prefix::hash_prompt;
use picker::random::TieBreaker;
use picker::request::{parse_request, Endpoint};
use wasm_epp_router::answer_encoding::{ContentEncoding, Inflater};

const PROMPT_KB: [usize; 4] = [1, 4, 32, 128];
const POOLS: [usize; 3] = [8, 64, 256];
/// 16 and 64 as in the first figures; 256 since the decision is timed at 256 too.
const FILTER_PATH_POOLS: [usize; 3] = [16, 64, 256];
const ENDPOINTS: [(Endpoint, &str); 2] = [(Endpoint::Completions, "completions"), (Endpoint::ChatCompletions, "chat")];

struct Measured {
    group: &'static str,
    id: String,
    allocations: (u64, u64),
}

fn bench_decisions(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("decision");
    for (endpoint, endpoint_name) in ENDPOINTS {
        for kb in PROMPT_KB {
            for pods in POOLS {
                let case = Case::new(endpoint, kb, pods)?;
                decision_in(&mut group, "decision", format!("{endpoint_name}/{kb}KB/{pods}pods"), &case, measured)?;
            }
        }
    }
    group.finish();
    Ok(())
}

fn bench_filter_path(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("filter_path");
    for kb in PROMPT_KB {
        for pods in FILTER_PATH_POOLS {
            let case = Case::new(Endpoint::Completions, kb, pods)?;
            let id = format!("completions/{kb}KB/{pods}pods");
            case.request().map_err(|e| format!("filter path {id}: {e}"))?;
            let destination = case.destination().ok_or(format!("filter path {id} wrote no destination"))?;
            if !destination.starts_with("10.") {
                return Err(format!("filter path {id} routed to {destination}"));
            }
            let mut next = || case.next_request();
            let mut request = || {
                black_box(case.request().is_ok());
            };
            let allocations = allocations_between(&mut next, &mut request);
            group.bench_function(BenchmarkId::from_parameter(&id), |b| time_between(b, &mut next, &mut request));
            if let Some(reply) = case.host.replies.borrow().first() {
                return Err(format!("filter path {id} answered locally: {}", reply.status));
            }
            measured.push(Measured { group: "filter_path", id, allocations });
        }
    }
    group.finish();
    Ok(())
}

/// Each step alone, at 64 pods: parse, hash, choose (with the prefix lookup), in-flight
/// read and update; choose also at 8 and 256 pods, and the pod table's decode at each.
fn bench_steps(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("step");
    let mut step = |group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
                    id: String,
                    f: &mut dyn FnMut()| {
        let allocations = allocations_of(&mut *f);
        group.bench_function(&id, |b| b.iter(&mut *f));
        measured.push(Measured { group: "step", id, allocations });
    };
    for (endpoint, endpoint_name) in ENDPOINTS {
        for kb in PROMPT_KB {
            let case = Case::new(endpoint, kb, 64)?;
            let body = case.body.as_bytes();
            step(&mut group, format!("parse/{endpoint_name}/{kb}KB"), &mut || {
                black_box(parse_request(body, endpoint).is_ok());
            });
            let request = parse_request(body, endpoint).map_err(|e| e.to_string())?;
            step(&mut group, format!("hash/{endpoint_name}/{kb}KB"), &mut || {
                let mut hashes = Vec::new();
                black_box(hash_prompt(&request, endpoint, &case.params, &mut hashes).ok());
            });
            let mut hashes = Vec::new();
            let _ = hash_prompt(&request, endpoint, &case.params, &mut hashes);
            let prefix = case.worker.prefix.try_borrow().map_err(|e| e.to_string())?;
            let mut random = TieBreaker::new(7);
            let id = format!("choose/{endpoint_name}/{kb}KB/64pods/{}blocks", hashes.len());
            step(&mut group, id, &mut || {
                black_box(case.choose(&prefix, &hashes, &mut random));
            });
        }
    }
    for pods in POOLS {
        let case = Case::new(Endpoint::Completions, 4, pods)?;
        let request = parse_request(case.body.as_bytes(), case.endpoint).map_err(|e| e.to_string())?;
        let mut hashes = Vec::new();
        let _ = hash_prompt(&request, case.endpoint, &case.params, &mut hashes);
        let prefix = case.worker.prefix.try_borrow().map_err(|e| e.to_string())?;
        let mut random = TieBreaker::new(7);
        step(&mut group, format!("choose_by_pool/completions/4KB/{pods}pods/{}blocks", hashes.len()), &mut || {
            black_box(case.choose(&prefix, &hashes, &mut random));
        });
        // In-flight counting per request is now in the worker's memory (start and finish);
        // the shared-data work moved to the tick (one slot write, one read per worker).
        let address = native::pod_address(0);
        let mut counts = WorkerInflight::new();
        step(&mut group, format!("inflight_start_finish/{pods}pods"), &mut || {
            counts.started(&address, 1, NOW_MS);
            counts.finished(&address, 1, NOW_MS);
            black_box(counts.count(&address));
        });
        // A worker decodes the table each time the singleton publishes one (every poll).
        let encoded = native::pod_table(pods)?.encode();
        step(&mut group, format!("table_decode/{pods}pods"), &mut || {
            black_box(PodTable::decode(&encoded).is_ok());
        });
        let store = &case.host;
        let mut ticking = WorkerInflight::new();
        step(&mut group, format!("inflight_tick_sync/{pods}pods"), &mut || {
            black_box(ticking.sync(store, NOW_MS, 60_000).published);
        });
    }
    // A whole 4 KB JSON answer's observation: the `usage` scan of the plain answer, and of
    // the same answer sent gzip (its decoder made, the answer inflated, then scanned).
    let answer = answer_json(4 * 1024);
    let gzipped = gzip(&answer);
    step(&mut group, format!("observe_answer/identity/{}B", answer.len()), &mut || {
        let mut scanner = UsageScanner::default();
        scanner.feed(&answer);
        black_box(scanner.usage());
    });
    step(&mut group, format!("observe_answer/gzip/{}B_to_{}B", gzipped.len(), answer.len()), &mut || {
        let mut scanner = UsageScanner::default();
        if let Some(mut inflater) = Inflater::new(ContentEncoding::Gzip) {
            let mut plain = Vec::new();
            if inflater.inflate(&gzipped, &mut plain).is_ok() {
                scanner.feed(&plain);
            }
        }
        black_box(scanner.usage());
    });
    // The singleton's side: one scrape of a vLLM-shaped page, parsed.
    let page = bench_cost::metrics_page::vllm_page(3);
    step(&mut group, format!("metrics_parse/vllm_page_{}B", page.len()), &mut || {
        black_box(picker::metrics_text::parse_engine_metrics(&page, picker::models::DEFAULT_NAMES_PER_POD).is_ok());
    });
    group.finish();
    Ok(())
}

/// Issue 15's budget: the decision with model filtering and LoRA tiers on 64 pods serving 32
/// adapters each, against the same decision with no model asked (today's path), same prompt.
fn bench_models(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("decision_models");
    let cases = [
        ("completions/1KB/64pods/no_model", Case::new(Endpoint::Completions, 1, 64)?),
        ("completions/1KB/64pods/32adapters", Case::with_adapters(Endpoint::Completions, 1, 64, 32)?),
    ];
    for (id, case) in cases {
        decision_in(&mut group, "decision_models", id.to_owned(), &case, measured)?;
    }
    // Once per published table and worker (about 10 per second), not per decision.
    let table = bench_cost::native::adapter_table(64, 32)?;
    let mut build = || {
        black_box(picker::models::index::ModelIndex::build(&table, &|_| true));
    };
    let allocations = allocations_of(&mut build);
    group.bench_function("model_index_build/64pods/32adapters", |b| b.iter(&mut build));
    measured.push(Measured { group: "decision_models", id: "model_index_build/64pods/32adapters".into(), allocations });
    group.finish();
    Ok(())
}

/// P/D's second pick on a pool of many prefill pods: the decision (decode pick, decider,
/// prefill pick comparing the ranked prefill pods by work) with 8, 64 and 256 prefill pods
/// beside 8 decode pods, a 32 KB prompt (about 8,000 tokens: always split): what the bound on
/// prefill pods compared (`PREFILL_PODS_COMPARED` in router/src/disaggregate.rs) costs.
fn bench_pd(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("decision_pd");
    for prefill_pods in [8, 64, 256] {
        let case = Case::with_pd(Endpoint::Completions, 32, prefill_pods, 8)?;
        let id = format!("completions/32KB/{prefill_pods}prefill_8decode");
        decision_in(&mut group, "decision_pd", id, &case, measured)?;
    }
    group.finish();
    Ok(())
}

/// What raising the pool service's `max_names_per_pod` costs (docs/configuration.md): every
/// worker decodes each published table and builds its model index from it (about 10 times a
/// second), and the pool service parses each pod's names on every scrape. 64 pods registering
/// 64 (the default bound) and 512 adapters each, two resident.
fn bench_many_names(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("many_names");
    for adapters in [64, 512] {
        let table = bench_cost::native::adapter_table(64, adapters)?;
        let encoded = table.encode();
        let decoded = PodTable::decode(&encoded)?;
        if decoded.pods.iter().any(|pod| pod.adapters.len() != adapters || pod.names_cut) {
            return Err(format!("many_names: the decoded table of {adapters} adapters lost names"));
        }
        println!("many_names: a table of 64 pods with {adapters} adapters each is {} bytes", encoded.len());
        let cases: [(String, &mut dyn FnMut()); 3] = [
            (format!("table_decode/64pods/{adapters}adapters"), &mut || {
                black_box(PodTable::decode(&encoded).is_ok());
            }),
            (format!("model_index_build/64pods/{adapters}adapters"), &mut || {
                black_box(picker::models::index::ModelIndex::build(&decoded, &|_| true));
            }),
            (format!("table_decode_and_index/64pods/{adapters}adapters"), &mut || {
                let table = PodTable::decode(&encoded).unwrap_or_default();
                black_box(picker::models::index::ModelIndex::build(&table, &|_| true));
            }),
        ];
        for (id, run) in cases {
            step_in(&mut group, "many_names", id, run, measured);
        }
        // A pod under load lists many adapters waiting, and its running ones: the index build
        // must not search one list per name of another.
        let mut busy = decoded.clone();
        for pod in &mut busy.pods {
            pod.waiting_loras = pod.adapters.clone();
            pod.running_loras = pod.adapters.iter().rev().take(adapters / 2).cloned().collect();
        }
        step_in(
            &mut group,
            "many_names",
            format!("model_index_build/64pods/{adapters}adapters_all_waiting_half_running"),
            &mut || {
                black_box(picker::models::index::ModelIndex::build(&busy, &|_| true));
            },
            measured,
        );
        // The pool service, per pod and scrape: the page's names parsed and merged with the
        // pod's last `/v1/models` list.
        let (page, catalog) = bench_cost::metrics_page::page_naming_adapters(adapters);
        let catalog = picker::models::catalog::parse_catalog(catalog.as_bytes(), 1 << 20, adapters)?;
        let mut state = decoded.pods.first().cloned().ok_or("many_names: no pod")?;
        step_in(
            &mut group,
            "many_names",
            format!("pool_service_scrape_names/{adapters}adapters"),
            &mut || {
                let metrics = picker::metrics_text::parse_engine_metrics(&page, adapters).unwrap_or_default();
                state.set_names(metrics.lora, metrics.models, Some(&catalog), adapters);
                black_box(state.adapters.len());
            },
            measured,
        );
    }
    group.finish();
    Ok(())
}

/// `case`'s decision timed as `id` in `group`, its in-flight release run between calls,
/// untimed; after one decision that must route. Its allocations per call go to `measured`.
fn decision_in(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group_name: &'static str,
    id: String,
    case: &Case,
    measured: &mut Vec<Measured>,
) -> Result<(), String> {
    if case.decide().is_none() {
        return Err(format!("{group_name} {id} chose nothing"));
    }
    let mut settle = || case.settle_decision();
    let mut decide = || {
        black_box(case.decide());
    };
    let allocations = allocations_between(&mut settle, &mut decide);
    group.bench_function(BenchmarkId::from_parameter(&id), |b| time_between(b, &mut settle, &mut decide));
    case.settle_decision();
    measured.push(Measured { group: group_name, id, allocations });
    Ok(())
}

fn step_in(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    group_name: &'static str,
    id: String,
    run: &mut dyn FnMut(),
    measured: &mut Vec<Measured>,
) {
    let allocations = allocations_of(run);
    group.bench_function(BenchmarkId::from_parameter(&id), |b| b.iter(&mut *run));
    measured.push(Measured { group: group_name, id, allocations });
}

/// Flow control's release scan at its worst (every waiting request looked at, none may go:
/// one model's pods full, the other's with room), by queue length (the scan stops at 4,096),
/// and with the gateway's subset hint on every request.
fn bench_flow_scan(c: &mut Criterion, measured: &mut Vec<Measured>) -> Result<(), String> {
    let mut group = c.benchmark_group("flow_scan");
    let cases = [(1_024, false), (4_096, false), (16_384, false), (4_096, true)];
    for (waiting, hinted) in cases {
        let scan = bench_cost::native::FlowScan::new(64, waiting, hinted)?;
        let id = format!("64pods/{waiting}waiting{}", if hinted { "/hinted" } else { "" });
        let mut once = || scan.scan();
        let allocations = allocations_of(&mut once);
        group.bench_function(&id, |b| b.iter(&mut once));
        if scan.waiting() != waiting {
            return Err(format!("flow_scan {id}: the scan released a request"));
        }
        measured.push(Measured { group: "flow_scan", id, allocations });
    }
    group.finish();
    Ok(())
}

/// A whole completions answer of about `bytes` bytes, its generated text words of a small
/// vocabulary (compresses ~4:1, as English text does), `usage` last.
fn answer_json(bytes: usize) -> Vec<u8> {
    let words = ["the", "model", "answers", "with", "tokens", "of", "text", "and", "cache", "prefix"];
    let mut text = String::new();
    let mut seed = 7_u32;
    while text.len() < bytes.saturating_sub(300) {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        text.push_str(words.get((seed >> 16) as usize % words.len()).copied().unwrap_or("a"));
        text.push(' ');
    }
    format!(
        r#"{{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"m","choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":"length"}}],"usage":{{"prompt_tokens":812,"total_tokens":1836,"completion_tokens":1024,"prompt_tokens_details":{{"cached_tokens":768}}}}}}"#
    )
    .into_bytes()
}

/// `plain` as a gzip member (its CRC is not read by the plugin: zeros).
fn gzip(plain: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    bytes.extend(miniz_oxide::deflate::compress_to_vec(plain, 6));
    bytes.extend([0; 8]);
    bytes
}

fn summarise(measured: &[Measured], since: SystemTime) -> Result<(), String> {
    let mut results = Results::default();
    println!("\nnative decision cost (median from criterion, allocations of one call):");
    println!("  {:<58} {:>10} {:>8} {:>10}", "case (measured in this run)", "median µs", "allocs", "bytes");
    for m in measured {
        let Some(median) = criterion_median_us(m.group, &m.id, since) else { continue };
        let case = format!("{}/{}", m.group, m.id);
        let (count, bytes) = m.allocations;
        println!("  {case:<58} {median:>10.2} {count:>8} {bytes:>10}");
        results.push("native_decision", &case, "median_time", median, "us");
        results.push("native_decision", &case, "allocations", count as f64, "count");
        results.push("native_decision", &case, "allocated_bytes", bytes as f64, "bytes");
    }
    let path = bench_cost::results::default_path();
    results.merge_into(&path)?;
    println!("  merged into {}; reproduce: cargo bench -p bench-cost", path.display());
    Ok(())
}

fn main() {
    let since = SystemTime::now() - Duration::from_secs(1);
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(30)
        .configure_from_args();
    let mut measured = Vec::new();
    let outcome = bench_pd(&mut criterion, &mut measured)
        .and_then(|()| bench_models(&mut criterion, &mut measured))
        .and_then(|()| bench_many_names(&mut criterion, &mut measured))
        .and_then(|()| bench_decisions(&mut criterion, &mut measured))
        .and_then(|()| bench_filter_path(&mut criterion, &mut measured))
        .and_then(|()| bench_steps(&mut criterion, &mut measured))
        .and_then(|()| bench_flow_scan(&mut criterion, &mut measured));
    criterion.final_summary();
    let outcome = outcome.and_then(|()| summarise(&measured, since));
    if let Err(error) = outcome {
        eprintln!("decision bench: {error}");
        std::process::exit(1);
    }
}
