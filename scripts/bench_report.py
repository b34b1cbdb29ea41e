#!/usr/bin/env python3
"""bench_report.py OUTDIR — turns the bench_matrix.sh JSON results into docs/benchmarks.md's Markdown table
(OUTDIR/results.md) and a gnuplot script (OUTDIR/plot.gp) that plots output throughput and mean
TTFT against concurrency for the random 256/128 workload."""
import json
import os
import sys


def load(out, name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-out"
    rows = [
        ("random-c1", "random 256/128, concurrency 1"),
        ("random-c4", "random 256/128, concurrency 4"),
        ("random-c16", "random 256/128, concurrency 16"),
        ("shared-prefix-cache", "shared prefix 512+32/32, c 8, cache on"),
        ("shared-prefix-nocache", "shared prefix 512+32/32, c 8, cache off"),
        ("multi-turn", "multi-turn chat 8×4 turns, c 4"),
    ]
    lines = [
        "| workload | done | req/s | output tok/s | mean TTFT ms | p99 TTFT ms | mean TPOT ms | mean ITL ms | prefix hit rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, label in rows:
        r = load(out, name)
        if r is None:
            continue
        hit = r.get("prefix_cache_hit_rate")
        lines.append(
            f"| {label} | {r.get('completed')}/{r.get('completed', 0) + r.get('failed', 0)} "
            f"| {fmt(r.get('request_throughput'), 2)} | {fmt(r.get('output_throughput'))} "
            f"| {fmt(r.get('mean_ttft_ms'))} | {fmt(r.get('p99_ttft_ms'))} "
            f"| {fmt(r.get('mean_tpot_ms'))} | {fmt(r.get('mean_itl_ms'))} "
            f"| {fmt(hit, 3) if hit is not None else '-'} |"
        )
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "concurrency.dat"), "w") as f:
        f.write("# concurrency output_tok_s mean_ttft_ms\n")
        for c in (1, 4, 16):
            r = load(out, f"random-c{c}")
            if r:
                f.write(f"{c} {r.get('output_throughput', 0)} {r.get('mean_ttft_ms', 0)}\n")
    with open(os.path.join(out, "plot.gp"), "w") as f:
        f.write(f"""set terminal pngcairo noenhanced size 900,420 font ",10"
set output "{os.path.join(out, 'throughput_ttft.png')}"
set title "kvserve, TinyLlama-110M-shaped Q8_0, 2 threads, random 256 in / 128 out"
set xlabel "concurrent requests"
set logscale x 2
set xtics (1, 4, 16)
set xrange [0.8:20]
set yrange [0:*]
set y2range [0:*]
set ylabel "output tokens/s"
set y2label "mean TTFT (ms)"
set y2tics
set ytics nomirror
set key left top
set grid
plot "{os.path.join(out, 'concurrency.dat')}" using 1:2 with linespoints lw 2 pt 7 title "output tok/s" axes x1y1, \\
     "" using 1:3 with linespoints lw 2 pt 5 title "mean TTFT (ms)" axes x1y2
""")


if __name__ == "__main__":
    main()
