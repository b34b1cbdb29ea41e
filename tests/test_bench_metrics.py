"""Tests of scripts/bench_serving and its library scripts/benchlib.py.

The arithmetic (percentiles, TTFT / TPOT / ITL / E2E, the summary), the SSE and Prometheus
parsers, the workloads and the arrival process are checked on synthetic inputs; the whole script
is then run against a small fake OpenAI streaming server on a random loopback port. Run with
`python3 -m unittest discover -s tests -p test_bench_metrics.py` from the repository root.
"""
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
import benchlib as bl  # noqa: E402


def load_script():
    """scripts/bench_serving as a module (it has no .py suffix)."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(SCRIPTS, "bench_serving")
    loader = importlib.machinery.SourceFileLoader("bench_serving_script", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Percentiles(unittest.TestCase):
    def test_linear_interpolation_like_numpy(self):
        xs = [4.0, 1.0, 3.0, 2.0]
        self.assertAlmostEqual(bl.percentile(xs, 50), 2.5)
        self.assertAlmostEqual(bl.percentile(xs, 90), 3.7)
        self.assertAlmostEqual(bl.percentile(xs, 99), 3.97)
        self.assertAlmostEqual(bl.percentile(xs, 0), 1.0)
        self.assertAlmostEqual(bl.percentile(xs, 100), 4.0)
        self.assertEqual(bl.percentile([7], 99), 7.0)
        self.assertIsNone(bl.percentile([], 50))

    def test_mean_and_std(self):
        self.assertAlmostEqual(bl.mean([1, 2, 3, 6]), 3.0)
        self.assertAlmostEqual(bl.stdev([1, 2, 3, 6]), (7 / 2) ** 0.5)
        self.assertIsNone(bl.mean([]))


class Timeline(unittest.TestCase):
    def test_ttft_itl_tpot_e2e(self):
        # Sent at 10.0; text chunks at +0.1, +0.15, +0.3; stream ends at +0.32; 3 tokens.
        m = bl.timeline_metrics(10.0, [10.1, 10.15, 10.3], 10.32, 3)
        self.assertAlmostEqual(m["ttft_ms"], 100.0)
        self.assertEqual(len(m["itl_ms"]), 2)
        self.assertAlmostEqual(m["itl_ms"][0], 50.0)
        self.assertAlmostEqual(m["itl_ms"][1], 150.0)
        self.assertAlmostEqual(m["e2e_ms"], 320.0)
        self.assertAlmostEqual(m["tpot_ms"], (320.0 - 100.0) / 2)

    def test_tpot_uses_usage_tokens_not_chunks(self):
        # One chunk may carry several tokens: 2 chunks but 5 tokens.
        m = bl.timeline_metrics(0.0, [0.2, 0.6], 0.6, 5)
        self.assertAlmostEqual(m["tpot_ms"], 400.0 / 4)
        self.assertEqual(len(m["itl_ms"]), 1)
        self.assertAlmostEqual(m["itl_ms"][0], 400.0)

    def test_degenerate(self):
        m = bl.timeline_metrics(0.0, [0.05], 0.05, 1)
        self.assertIsNone(m["tpot_ms"])
        self.assertEqual(m["itl_ms"], [])
        m = bl.timeline_metrics(0.0, [], 0.5, 0)
        self.assertIsNone(m["ttft_ms"])
        self.assertAlmostEqual(m["e2e_ms"], 500.0)


class Summary(unittest.TestCase):
    def test_aggregates_only_successes(self):
        recs = [
            {"success": True, "prompt_tokens": 10, "output_tokens": 4, "cached_tokens": 5,
             "ttft_ms": 100.0, "itl_ms": [10.0, 20.0, 30.0], "e2e_ms": 160.0, "tpot_ms": 20.0},
            {"success": True, "prompt_tokens": 30, "output_tokens": 2, "cached_tokens": None,
             "ttft_ms": 300.0, "itl_ms": [40.0], "e2e_ms": 340.0, "tpot_ms": 40.0},
            {"success": False, "prompt_tokens": 99, "output_tokens": 99, "ttft_ms": 1.0,
             "itl_ms": [1.0], "e2e_ms": 1.0, "tpot_ms": 1.0},
        ]
        s = bl.summarize(recs, 2.0, (90, 99))
        self.assertEqual(s["completed"], 2)
        self.assertEqual(s["failed"], 1)
        self.assertEqual(s["total_input_tokens"], 40)
        self.assertEqual(s["total_output_tokens"], 6)
        self.assertAlmostEqual(s["request_throughput"], 1.0)
        self.assertAlmostEqual(s["output_throughput"], 3.0)
        self.assertAlmostEqual(s["total_token_throughput"], 23.0)
        self.assertAlmostEqual(s["mean_ttft_ms"], 200.0)
        self.assertAlmostEqual(s["median_ttft_ms"], 200.0)
        self.assertAlmostEqual(s["p90_ttft_ms"], 280.0)
        self.assertAlmostEqual(s["mean_itl_ms"], 25.0)  # over all chunks of all requests
        self.assertAlmostEqual(s["median_itl_ms"], 25.0)
        self.assertAlmostEqual(s["p99_itl_ms"], 39.7)
        self.assertAlmostEqual(s["mean_tpot_ms"], 30.0)
        self.assertAlmostEqual(s["p99_e2el_ms"], 160.0 + 180.0 * 0.99)
        self.assertAlmostEqual(s["usage_cache_hit_rate"], 5 / 40)

    def test_empty_run(self):
        s = bl.summarize([], 0.0)
        self.assertEqual(s["completed"], 0)
        self.assertIsNone(s["mean_ttft_ms"])
        self.assertIsNone(s["request_throughput"])
        json.dumps(s, allow_nan=False)
        self.assertIn("Successful requests:", bl.format_table(s, (99,)))


class Parsers(unittest.TestCase):
    def test_sse(self):
        p = bl.SSEParser()
        lines = [b": ping\r\n", b"data: {\"a\":\r\n", b"data: 1}\r\n", b"\r\n", b"event: x\n",
                 b"data:[DONE]\n", b"\n", b"data: tail\n"]
        got = [d for d in (p.feed(x) for x in lines) if d is not None]
        self.assertEqual(got, ['{"a":\n1}', "[DONE]"])
        self.assertEqual(p.flush(), "tail")
        self.assertIsNone(p.flush())

    def test_chunk_text(self):
        self.assertEqual(bl.chunk_text({"choices": [{"text": "hi"}]}, False), "hi")
        self.assertEqual(bl.chunk_text({"choices": [{"delta": {"role": "assistant",
                                                               "content": ""}}]}, True), "")
        self.assertEqual(bl.chunk_text({"choices": [], "usage": {}}, True), "")

    def test_prometheus(self):
        text = ('# HELP vllm:prefix_cache_queries_total x\n'
                'vllm:prefix_cache_queries_total{model_name="m",engine="0"} 100.0\n'
                'vllm:prefix_cache_queries_total{model_name="m",engine="1"} 50\n'
                'vllm:prefix_cache_hits_total{model_name="m"} 30\n'
                'kvserve_prefix_cache_hits_total 7\n')
        self.assertEqual(bl.parse_prefix_cache_metrics(text), {"queries": 150.0, "hits": 30.0})
        other = "kvserve_prefix_cache_queries_total 10\nkvserve_prefix_cache_hits_total 4\n"
        self.assertEqual(bl.parse_prefix_cache_metrics(other), {"queries": 10.0, "hits": 4.0})
        self.assertIsNone(bl.parse_prefix_cache_metrics("up 1\n"))
        self.assertAlmostEqual(bl.hit_rate({"queries": 10, "hits": 4}, {"queries": 30, "hits": 19}), 0.75)
        self.assertIsNone(bl.hit_rate(None, {"queries": 1, "hits": 1}))
        self.assertIsNone(bl.hit_rate({"queries": 5, "hits": 1}, {"queries": 5, "hits": 1}))


class Workloads(unittest.TestCase):
    def test_arrivals(self):
        rng = random.Random(1)
        self.assertEqual(bl.arrival_offsets(rng, 3, float("inf")), [0.0, 0.0, 0.0])
        for burst in (1.0, 0.25, 4.0):
            t = bl.arrival_offsets(random.Random(7), 4000, 10.0, burst)
            self.assertEqual(t[0], 0.0)
            gaps = [b - a for a, b in zip(t, t[1:])]
            self.assertTrue(all(g >= 0 for g in gaps))
            m = bl.mean(gaps)
            self.assertAlmostEqual(m, 0.1, delta=0.012)
            cv2 = (bl.stdev(gaps) / m) ** 2  # a gamma's squared CV is 1 / shape
            self.assertAlmostEqual(cv2, 1.0 / burst, delta=0.25 / burst)

    def test_prompter_calibrates_with_a_tokenizer(self):
        calls = []

        def two_per_word(text):
            calls.append(text)
            return 2 * len(text.split())

        p = bl.WordPrompter(random.Random(3), two_per_word)
        self.assertAlmostEqual(p.ratio, 2.0)
        text, n = p.make(100)
        self.assertEqual(n, 100)
        self.assertEqual(len(text.split()), 50)
        text, n = bl.WordPrompter(random.Random(3)).make(37)
        self.assertEqual((n, len(text.split())), (37, 37))

    def test_server_tokenizer_speaks_vllm_and_llama_cpp(self):
        class FakeTarget:
            """POST /tokenize in one server's shape: 1 BOS + 1 token per word."""

            def __init__(self, shape):
                self.shape, self.bodies = shape, []

            def get_json(self, path, body=None, method="GET"):
                self.bodies.append(body)
                if path != "/tokenize" or self.shape is None:
                    return None
                if self.shape == "vllm":
                    n = 1 + len(body.get("prompt", "").split()) if "prompt" in body else 0
                    return {"count": n, "tokens": list(range(n))}
                # llama.cpp: "prompt" is ignored (no tokens); "content", BOS only with add_special
                n = len(body.get("content", "").split()) + (1 if body.get("add_special") else 0)
                return {"tokens": list(range(n)) if "content" in body else []}

        for shape in ("vllm", "llama.cpp"):
            t = FakeTarget(shape)
            count = bl.server_tokenizer(t)
            self.assertIsNotNone(count, shape)
            self.assertEqual(count("a b c d"), 5, shape)  # the same count from either shape
        self.assertIsNone(bl.server_tokenizer(FakeTarget(None)))
        # Same seed, same tokenizer, either shape: the same prompts.
        made = [bl.WordPrompter(random.Random(9), bl.server_tokenizer(FakeTarget(s))).make(64)
                for s in ("vllm", "llama.cpp")]
        self.assertEqual(made[0], made[1])
        self.assertEqual(made[0][1], 64)

    def test_random_lengths_in_range(self):
        rng = random.Random(5)
        jobs = bl.random_jobs(rng, bl.WordPrompter(rng), 200, 100, 20, 0.5)
        ins = [j[0]["prompt_len"] for j in jobs]
        outs = [j[0]["output_len"] for j in jobs]
        self.assertTrue(all(50 <= x <= 150 for x in ins))
        self.assertTrue(all(10 <= x <= 30 for x in outs))
        self.assertGreater(len(set(ins)), 20)
        fixed = bl.random_jobs(rng, bl.WordPrompter(rng), 5, 64, 8, 0.0)
        self.assertEqual({j[0]["prompt_len"] for j in fixed}, {64})

    def test_shared_prefix_groups(self):
        rng = random.Random(9)
        jobs = bl.shared_prefix_jobs(rng, bl.WordPrompter(rng), 3, 4, 50, 10, 7)
        self.assertEqual(len(jobs), 12)
        systems = [j[0]["system"] for j in jobs]
        self.assertEqual(len(set(systems)), 3)
        for s in set(systems):
            self.assertEqual(systems.count(s), 4)
            self.assertEqual(len(s.split()), 50)
        self.assertTrue(all(j[0]["prompt_len"] == 60 and j[0]["output_len"] == 7 for j in jobs))
        self.assertEqual(len(bl.shared_prefix_jobs(rng, bl.WordPrompter(rng), 3, 4, 5, 5, 5, 5)), 5)

    def test_multi_turn_history(self):
        rng = random.Random(11)
        jobs = bl.multi_turn_jobs(rng, bl.WordPrompter(rng), 2, 3, 20, 5, 0.0, sys_len=8)
        self.assertEqual([len(j) for j in jobs], [3, 3])
        args = type("A", (), {"temperature": 0.0, "ignore_eos": True})()
        t = jobs[0][2]
        body = bl.build_body("m", t, [("q1", "a1"), ("q2", "a2")], True, args)
        self.assertEqual([m["role"] for m in body["messages"]],
                         ["system", "user", "assistant", "user", "assistant", "user"])
        self.assertEqual(body["messages"][-1]["content"], t["prompt"])
        self.assertTrue(body["ignore_eos"] and body["stream"])
        self.assertEqual(body["stream_options"], {"include_usage": True})
        body = bl.build_body("m", t, [("q1", "a1")], False, args)
        self.assertEqual(body["prompt"], "\n".join([t["system"], "q1", "a1", t["prompt"]]))


# ----------------------------------------------------------------------------- fake server

CHUNK_GAP_S = 0.01


class FakeState:
    def __init__(self):
        self.lock = threading.Lock()
        self.bodies = []
        self.sessions = []
        self.queries = 0
        self.hits = 0


class FakeHandler(BaseHTTPRequestHandler):
    """A tiny OpenAI-style server: /v1/models, /tokenize (2 tokens per word), /metrics
    (prefix-cache counters: half of every prompt "hits"), and streamed completions and chat
    completions of min(max_tokens, 4) chunks CHUNK_GAP_S apart. A prompt containing FAIL gets
    HTTP 500; one containing BROKEN gets an error event mid-stream; one containing CUT stops
    after one chunk, without [DONE], as a replica that dies would. Every response names its
    "replica" in x-kvserve-replica, and x-session-id headers are recorded. Chat streams use chunked
    transfer encoding, completions streams end when the connection closes: clients meet both."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        st = self.server.state
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": "fake-model"}]})
        if self.path == "/metrics":
            with st.lock:
                text = ("vllm:prefix_cache_queries_total{model_name=\"fake\"} %d\n"
                        "vllm:prefix_cache_hits_total{model_name=\"fake\"} %d\n" % (st.queries, st.hits))
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._json(404, {"error": {"message": "no"}})

    def do_POST(self):
        st = self.server.state
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n))
        if self.path == "/tokenize":
            words = body["prompt"].split()
            return self._json(200, {"tokens": list(range(2 * len(words))), "count": 2 * len(words)})
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            return self._json(404, {"error": {"message": "no"}})
        text = json.dumps(body["messages"]) if chat else body["prompt"]
        with st.lock:
            st.bodies.append(body)
            st.sessions.append(self.headers.get("x-session-id"))
        if "FAIL" in text:
            return self._json(500, {"error": {"message": "boom"}})
        n_prompt = 2 * len(text.split())
        with st.lock:
            st.queries += n_prompt
            st.hits += n_prompt // 2
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("x-kvserve-replica", "fake-replica")
        if chat:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        n_out = min(int(body["max_tokens"]), 4)

        def write(data):
            if chat:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            self.wfile.write(data)
            self.wfile.flush()

        def send(obj):
            write(b": ping\n\n")
            write(("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode())

        def choice(t, fin=None):
            if chat:
                return {"index": 0, "delta": {"content": t} if t is not None else {}, "finish_reason": fin}
            return {"index": 0, "text": t or "", "finish_reason": fin}

        if chat:
            send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(n_out):
            time.sleep(CHUNK_GAP_S)
            if "BROKEN" in text and i == 1:
                send({"error": {"message": "engine died"}})
                break
            if "CUT" in text and i == 1:
                break
            send({"choices": [choice("w%d " % i)]})
        else:
            send({"choices": [choice(None, "length")]})
            send({"choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                                           "total_tokens": n_prompt + n_out,
                                           "prompt_tokens_details": {"cached_tokens": n_prompt // 2}}})
            send("[DONE]")
        if chat:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class EndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHandler)
        cls.server.daemon_threads = True
        cls.server.state = FakeState()
        cls.thread = threading.Thread(target=cls.server.serve_forever, kwargs={"poll_interval": 0.05})
        cls.thread.daemon = True
        cls.thread.start()
        cls.url = "http://127.0.0.1:%d" % cls.server.server_address[1]
        cls.script = load_script()
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        cls.thread.join(5)
        cls.tmp.cleanup()

    def run_main(self, *argv):
        out = os.path.join(self.tmp.name, "r%d.json" % len(os.listdir(self.tmp.name)))
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = self.script.main(["--base-url", self.url, "--timeout", "20", "--max-duration", "60",
                                   "--save-json", out] + list(argv))
        with open(out, encoding="utf-8") as f:
            return rc, json.load(f), buf.getvalue()

    def test_random_completions(self):
        with self.server.state.lock:
            self.server.state.bodies.clear()
        rc, s, text = self.run_main("--dataset", "random", "--num-prompts", "6", "--random-input-len",
                                    "40", "--random-output-len", "3", "--max-concurrency", "2",
                                    "--ignore-eos", "--num-warmups", "1")
        self.assertEqual(rc, 0)
        self.assertEqual((s["completed"], s["failed"]), (6, 0))
        self.assertEqual(len(s["requests"]), 6)
        self.assertEqual(s["model"], "fake-model")
        for k in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "p90_e2el_ms",
                  "output_throughput", "request_throughput"):
            self.assertIsInstance(s[k], float, k)
        self.assertEqual(s["total_output_tokens"], 18)
        self.assertEqual(s["total_input_tokens"], 6 * 40)  # calibrated through /tokenize
        self.assertGreaterEqual(s["mean_ttft_ms"], CHUNK_GAP_S * 1000 * 0.9)
        self.assertGreaterEqual(s["median_itl_ms"], CHUNK_GAP_S * 1000 * 0.9)
        # Read as it streams: the first text arrives well before the end of the stream.
        self.assertLess(s["mean_ttft_ms"], s["mean_e2el_ms"] - 1.5 * CHUNK_GAP_S * 1000)
        for r in s["requests"]:
            self.assertEqual(r["n_chunks"], 3)
            self.assertEqual(len(r["itl_ms"]), 2)
            self.assertAlmostEqual(r["tpot_ms"], (r["e2e_ms"] - r["ttft_ms"]) / 2)
        self.assertAlmostEqual(s["prefix_cache_hit_rate"], 0.5)
        self.assertAlmostEqual(s["usage_cache_hit_rate"], 0.5)
        self.assertIn("Mean TTFT (ms):", text)
        self.assertIn("P99 ITL (ms):", text)
        self.assertIn("Prefix cache hit rate", text)
        with self.server.state.lock:
            bodies = list(self.server.state.bodies)
        self.assertEqual(len(bodies), 7)  # the warm-up too
        self.assertTrue(all(b["stream"] and b["stream_options"]["include_usage"] and b["ignore_eos"]
                            for b in bodies))

    def test_multi_turn_chat_extends_history(self):
        with self.server.state.lock:
            self.server.state.bodies.clear()
        rc, s, _ = self.run_main("--dataset", "multi-turn", "--endpoint", "chat",
                                 "--mt-num-conversations", "2", "--mt-turns", "3",
                                 "--mt-question-len", "10", "--random-output-len", "2",
                                 "--request-rate", "50", "--seed", "4")
        self.assertEqual((rc, s["completed"]), (0, 6))
        self.assertLess(s["mean_ttft_ms"], s["mean_e2el_ms"] - 0.5 * CHUNK_GAP_S * 1000)
        self.assertGreaterEqual(s["median_itl_ms"], CHUNK_GAP_S * 1000 * 0.9)
        with self.server.state.lock:
            lens = sorted(len(b["messages"]) for b in self.server.state.bodies)
        self.assertEqual(lens, [1, 1, 3, 3, 5, 5])
        self.assertEqual([(r["job"], r["turn"]) for r in s["requests"]],
                         [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)])

    def test_failures_are_counted(self):
        path = os.path.join(self.tmp.name, "p.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for p in ("hello there", "please FAIL now", "a BROKEN stream", "fine words here",
                      "a CUT stream"):
                f.write(json.dumps({"prompt": p, "output_len": 4}) + "\n")
        rc, s, _ = self.run_main("--dataset", "jsonl", "--dataset-path", path, "--seed", "1")
        self.assertEqual(rc, 0)
        self.assertEqual((s["completed"], s["failed"]), (2, 3))
        errs = " | ".join(sorted(r["error"] for r in s["requests"] if r["error"]))
        self.assertIn("HTTP 500", errs)
        self.assertIn("engine died", errs)
        self.assertIn("stream ended before [DONE]", errs)  # text arrived, but the stream was cut
        by_status = sorted((r["http_status"], r["n_chunks"]) for r in s["requests"] if not r["success"])
        self.assertEqual(by_status, [(200, 1), (200, 1), (500, 0)])

    def test_session_header_and_replica_counts(self):
        with self.server.state.lock:
            self.server.state.sessions.clear()
        rc, s, text = self.run_main("--dataset", "multi-turn", "--endpoint", "chat",
                                    "--mt-num-conversations", "3", "--mt-turns", "2",
                                    "--mt-question-len", "6", "--random-output-len", "2",
                                    "--session-header", "--seed", "9")
        self.assertEqual((rc, s["completed"]), (0, 6))
        with self.server.state.lock:
            sessions = list(self.server.state.sessions)
        # One id per conversation, sent with each of its turns, different between conversations.
        self.assertEqual(len(sessions), 6)
        self.assertEqual(sorted(set(sessions)), ["s9-0", "s9-1", "s9-2"])
        self.assertTrue(all(sessions.count(x) == 2 for x in sessions))
        self.assertEqual(s["served_by_requests"], {"fake-replica": 6})
        self.assertEqual(s["served_by_jobs"], {"fake-replica": 3})
        self.assertTrue(all(r["served_by"] == "fake-replica" for r in s["requests"]))
        self.assertIn("Conversations per replica:", text)
        rc, s, _ = self.run_main("--dataset", "random", "--num-prompts", "2", "--random-input-len",
                                 "4", "--random-output-len", "2", "--served-by-header", "")
        self.assertEqual(rc, 0)
        self.assertNotIn("served_by_requests", s)
        with self.server.state.lock:
            self.assertEqual(self.server.state.sessions[-2:], [None, None])

    def test_shared_prefix_via_executable(self):
        out = os.path.join(self.tmp.name, "exe.json")
        p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "bench_serving"), "--base-url",
                            self.url, "--dataset", "shared-prefix", "--gsp-num-groups", "2",
                            "--gsp-prompts-per-group", "2", "--gsp-system-prompt-len", "20",
                            "--gsp-question-len", "4", "--gsp-output-len", "2", "--endpoint",
                            "chat", "--save-json", out, "--timeout", "20"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out, encoding="utf-8") as f:
            s = json.load(f)
        self.assertEqual(s["completed"], 4)
        self.assertIn("Serving Benchmark Result", p.stdout)

    def test_unreachable_server_fails_cleanly(self):
        import socket
        with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            rc = self.script.main(["--base-url", "http://127.0.0.1:%d" % port, "--model", "m", "--num-prompts",
                                   "2", "--timeout", "5", "--random-input-len", "4"])
        self.assertEqual(rc, 1)
        self.assertIn("Failed requests:", buf.getvalue())


if __name__ == "__main__":
    unittest.main()
