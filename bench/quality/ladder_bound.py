#!/usr/bin/env python3
"""TTFT floor of workload (g)'s top stage for any router that keeps each system prompt on one pod.

One pod under the simulator's step model (simulator/src/latency.rs, engine/step.rs: decodes
first, then prefill chunks, then FCFS admissions within 8,192 tokens and 16 running sequences;
a request's first token leaves `api_overhead_ms` after the step that finishes its prompt),
Poisson arrivals at the top stage's rate per pod, and *every* request a cache hit (6,000
tokens cached, 1,200 computed, 32 out). No router that keeps a prompt on one pod does better:
it can only choose which pod a prompt lives on, and a move is a 7,200-token prefill (720 ms,
above any p90 that matters here). `--cold-share` adds misses (evictions) at random.

    python3 bench/quality/ladder_bound.py            # rates around the top stage's 16.7 / 4 req/s
    python3 bench/quality/ladder_bound.py --cold-share 0.02
"""

import argparse
import random

# Small preset, workload (g)'s flags (bench/quality/src/workload/ladder.rs).
DECODE_BASE_MS, PER_SEQ_MS, PREFILL_MS, CACHED_MS, CONTEXT_MS_PER_K, API_MS = 13.0, 0.5, 0.1, 0.001, 0.04, 30.0
BUDGET, MAX_SEQS, SYSTEM, QUESTION, OUTPUT = 8192, 16, 6000, 1200, 32


def one_pod(rate_per_s, seconds, seed, cold_share):
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    while t < seconds * 1000.0:
        t += rng.expovariate(rate_per_s) * 1000.0
        arrivals.append(t)
    now, waiting, running, ttfts, next_arrival = 0.0, [], [], [], 0
    while next_arrival < len(arrivals) or waiting or running:
        while next_arrival < len(arrivals) and arrivals[next_arrival] <= now:
            cold = rng.random() < cold_share
            # [prompt tokens left to compute, tokens generated, arrival, tokens found cached]
            waiting.append([SYSTEM + QUESTION if cold else QUESTION, 0, arrivals[next_arrival], 0 if cold else SYSTEM])
            next_arrival += 1
        if not waiting and not running:
            now = arrivals[next_arrival]
            continue
        budget, decodes, computed, cached, context = BUDGET, 0, 0, 0, 0
        for seq in running:
            if seq[0] == 0:
                decodes, budget, context = decodes + 1, budget - 1, context + SYSTEM + QUESTION + seq[1]
        for seq in running:
            if seq[0] > 0 and budget > 0:
                n = min(seq[0], budget)
                seq[0], budget, computed, context = seq[0] - n, budget - n, computed + n, context + SYSTEM + QUESTION
        while waiting and len(running) < MAX_SEQS and budget > 0:
            seq = waiting.pop(0)
            n = min(seq[0], budget)
            seq[0], budget, computed, cached = seq[0] - n, budget - n, computed + n, cached + seq[3]
            context += SYSTEM + QUESTION
            seq[1] = -1  # admitted this step: no token sampled before it
            running.append(seq)
        now += DECODE_BASE_MS + PER_SEQ_MS * decodes + PREFILL_MS * computed + CACHED_MS * cached
        now += CONTEXT_MS_PER_K * context / 1000.0
        for seq in running:
            if seq[0] == 0:
                if seq[1] <= 0 and seq[2] is not None:
                    ttfts.append(now + API_MS - seq[2])
                    seq[2] = None
                seq[1] = max(seq[1], 0) + 1
        running = [seq for seq in running if seq[1] < OUTPUT]
    ttfts.sort()
    return [ttfts[int(q * len(ttfts))] for q in (0.5, 0.9, 0.99)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2.5,3.5,4.175,4.6", help="requests/s per pod")
    parser.add_argument("--cold-share", type=float, default=0.0, help="share of requests that miss")
    parser.add_argument("--seconds", type=float, default=3000.0)
    args = parser.parse_args()
    for rate in (float(r) for r in args.rates.split(",")):
        p50, p90, p99 = one_pod(rate, args.seconds, 1, args.cold_share)
        print(f"{rate:5.2f} req/s per pod, {args.cold_share:.0%} cold: TTFT p50 {p50:.0f}  p90 {p90:.0f}  p99 {p99:.0f} ms")


if __name__ == "__main__":
    main()
