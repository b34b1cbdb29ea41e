#!/usr/bin/env python3
"""cluster_e2e.py KVSERVE_BIN — scale-out end to end: scripts/cluster, config/haproxy.cfg and
scripts/bench_serving together, on loopback, with free ports and a generated model.

1. Affinity. The multi-turn (chat) and shared-prefix (completions) workloads run through HAProxy
   in front of 1 replica, then 3: with 3, the aggregate prefix hit rate from the responses' usage
   must be at least 0.9x the single replica's on the same workload (same seed, so the same
   prompts), for the body key and for x-session-id, with every replica serving some of the
   conversations. Round-robin runs the multi-turn workload for contrast and must do worse.
2. Drain. A long stream is pinned (by its x-session-id) to replica 1 and the replica gets
   SIGTERM in the middle of a benchmark run: it answers 503 on /health and HAProxy marks it DOWN
   while it is still alive, the long stream completes, the replica exits 0, and no benchmark
   request fails except with a 503 before any token.
3. Crash. A long stream is pinned to replica 2, which is killed with SIGKILL mid-run: only
   requests it had in flight fail (the long stream among them), none sent after the kill fails,
   HAProxy marks it DOWN, and new requests go to the replica left.
Prints one line per measurement and "cluster e2e: ok" at the end; exit 1 on the first failure.
Each wait has a deadline; the whole run takes a few tens of seconds. KVSERVE_E2E_KEEP=1 keeps
the cluster logs and the benchmark JSON (their folder is printed).
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "kvserve")
TMP = tempfile.mkdtemp(prefix="kvserve-cluster-e2e-")
CONTEXT = 8192
# Small enough to run in milliseconds per request, two workloads the prefix cache can help.
MT = ["--dataset", "multi-turn", "--endpoint", "chat", "--mt-num-conversations", "12",
      "--mt-turns", "4", "--mt-question-len", "32", "--mt-output-len", "16", "--max-concurrency", "4"]
SP = ["--dataset", "shared-prefix", "--gsp-num-groups", "6", "--gsp-prompts-per-group", "6",
      "--gsp-system-prompt-len", "256", "--gsp-question-len", "24", "--gsp-output-len", "8",
      "--max-concurrency", "6"]
# Long enough to be in flight when a replica is signalled: more conversations, longer answers.
MT_LONG = ["--dataset", "multi-turn", "--endpoint", "chat", "--mt-num-conversations", "24",
           "--mt-turns", "4", "--mt-question-len", "32", "--mt-output-len", "96",
           "--max-concurrency", "6"]


def log(msg):
    print(msg, flush=True)


def check(cond, msg):
    if not cond:
        log("FAIL: " + msg)
        raise SystemExit(1)


def wait_for(pred, what, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    check(False, "timed out after %.0f s waiting for %s" % (timeout_s, what))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostport(url):
    h, p = url.split("//", 1)[1].rstrip("/").split(":")
    return h, int(p)


def request(url, method, path, body=None, headers=None, timeout=30):
    """(status, headers dict, body bytes); status None when the server cannot be reached."""
    c = http.client.HTTPConnection(*hostport(url), timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers=dict({"Content-Type": "application/json"},
                                                        **(headers or {})))
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException):
        return None, {}, b""
    finally:
        c.close()


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


STARTED = []  # every Cluster, so that a failed check still stops them (main's finally)


class Cluster:
    def __init__(self, n, tag, balance="hash"):
        self.info_path = os.path.join(TMP, "info-%s.json" % tag)
        self.log_path = os.path.join(TMP, "cluster-%s.log" % tag)
        argv = [sys.executable, os.path.join(ROOT, "scripts", "cluster"), "-n", str(n),
                "-m", MODEL, "--port", str(free_port()), "--balance", balance, "-t", "2",
                "--kvserve", BIN, "--info", self.info_path, "--kv-memory", "64MiB",
                "--drain-timeout", "90"]  # the pinned stream may take long on a busy machine
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        STARTED.append(self)
        wait_for(lambda: os.path.exists(self.info_path) or self.p.poll() is not None,
                 "cluster -n %d to come up" % n, 60)
        check(self.p.poll() is None, "cluster exited early:\n" + self.tail())
        with open(self.info_path) as f:
            self.info = json.load(f)
        # The announced lines: one per replica, then the balancer.
        lines = [self.p.stdout.readline().strip() for _ in range(n + 1)]
        for k, r in enumerate(self.info["replicas"]):
            check(lines[k] == "replica %d: %s" % (k + 1, r["url"]), "announced %r" % lines[k])
        check(lines[n] == "balancer: " + self.info["balancer"], "announced %r" % lines[n])
        self.url = self.info["balancer"]

    def tail(self):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-30:])

    def replica(self, k):
        return self.info["replicas"][k]

    def stats(self):
        """HAProxy's view of the replicas: {name: {CSV column: value}} from the stats page."""
        st, _, data = request(self.info["stats"], "GET", "/;csv")
        if st != 200:
            return {}
        rows = [line.split(",") for line in data.decode().splitlines() if line]
        head = rows[0]
        head[0] = head[0].lstrip("# ")
        return {r[1]: dict(zip(head, r)) for r in rows[1:]
                if r[0] == "replicas" and r[1].startswith("replica")}

    def status(self):
        """{replica name: UP, DOWN, ...}."""
        return {k: v["status"] for k, v in self.stats().items()}

    def kill(self):
        """After a failure: SIGTERM, then SIGKILL of the cluster script (whose children follow
        it through their parent-death signal)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(40)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = "killed after 40 s"
        self.log.close()
        check(rc == 0, "cluster exit status %s after SIGTERM:\n%s" % (rc, self.tail()))


def bench(url, args, seed, tag, extra=()):
    out = os.path.join(TMP, "%s.json" % tag)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_serving"),
                        "--base-url", url, "--seed", str(seed), "--ignore-eos", "--timeout", "60",
                        "--max-duration", "60", "--save-json", out] + list(args) + list(extra),
                       capture_output=True, text=True, timeout=120)
    check(os.path.exists(out), "bench_serving %s wrote nothing:\n%s" % (tag, p.stderr[-2000:]))
    with open(out) as f:
        return json.load(f)


class LongStream(threading.Thread):
    """A streamed completion of most of the context (two choices), sent through the balancer
    with an x-session-id; records its status, the replica and whether it reached [DONE]."""

    def __init__(self, url, session):
        super().__init__(daemon=True)
        self.url, self.session = url, session
        self.status = self.replica = None
        self.chunks, self.done, self.started = 0, False, threading.Event()

    def run(self):
        c = http.client.HTTPConnection(*hostport(self.url), timeout=60)
        # Two choices of most of the context: several seconds even on a fast CPU, so that
        # HAProxy's health check (down within about 1.25 s) sees the drain before it ends.
        body = {"prompt": "Once upon a time", "max_tokens": CONTEXT - 64, "n": 2,
                "ignore_eos": True, "stream": True}
        try:
            c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json", "x-session-id": self.session})
            r = c.getresponse()
            self.status, self.replica = r.status, r.getheader("x-kvserve-replica")
            while True:
                line = r.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    self.chunks += 1
                    self.started.set()
                    if line.strip() == b"data: [DONE]":
                        self.done = True
                        break
        except (OSError, http.client.HTTPException):
            pass
        finally:
            self.started.set()
            c.close()


def generations(cluster):
    """Generation requests the live replicas have finished (their own /metrics counters)."""
    n = 0
    for r in cluster.info["replicas"]:
        st, _, data = request(r["url"], "GET", "/metrics", timeout=2)
        for line in data.decode().splitlines() if st == 200 else []:
            if line.startswith("vllm:request_success_total"):
                n += int(float(line.rsplit(" ", 1)[1]))
    return n


def start_bench_mid_run(c, seed, tag):
    """Starts the long multi-turn run in a thread and returns (thread, result dict) once the
    replicas have finished 12 of its requests, so that a signal sent next lands mid-run."""
    result, n0 = {}, generations(c)
    runner = threading.Thread(target=lambda: result.update(s=bench(c.url, MT_LONG, seed, tag)))
    runner.start()
    wait_for(lambda: generations(c) >= n0 + 12 or not runner.is_alive(), "the run to start", 60)
    check(runner.is_alive(), "the %s run ended before the signal" % tag)
    return runner, result


def session_on(cluster, name):
    """An x-session-id that the balancer sends to replica `name` (and, sticking, keeps there)."""
    for i in range(200):
        sid = "pin-%s-%d" % (name, i)
        st, h, _ = request(cluster.url, "POST", "/v1/completions",
                           {"prompt": "hello", "max_tokens": 1}, {"x-session-id": sid})
        if st == 200 and h.get("x-kvserve-replica") == name:
            return sid
    check(False, "no session id reached %s in 200 tries" % name)


def affinity():
    one = Cluster(1, "single")
    base = {"mt": bench(one.url, MT, 11, "single-mt"), "sp": bench(one.url, SP, 12, "single-sp"),
            "mt-session": bench(one.url, MT, 13, "single-mt-session", ["--session-header"])}
    one.stop()
    rr = Cluster(3, "rr", balance="roundrobin")
    rr_mt = bench(rr.url, MT, 11, "rr-mt")
    rr.stop()
    three = Cluster(3, "hash")
    runs = {"mt": bench(three.url, MT, 11, "hash-mt"), "sp": bench(three.url, SP, 12, "hash-sp"),
            "mt-session": bench(three.url, MT, 13, "hash-mt-session", ["--session-header"])}
    names = ["replica1", "replica2", "replica3"]
    for key, r in runs.items():
        b = base[key]
        check(r["failed"] == 0 and b["failed"] == 0, "%s: failed requests" % key)
        ratio = r["usage_cache_hit_rate"] / b["usage_cache_hit_rate"]
        log("%-10s hit rate: 1 replica %.3f, 3 replicas %.3f (%.2fx); requests per replica %s, "
            "conversations per replica %s" % (key, b["usage_cache_hit_rate"],
                                              r["usage_cache_hit_rate"], ratio,
                                              r.get("served_by_requests"), r.get("served_by_jobs")))
        check(ratio >= 0.9, "%s: hit rate %.3f < 0.9 x %.3f" % (key, r["usage_cache_hit_rate"],
                                                                b["usage_cache_hit_rate"]))
        if key.startswith("mt"):
            jobs = r.get("served_by_jobs") or {}
            check(all(jobs.get(n, 0) > 0 for n in names), "%s: a replica served no "
                  "conversation: %s" % (key, jobs))
    rr_ratio = rr_mt["usage_cache_hit_rate"] / base["mt"]["usage_cache_hit_rate"]
    log("mt round-robin hit rate %.3f (%.2fx)" % (rr_mt["usage_cache_hit_rate"], rr_ratio))
    check(rr_mt["usage_cache_hit_rate"] < runs["mt"]["usage_cache_hit_rate"],
          "round-robin did as well as the affinity hash")
    return three


def drain(c):
    r1 = c.replica(0)
    # The run first, so that some of its conversations stick to replica1 (the bounded-load hash
    # places no new key on a replica busy with a long stream while the others are idle).
    runner, result = start_bench_mid_run(c, 21, "drain")
    pin = LongStream(c.url, session_on(c, "replica1"))
    pin.start()
    check(pin.started.wait(30) and pin.status == 200, "the long stream did not start")
    os.kill(r1["pid"], signal.SIGTERM)
    t_term = time.time()
    wait_for(lambda: request(r1["url"], "GET", "/health")[0] == 503, "replica1's /health to "
             "answer 503 while it drains", 5)
    wait_for(lambda: c.status().get("replica1", "").startswith("DOWN"), "HAProxy to mark "
             "replica1 DOWN", 10)
    check(alive(r1["pid"]), "replica1 stopped before HAProxy took it out of rotation")
    log("drain: replica1 answers 503 on /health and is DOWN in HAProxy while it finishes")
    runner.join(120)
    pin.join(90)
    check(pin.done and pin.replica == "replica1", "the long stream on the draining replica did "
          "not complete: %d chunks, replica %s" % (pin.chunks, pin.replica))
    wait_for(lambda: not alive(r1["pid"]), "replica1 to exit", 30)
    wait_for(lambda: "replica1 exited with status" in c.tail(), "the cluster to report "
             "replica1's exit", 5)
    check("replica1 exited with status 0" in c.tail(), "replica1's exit:\n" + c.tail())
    s = result["s"]
    bad = [r for r in s["requests"] if not r["success"]
           and not (r["http_status"] == 503 and r["n_chunks"] == 0)]
    log("drain: %d requests, %d completed, %d failed (%d not a 503 before any token), %d sent "
        "after the signal" % (len(s["requests"]), s["completed"], s["failed"], len(bad),
                              sum(r["start_unix_s"] > t_term for r in s["requests"])))
    st = c.stats().get("replica1", {})
    log("drain: HAProxy retried %s requests sent to replica1 and redispatched %s" % (
        st.get("wretr"), st.get("wredis")))
    check(not bad, "requests failed during a drain: %s" % [r["error"] for r in bad][:3])
    check(s["completed"] > 0, "nothing completed")


def crash(c):
    r2 = c.replica(1)
    pin = LongStream(c.url, session_on(c, "replica2"))
    pin.start()
    check(pin.started.wait(30) and pin.status == 200, "the long stream did not start")
    runner, result = start_bench_mid_run(c, 31, "crash")
    os.kill(r2["pid"], signal.SIGKILL)
    # Until the last of its threads has exited, replica2's listening socket still accepts (the
    # process can already look like a zombie): requests the kernel queued for it meanwhile were
    # in flight too. "After the kill" starts when a connect is refused.
    wait_for(lambda: request(r2["url"], "GET", "/health", timeout=1)[0] is None,
             "replica2's port to refuse connections", 5)
    t_kill = time.time()
    wait_for(lambda: c.status().get("replica2", "").startswith("DOWN"), "HAProxy to mark "
             "replica2 DOWN", 10)
    runner.join(120)
    pin.join(60)
    check(not pin.done, "the long stream survived the kill of its replica")
    s = result["s"]
    failed = [r for r in s["requests"] if not r["success"]]
    after = [r for r in s["requests"] if r["start_unix_s"] > t_kill]
    log("crash: %d requests, %d failed (in flight on replica2), %d sent after the kill, served by %s"
        % (len(s["requests"]), len(failed), len(after),
           sorted({r["served_by"] for r in after if r["success"]})))
    for r in failed:
        check(r["start_unix_s"] < t_kill, "a request sent after the kill failed: %s" % r["error"])
        check(r["served_by"] in ("replica2", None), "a request on %s failed: %s" % (
            r["served_by"], r["error"]))
    check(len(failed) <= 6, "%d failures: more than the requests in flight" % len(failed))
    check(after and all(r["success"] and r["served_by"] == "replica3" for r in after),
          "requests sent after the kill did not all succeed on replica3")
    for i in range(6):
        st, h, _ = request(c.url, "POST", "/v1/completions",
                           {"prompt": "after the crash %d" % i, "max_tokens": 2})
        check(st == 200 and h.get("x-kvserve-replica") == "replica3",
              "a new request got %s from %s" % (st, h.get("x-kvserve-replica")))


def main():
    global MODEL
    MODEL = os.path.join(TMP, "model.gguf")
    subprocess.run([BIN, "mkmodel", "-o", MODEL, "--dim", "64", "--layers", "2", "--heads", "4",
                    "--vocab", "512", "--context", str(CONTEXT)], check=True,
                   stdout=subprocess.DEVNULL)
    three = affinity()
    drain(three)
    crash(three)
    three.stop()
    log("cluster e2e: ok")


if __name__ == "__main__":
    # A timeout's SIGTERM runs the cleanup below too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        main()
    finally:
        for cluster in STARTED:
            cluster.kill()
        if os.environ.get("KVSERVE_E2E_KEEP"):
            print("cluster e2e: logs and JSON kept in " + TMP)
        else:
            subprocess.run(["rm", "-rf", TMP])
