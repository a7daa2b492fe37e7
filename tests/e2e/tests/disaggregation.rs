//! Prefill/decode disaggregation end to end: the real Envoy with wasm-epp in front of prefill
//! and decode pods, whose simulated sidecar has the named prefill pod prefill the prompt.
//! Roles from the static configuration and from Kubernetes labels; the decider both ways; a model
//! its decode pods serve alone never sent to a prefill pod whose lists were cut; a
//! client's own `x-prefiller-host-port` never reaching a pod; a prefill pod killed under load;
//! a prefill pod free again once its prompts are prefilled, though their whole answers are not.

use std::time::{Duration, Instant};

use e2e::pd::{prompt_of_tokens, PdCluster, PREFILLER_HEADER};
use launcher::envoy::EnvoyOptions;
use launcher::fake_kube::envoy::{kubernetes_overlay, start_kube_envoy, write_token_sds, TokenDir};
use launcher::fake_kube::{FakeKube, FakePod};
use launcher::http;
use launcher::pods::Pod;
use serde_json::json;

const FAST: [&str; 2] = ["--time-scale", "0"];

fn served_by(reply: &launcher::http::Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.served_by().unwrap_or_default().to_string()
}

#[test]
fn roles_from_configuration_long_prompts_split_short_ones_not_and_forged_headers_go() {
    let cluster = PdCluster::start("pd-config", 2, 2, &FAST, json!({"threshold_tokens": 512}));
    let decode = cluster.decode_addresses();

    for seed in 0..4 {
        let pod = served_by(&cluster.complete(&prompt_of_tokens(2000, seed), 8, &[]));
        assert!(decode.contains(&pod), "destinations are decode pods: {pod}");
    }
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 4, "every long prompt was split");
    assert!(PdCluster::stat_sum(&cluster.prefill, "prompt_tokens") >= 8000, "the prefill pods computed them");
    assert_eq!(PdCluster::stat_sum(&cluster.prefill, "generation_tokens"), 4, "one token each");

    // The same prompt again: its decode pod holds it now (transferred), so no prefill hop. The
    // other Envoy worker learns that from the pool service's ring a few ticks later (~60 ms,
    // more on a loaded machine), and either worker may take the repeat.
    std::thread::sleep(Duration::from_millis(500));
    served_by(&cluster.complete(&prompt_of_tokens(2000, 0), 8, &[]));
    for i in 0..10 {
        let pod = served_by(&cluster.complete(&format!("short question {i}"), 8, &[]));
        assert!(decode.contains(&pod), "{pod}");
    }
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 4, "nothing else was split");
    // Flushed on the workers' ticks: on a busy machine a tick may come late.
    let counted = |name: &str, expected: f64| {
        launcher::wait_until(std::time::Duration::from_secs(3), || cluster.envoy.stat(name) == Some(expected))
    };
    assert!(counted("wasm_epp_pd_disaggregated", 4.0), "{:?}", cluster.envoy.stat("wasm_epp_pd_disaggregated"));
    assert!(counted("wasm_epp_pd_decode_only", 11.0), "{:?}", cluster.envoy.stat("wasm_epp_pd_decode_only"));

    // A client naming its own prefill pod: removed (by the template's header_mutation before
    // the plugin, and by the plugin itself, tested in router/tests), so no pod ever calls it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let forged = [(PREFILLER_HEADER, dead.as_str())];
    served_by(&cluster.complete("short with a forged header", 8, &forged));
    served_by(&cluster.complete(&prompt_of_tokens(2000, 99), 8, &forged));
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "prefill_fallbacks"), 0, "no pod saw the forged address");
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 5, "the long one used a real prefill pod");
}

#[test]
fn a_model_only_decode_pods_serve_is_not_sent_to_a_prefill_pod_with_cut_lists() {
    // The prefill pods serve sim-model and 100 adapters, more than the pool service keeps
    // (64): their lists are cut. The decode pods serve other-model alone. A prefill pod named
    // for other-model answers the sidecar 404 and the decode pod prefills after all.
    let adapters = (0..100).map(|i| format!("a{i}")).collect::<Vec<_>>().join(",");
    let prefill_args = [&FAST[..], &["--lora-adapters", &adapters]].concat();
    let decode_args = [&FAST[..], &["--model", "other-model"]].concat();
    let pd = json!({"threshold_tokens": 512});
    let cluster = PdCluster::start_apart("pd-cut", (2, &prefill_args), (1, &decode_args), pd);
    let cut = || cluster.envoy.stat("wasm_epp_pods_names_cut") == Some(2.0);
    assert!(launcher::wait_until(Duration::from_secs(10), cut), "{:?}", cluster.envoy.stat("wasm_epp_pods_names_cut"));
    // The model lists are published with the table that counted them; both workers take it.
    std::thread::sleep(Duration::from_millis(500));
    let body = json!({"model": "other-model", "prompt": prompt_of_tokens(2000, 7), "max_tokens": 4}).to_string();
    let reply = http::post(&cluster.envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30)).unwrap();
    assert_eq!(served_by(&reply), cluster.decode_addresses()[0]);
    assert_eq!(PdCluster::stat_sum(&cluster.prefill, "model_not_found"), 0, "no prefill pod was asked for it");
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "prefill_fallbacks"), 0);
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 0, "its decode pod prefilled it");
}

#[test]
fn roles_from_kubernetes_labels() {
    let dir = launcher::paths::run_dir("pd-kube").unwrap();
    let port = launcher::free_port().unwrap();
    let block = 77;
    let mut args = FAST.to_vec();
    let roles = ["prefill", "decode", "decode"];
    let pods: Vec<Pod> = roles
        .iter()
        .enumerate()
        .map(|(i, role)| {
            args.truncate(FAST.len());
            args.extend(["--role", role]);
            Pod::start_on(&format!("127.0.{block}.{}", i + 1), port, &args, &dir).unwrap()
        })
        .collect();
    let kube = FakeKube::start("llm").unwrap();
    kube.update(|state| {
        for (i, (pod, role)) in pods.iter().zip(roles).enumerate() {
            let labels = [("app", "vllm"), ("llm-d.ai/role", role)];
            state.put_pod(FakePod::ready(&format!("vllm-{i}"), &pod.host, &labels));
        }
    });
    let tokens = TokenDir::create(&dir.join("serviceaccount"), "token-1").unwrap();
    let sds = dir.join("kubernetes-token-sds.yaml");
    write_token_sds(&sds, &tokens.token_path()).unwrap();
    let (listen, admin) = (launcher::free_port().unwrap(), launcher::free_port().unwrap());
    let mut options = EnvoyOptions::for_pool(&[], listen, admin).with_original_dst();
    options.filter_config = json!({"fallback_destinations": 0, "pd": {"threshold_tokens": 512}});
    let kubernetes = json!({"namespace": "llm", "label_selector": "app=vllm", "target_port": port,
                            "relist_interval_ms": 200, "timeout_ms": 500});
    options.poller_config = Some(json!({ "kubernetes": kubernetes, "poll_interval_ms": 100 }));
    let overlay = kubernetes_overlay(kube.port(), &sds, tokens.dir());
    let envoy = start_kube_envoy(&options, &overlay, &dir).unwrap_or_else(|e| panic!("envoy: {e}"));
    assert!(envoy.wait_for_healthy_pods(3, Duration::from_secs(15)), "{}", envoy.log_tail(30));

    let complete = |prompt: &str| {
        let body = json!({"model": "sim-model", "prompt": prompt, "max_tokens": 4}).to_string();
        http::post(&envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30)).unwrap()
    };
    let prefill_pod = pods[0].address();
    for seed in 0..6 {
        assert_ne!(served_by(&complete(&prompt_of_tokens(1500, 100 + seed))), prefill_pod, "never a destination");
        assert_ne!(served_by(&complete(&format!("short {seed}"))), prefill_pod);
    }
    assert_eq!(PdCluster::pd_counter(&pods[1..], "remote_prefills"), 6, "the long prompts went through it");
    assert_eq!(PdCluster::stat_sum(&pods[..1], "generation_tokens"), 6);

    // Relabelled as a decode pod, it is a destination like the others and nothing is split.
    kube.update(|state| {
        state.update_pod("vllm-0", |pod| {
            pod.labels.insert("llm-d.ai/role".into(), "decode".into());
        })
    });
    assert!(launcher::wait_until(Duration::from_secs(10), || {
        (0..12).any(|i| served_by(&complete(&format!("after relabel {i}"))) == prefill_pod)
    }));
    // One worker saw the new table first; give the other its next tick (20 ms, later on a
    // loaded machine) before asking that nothing is split any more.
    std::thread::sleep(Duration::from_millis(500));
    let split = PdCluster::pd_counter(&pods[1..], "remote_prefills");
    served_by(&complete(&prompt_of_tokens(1500, 200)));
    assert_eq!(PdCluster::pd_counter(&pods, "remote_prefills"), split, "no prefill pod left: no split");
}

#[test]
fn a_prefill_pod_killed_under_load_loses_no_request() {
    // Real time at 1/20: prefills of 3,000 tokens take a few ms, decodes of 64 tokens ~50 ms.
    let cluster = PdCluster::start("pd-kill", 2, 2, &["--time-scale", "0.05"], json!({"threshold_tokens": 512}));
    let started = Instant::now();
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let (ok, failed, answered_at_kill) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4u64)
            .map(|worker| {
                let (cluster, answered) = (&cluster, &answered);
                scope.spawn(move || {
                    let (mut ok, mut failed) = (0, Vec::new());
                    for i in 0..40u64 {
                        let reply = cluster.complete(&prompt_of_tokens(3000, 1000 * worker + i), 64, &[]);
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if reply.status == 200 {
                            ok += 1;
                        } else {
                            failed.push(format!("{} {}", reply.status, reply.body));
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        // A quarter of the load answered, then the kill: a fixed pause let a fast machine
        // answer every request before it, and a kill after the load tests nothing.
        let count = || answered.load(std::sync::atomic::Ordering::SeqCst);
        assert!(launcher::wait_until(Duration::from_secs(60), || count() >= 40), "{} answered", count());
        let answered_at_kill = count();
        cluster.prefill[0].kill();
        let (ok, failed) =
            workers.into_iter().map(|w| w.join().unwrap()).fold((0, Vec::new()), |(ok, mut failed), (o, f)| {
                failed.extend(f);
                (ok + o, failed)
            });
        (ok, failed, answered_at_kill)
    });
    eprintln!(
        "MEASURED prefill pod killed under load: {ok} ok, {} failed in {} ms; decode-side fallbacks {}, split {}",
        failed.len(),
        started.elapsed().as_millis(),
        PdCluster::pd_counter(&cluster.decode, "prefill_fallbacks"),
        PdCluster::pd_counter(&cluster.decode, "remote_prefills"),
    );
    assert!(failed.is_empty(), "lost requests: {failed:?}");
    assert_eq!(ok, 160);
    assert!(answered_at_kill <= 120, "the kill came after {answered_at_kill} of 160 answers, not under load");
    assert!(PdCluster::stat_sum(&cluster.prefill[1..], "generation_tokens") > 0, "the survivor kept prefilling");
}

#[test]
fn a_prefill_pod_is_free_once_its_prompts_are_prefilled_though_their_whole_answers_are_not() {
    // Real time: a 2,000-token prefill takes ~70 ms, a 150-token decode ~2 s. Four such
    // prompts put 4,000 tokens on each prefill pod, past `max_prefill_tokens_ahead`; 800 ms
    // later their prefills are long done, their whole (non-streamed) answers are not. Held to
    // those answers' headers, both prefill pods looked backed up and the fifth prompt was
    // prefilled by its decode pod; held to the prefills' estimated ends, it is split.
    let pd = json!({"threshold_tokens": 512, "max_prefill_tokens_ahead": 3000});
    let cluster = PdCluster::start("pd-hold", 2, 2, &[], pd);
    std::thread::scope(|scope| {
        let decoding: Vec<_> = (0..4u64)
            .map(|seed| {
                let cluster = &cluster;
                // A little apart: each worker's pick is published before the next decision.
                std::thread::sleep(Duration::from_millis(20));
                scope.spawn(move || served_by(&cluster.complete(&prompt_of_tokens(2000, seed), 150, &[])))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(800));
        assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 4, "the four were split");
        assert!(decoding.iter().all(|answer| !answer.is_finished()), "their answers are still decoding");
        served_by(&cluster.complete(&prompt_of_tokens(2000, 4), 8, &[]));
        assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 5, "the fifth was split too");
        for answer in decoding {
            answer.join().unwrap();
        }
    });
    // Flushed on the workers' ticks.
    let split = || cluster.envoy.stat("wasm_epp_pd_disaggregated") == Some(5.0);
    assert!(
        launcher::wait_until(Duration::from_secs(3), split),
        "{:?}",
        cluster.envoy.stat("wasm_epp_pd_disaggregated")
    );
    assert_eq!(cluster.envoy.stat("wasm_epp_pd_prefill_backed_up").unwrap_or(0.0), 0.0, "none prefilled locally");
}

#[test]
fn a_model_only_prefill_pods_serve_is_served_whole_on_one_of_them() {
    // The prefill pods serve sim-model, the decode pod other-model alone. A sim-model request
    // was the gateway's 404; the prefill pods are whole servers, so one of them answers it,
    // with no split (its decode pod would not know the model).
    let decode_args = [&FAST[..], &["--model", "other-model"]].concat();
    let pd = json!({"threshold_tokens": 512});
    let cluster = PdCluster::start_apart("pd-prefill-only", (2, &FAST), (1, &decode_args), pd);
    let prefill: Vec<String> = cluster.prefill.iter().map(Pod::address).collect();
    let post = |model: &str, seed| {
        let body = json!({"model": model, "prompt": prompt_of_tokens(2000, seed), "max_tokens": 4}).to_string();
        http::post(&cluster.envoy.url("/v1/completions"), &[], &body, Duration::from_secs(30)).unwrap()
    };
    // Once the pool service has read the pods' model lists, the decode pod is known not to
    // serve sim-model: it must still be answered, on a prefill pod.
    let known = || cluster.envoy.stat("wasm_epp_pd_served_on_prefill_pods").is_some_and(|n| n >= 1.0);
    let served_on_prefill = || {
        let reply = post("sim-model", 1);
        reply.status == 200 && prefill.contains(&served_by(&reply))
    };
    let served = launcher::wait_until(Duration::from_secs(10), || served_on_prefill() && known());
    assert!(served, "{}", cluster.envoy.log_tail(20));
    let reply = post("sim-model", 2);
    assert_eq!((reply.status, prefill.contains(&served_by(&reply))), (200, true));
    assert_eq!(PdCluster::pd_counter(&cluster.decode, "remote_prefills"), 0, "never split");
    assert_eq!(post("nobody", 3).status, 404, "a name no pod lists is still the gateway's 404");
}
