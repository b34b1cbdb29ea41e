#!/usr/bin/env python3
"""bench_tier.py — the second KV tier's benchmark (issue: a KV tier on host RAM / disk, warm restart).

    scripts/bench_tier.py [--bin build/kvserve] [--out bench-out/tier] [--threads 2] [--requests 24]
                          [--kv-dtype f16|bf16|f32|int8|fp8]

On the synthetic TinyLlama-110M-shaped Q8_0 model (written once with `kvserve mkmodel`, as the other
benchmarks do), with a KV pool that holds 3 prompts of 1,000 + 64 tokens:

  1. 12 distinct 1,000-token prefixes, each once (warm-up), then --requests requests cycling them in
     a random order, each with a fresh 64-token suffix: mean TTFT on a server without a tier, then
     on one with --kv-disk-dir (the same request sequence);
  2. a warm restart: SIGTERM that server (its drain must flush every pending write: the files on
     disk afterwards are exactly the blocks it counted), start it again on the same folder, and
     time a previously seen prefix (+ a new suffix) against a never seen one of the same length
     (cold), interleaved, --restart-pairs pairs;
  3. read-back bandwidth: bytes the disk tier read over the loads' time (kvserve_kv_tier_* in
     /metrics), against this machine's memcpy bandwidth (a 128 MiB buffer copy);
  4. a failing disk: a server whose file writes fail (RLIMIT_FSIZE below one block file, as a full
     disk fails them) answers every request and logs exactly one line turning the disk tier off.

cached_tokens in every response's usage is checked against the tier's hits. Prints a Markdown
table and writes OUT/results.json and the servers' logs. Python 3 standard library only; not a test
(timings depend on the machine) — every run is bounded (each request 300 s, each start 120 s).
"""
import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

PREFIX, SUFFIX, N_PREFIXES, POOL_PROMPTS = 1000, 64, 12, 3
OUT_TOKENS = 2
VOCAB = 32000
LAYERS, KV_HEADS, HEAD_DIM = 12, 12, 64  # the 110M shape


def kv_bytes_per_token(dtype):
    """The KV formula of docs/kv-cache.md: 2 × layers × kv heads × (head_dim × bytes per value [+ a 2-byte scale])."""
    vec = HEAD_DIM * {"f32": 4, "f16": 2, "bf16": 2}.get(dtype, 1) + (2 if dtype in ("int8", "fp8") else 0)
    return 2 * LAYERS * KV_HEADS * vec
BLOCK = 16


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """One `kvserve serve` process; stderr goes through a pipe (so a file-size limit on the server
    does not touch its log) into OUT/<name>.log."""

    def __init__(self, args, name, extra, fsize_limit=None):
        self.port = free_port()
        self.log_path = os.path.join(args.out, name + ".log")
        self.lines = []
        cmd = [args.bin, "serve", "-m", args.model, "--port", str(self.port), "--threads", str(args.threads),
               "--served-model-name", "tinyllama-110m-q8_0", "--kv-memory", str(args.kv_memory),
               "--max-model-len", "2048", "--kv-dtype", args.kv_dtype] + extra

        def limit():
            if fsize_limit is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored across exec: writes fail with EFBIG
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, resource.RLIM_INFINITY))
            os.nice(args.nice)

        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.target = bl.Target("http://127.0.0.1:%d" % self.port, 300.0)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise SystemExit("%s exited at start-up; see %s" % (name, self.log_path))
            try:
                if self.target.call("GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("%s did not become healthy in 120 s" % name)

    def _read(self):
        with open(self.log_path, "w") as f:
            for raw in self.p.stderr:
                line = raw.decode("utf-8", "replace")
                self.lines.append(line)
                f.write(line)
                f.flush()

    def wait_line(self, text, timeout=5.0):
        """The first log line containing text (waiting up to timeout for the reader), or None."""
        deadline = time.time() + timeout
        while True:
            for ln in list(self.lines):
                if text in ln:
                    return ln
            if time.time() > deadline:
                return None
            time.sleep(0.05)

    def metrics(self):
        st, data = self.target.call("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            m = re.match(r'^([a-zA-Z_:]+)\{([^}]*)\} (\S+)$', line)
            if not m:
                continue
            tier = re.search(r'tier="(\w+)"', m.group(2))
            le = re.search(r'le="([^"]+)"', m.group(2))
            key = m.group(1) + ("." + tier.group(1) if tier else "") + ("." + le.group(1) if le else "")
            out[key] = float(m.group(3))
        return out

    def stop(self, timeout=120):
        """SIGTERM (a graceful drain); returns (exit status, seconds to exit)."""
        t0 = time.perf_counter()
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.reader.join(5)
        return rc, time.perf_counter() - t0


def request(server, tokens):
    """TTFT (s) and usage of one streamed completion of token ids."""
    body = {"model": "tinyllama-110m-q8_0", "prompt": tokens, "max_tokens": OUT_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    r = bl.stream_request(server.target, "/v1/completions", body, False, 300.0)
    if not r["success"]:
        raise SystemExit("request failed: %s" % r["error"])
    usage = r["usage"] or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return r["content_times"][0] - r["t_start"], cached


def make_prompts(rng):
    prefixes = [[1] + [rng.randrange(3, VOCAB) for _ in range(PREFIX - 1)] for _ in range(N_PREFIXES)]
    return prefixes, lambda: [rng.randrange(3, VOCAB) for _ in range(SUFFIX)]


def cycle(server, prefixes, order, suffixes):
    """Warm-up (each prefix once), then the measured order. Returns the measured TTFTs and cached
    tokens."""
    for i, p in enumerate(prefixes):
        request(server, p + suffixes[("w", i)])
    ttft, cached = [], []
    for k, i in enumerate(order):
        t, c = request(server, prefixes[i] + suffixes[(k, i)])
        ttft.append(t)
        cached.append(c)
    return ttft, cached


def memcpy_gbps():
    n = 128 << 20
    a, b = bytearray(os.urandom(1 << 20) * 128), bytearray(n)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        b[:] = a
        best = max(best, n / (time.perf_counter() - t0))
    return best / 1e9


def count_files(root):
    n = 0
    for _, _, files in os.walk(root):
        n += sum(1 for f in files if f.endswith(".kvb"))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/kvserve")
    ap.add_argument("--out", default="bench-out/tier")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=24, help="measured requests per server")
    ap.add_argument("--restart-pairs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kv-dtype", default="f16", choices=["f16", "bf16", "f32", "int8", "fp8"])
    ap.add_argument("--nice", type=int, default=10, help="niceness of the servers")
    ap.add_argument("--workdir", default=os.environ.get("KVSERVE_BENCH_DIR",
                                                         os.path.join(tempfile.gettempdir(), "kvserve-bench")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.workdir, exist_ok=True)
    args.model = os.path.join(args.workdir, "110m-q8_0.gguf")
    if not os.path.exists(args.model) or os.path.getsize(args.model) == 0:
        print("writing", args.model, file=sys.stderr)
        subprocess.check_call([args.bin, "mkmodel", "-o", args.model, "--dim", "768", "--layers", "12", "--heads",
                               "12", "--kv-heads", "12", "--ffn", "2048", "--vocab", str(VOCAB), "--context", "2048",
                               "--type", "q8_0"], stdout=sys.stderr)
    # The pool: POOL_PROMPTS whole requests (prefix + suffix + output), in blocks.
    blocks = POOL_PROMPTS * -(-(PREFIX + SUFFIX + OUT_TOKENS) // BLOCK)
    args.kv_memory = blocks * BLOCK * kv_bytes_per_token(args.kv_dtype)
    rng = random.Random(args.seed)
    prefixes, suffix = make_prompts(rng)
    order = [rng.randrange(N_PREFIXES) for _ in range(args.requests)]
    suffixes = {("w", i): suffix() for i in range(N_PREFIXES)}
    suffixes.update({(k, i): suffix() for k, i in enumerate(order)})
    disk = os.path.join(args.workdir, "tier-files")
    shutil.rmtree(disk, ignore_errors=True)
    res = {"pool_blocks": blocks, "kv_memory_bytes": args.kv_memory, "threads": args.threads, "kv_dtype": args.kv_dtype,
           "requests": args.requests, "seed": args.seed}

    print("== 1. %d prefixes cycled, pool of %d blocks: no tier" % (N_PREFIXES, blocks), file=sys.stderr)
    s = Server(args, "no-tier", [])
    t_plain, c_plain = cycle(s, prefixes, order, suffixes)
    s.stop()
    print("== 1. the same with --kv-disk-dir", file=sys.stderr)
    s = Server(args, "disk-tier", ["--kv-disk-dir", disk])
    t_tier, c_tier = cycle(s, prefixes, order, suffixes)
    m = s.metrics()
    hits = m.get("kvserve_kv_tier_hit_tokens_total", 0)
    # cached_tokens counts tier hits: every measured request whose prefix came back says so
    res["cached_tokens_plain"], res["cached_tokens_tier"] = sum(c_plain), sum(c_tier)
    res["tier_hit_tokens"] = hits
    res["ttft_plain_s"] = sum(t_plain) / len(t_plain)
    res["ttft_tier_s"] = sum(t_tier) / len(t_tier)
    res["ttft_ratio"] = res["ttft_tier_s"] / res["ttft_plain_s"]
    res["disk_bytes_read"] = m.get("kvserve_kv_tier_bytes_read_total.disk", 0)
    res["host_bytes_read"] = m.get("kvserve_kv_tier_bytes_read_total.host", 0)
    res["load_seconds"] = m.get("kvserve_kv_tier_load_seconds_sum", 0)
    res["loads"] = m.get("kvserve_kv_tier_load_seconds_count", 0)

    # 2. a warm restart: a new prompt's writes are pending when SIGTERM arrives
    request(s, prefixes[0][:1] + [rng.randrange(3, VOCAB) for _ in range(PREFIX - 1)])
    gauge = s.metrics().get("kvserve_kv_tier_blocks.disk", -1)
    rc, drain_s = s.stop()
    files = count_files(disk)
    res["drain_exit"], res["drain_s"], res["files_expected"], res["files_after_drain"] = rc, drain_s, gauge, files
    print("== 2. restart on the same folder", file=sys.stderr)
    s = Server(args, "restarted", ["--kv-disk-dir", disk])
    found = s.wait_line("found from an earlier run")
    res["startup_line"] = found.strip() if found else None
    m = re.search(r"(\d+) found from an earlier run", found or "")
    res["files_found"] = int(m.group(1)) if m else -1
    warm, cold, warm_cached = [], [], []
    for k in range(args.restart_pairs):
        w, c = request(s, prefixes[(k * 5) % N_PREFIXES] + suffix())
        warm.append(w)
        warm_cached.append(c)
        fresh = [1] + [rng.randrange(3, VOCAB) for _ in range(PREFIX + SUFFIX - 1)]
        cold.append(request(s, fresh)[0])
    res["restart_warm_ttft_s"] = warm
    res["restart_cold_ttft_s"] = cold
    res["restart_warm_cached"] = warm_cached
    res["restart_ratio"] = (sum(warm) / len(warm)) / (sum(cold) / len(cold))
    s.stop()

    # 3. read-back bandwidth against memcpy
    res["memcpy_GBps"] = memcpy_gbps()
    res["readback_GBps"] = (res["disk_bytes_read"] / res["load_seconds"] / 1e9) if res["load_seconds"] else None

    # 4. a failing disk
    print("== 4. a disk whose writes fail", file=sys.stderr)
    bad = os.path.join(args.workdir, "tier-files-failing")
    shutil.rmtree(bad, ignore_errors=True)
    s = Server(args, "failing-disk", ["--kv-disk-dir", bad], fsize_limit=4096)
    for i in range(3):
        request(s, prefixes[i][:200] + suffix())
    m = s.metrics()
    s.stop()
    off = [ln for ln in s.lines if "turned off" in ln]
    res["failing_disk_log_lines"] = len(off)
    res["failing_disk_line"] = off[0].strip() if off else None
    res["failing_disk_up"] = m.get("kvserve_kv_tier_disk_up", -1)
    shutil.rmtree(bad, ignore_errors=True)

    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    ok = lambda b: "yes" if b else "NO"  # noqa: E731
    print("| TinyLlama-110M-shaped Q8_0, %s KV, %d threads, pool %d blocks (3 prompts) | value |" % (
        args.kv_dtype, args.threads, blocks))
    print("|---|---:|")
    print("| mean TTFT, %d requests over %d prefixes, no tier | %.3f s |" % (args.requests, N_PREFIXES,
                                                                            res["ttft_plain_s"]))
    print("| mean TTFT, the same with `--kv-disk-dir` | %.3f s (%.2f×) |" % (res["ttft_tier_s"], res["ttft_ratio"]))
    print("| cached_tokens without / with the tier (tier hits in /metrics) | %d / %d (%d) |" % (
        res["cached_tokens_plain"], res["cached_tokens_tier"], hits))
    print("| after SIGTERM + restart: seen prefix vs never seen, mean TTFT | %.3f s vs %.3f s (%.2f×) |" % (
        sum(warm) / len(warm), sum(cold) / len(cold), res["restart_ratio"]))
    print("| drain: exit %d in %.1f s; block files counted / on disk / found by the restart | %d / %d / %d: %s |" % (
        rc, drain_s, gauge, files, res["files_found"], ok(files == gauge == res["files_found"])))
    if res["readback_GBps"]:
        print("| disk tier read-back (%d MB in %d loads) vs memcpy | %.2f GB/s vs %.2f GB/s (%.0f%%) |" % (
            res["disk_bytes_read"] / 1e6, res["loads"], res["readback_GBps"], res["memcpy_GBps"],
            100 * res["readback_GBps"] / res["memcpy_GBps"]))
    print("| failing disk: requests answered, log lines turning it off, kvserve_kv_tier_disk_up | 3 of 3, %d, %d |" % (
        res["failing_disk_log_lines"], res["failing_disk_up"]))
    goals = res["ttft_ratio"] <= 0.3 and res["restart_ratio"] <= 0.3 and files == gauge == res["files_found"] and \
        res["failing_disk_log_lines"] == 1 and res["cached_tokens_tier"] >= hits > 0
    print("goals (TTFT ≤ 0.3× both, drain flushed, one log line, cached_tokens ≥ tier hits): %s" % ok(goals),
          file=sys.stderr)
    return 0 if goals else 1


if __name__ == "__main__":
    sys.exit(main())
