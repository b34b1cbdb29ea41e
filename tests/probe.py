#!/usr/bin/env python3
"""probe.py KVSERVE_BIN MODEL.gguf [--short] [--seed N] — kvserve as a hostile client sees it.

Bounded and loopback only: it starts its own `kvserve serve` on a free 127.0.0.1 port and
throws at it what broke servers before:

  models      truncated and corrupted copies of MODEL, a FIFO, a directory: `kvserve info`
              must exit 1 with one line, never crash or hang
  json        mutated request bodies (bytes flipped, cut, invalid UTF-8, NULs, deep nesting):
              every answer is 200 or an OpenAI error (never 5xx), valid UTF-8 JSON
  framing     ambiguous or invalid Content-Length / Transfer-Encoding, huge heads, garbage
              request lines: one JSON error response, then the connection closes
  disconnect  streams cut by the client at random points, sockets reset mid-upload
  overload    a burst beyond --max-queued-requests: 503 with Retry-After, nothing lost
  slow        half-sent heads past a client's cap and idle keep-alives: /health still answers
              at once, the heads get 408 at the header timeout, idle connections close
  edges       a half-closed request, a malformed request pipelined after valid ones, an
              absolute-form target, data after the JSON body, SIGHUP
  grammar     a regex whose compilation explodes: refused within 3.3 s, then at once (cached)
  tier        the KV disk tier's block files replaced by FIFOs and directories under a running
              server: the request answers, the tier stays on, SIGTERM exits within the drain
              timeout
  model       the model file truncated and rewritten under a running server: same answers, and
              one log line says the file changed
  user        what a new user tries: echo's text_offset against the echoed text, tool_choice
              "required" (whole calls, no content; one call without parallel_tool_calls) cut by
              max_tokens, vllm:kv_cache_usage_perc back to 0 as soon as the engine is idle
  signals     SIGTERM with streams in flight: each ends with [DONE], exit 0

Afterwards the server must be idle with no leaked KV block (every used block held by the
prefix cache alone). Exit status 0 when every probe held, 1 otherwise (each failure printed).
--short is what `make test` runs (a few seconds); the default runs ten times as many cases.
"""
import json
import os
import re
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

FAILS = []


def fail(what):
    FAILS.append(what)
    print("FAIL:", what, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def exchange(port, raw, wait=5.0, shut=False):
    """Sends raw bytes, reads until the server closes or wait passes: (bytes, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    out, closed = b"", False
    try:
        s.sendall(raw)
        if shut:
            s.shutdown(socket.SHUT_WR)
        end = time.time() + wait
        while time.time() < end:
            s.settimeout(max(0.05, end - time.time()))
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        s.close()
    return out, closed


def request(port, method, path, body=b"", headers=None, wait=30.0):
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    for k, v in (headers or {}).items():
        head += "%s: %s\r\n" % (k, v)
    if body or method == "POST":
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    raw, _ = exchange(port, head.encode() + b"\r\n" + body, wait=wait)
    status = int(raw[9:12]) if raw[:7] == b"HTTP/1." and len(raw) >= 12 else 0
    hdr, _, payload = raw.partition(b"\r\n\r\n")
    return status, hdr.decode("latin-1"), payload


def check_error_body(what, status, payload):
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return fail("%s: %d body is not UTF-8: %r" % (what, status, payload[:200]))
    if status >= 500 and status not in (503, 505):
        fail("%s: status %d: %s" % (what, status, text[:200]))
    if status >= 400:
        try:
            err = json.loads(text)["error"]
            assert isinstance(err["message"], str) and "type" in err and "code" in err and "param" in err
        except (ValueError, KeyError, AssertionError, TypeError):
            fail("%s: %d is not an OpenAI error: %s" % (what, status, text[:200]))


class Server:
    def __init__(self, binary, model, args, tmp):
        self.port = free_port()
        self.log = open(os.path.join(tmp, "server-%d.log" % self.port), "w+")
        self.p = subprocess.Popen([binary, "serve", "-m", model, "--port", str(self.port), "--threads", "1"] + args,
                                  stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 20
        while time.time() < end:
            try:
                if request(self.port, "GET", "/health", wait=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server did not start:\n" + self.tail())

    def tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def metrics(self):
        st, _, body = request(self.port, "GET", "/metrics")
        vals = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, v = line.rpartition(" ")
                vals[name.split("{")[0]] = float(v)
        return vals

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def probe_models(binary, model, n, rng, tmp):
    data = open(model, "rb").read()
    cases = []
    for i in range(n):
        b = bytearray(data[: rng.randrange(0, min(len(data), 20000))] if i % 2 else data)
        for _ in range(rng.randrange(1, 8)):  # flip bytes where the header and tables live
            if b:
                b[rng.randrange(0, min(len(b), 16384))] = rng.randrange(256)
        p = os.path.join(tmp, "broken%d.gguf" % i)
        open(p, "wb").write(b)
        cases.append(p)
    fifo = os.path.join(tmp, "fifo.gguf")
    os.mkfifo(fifo)
    cases += [fifo, tmp]
    for p in cases:
        try:
            r = subprocess.run([binary, "info", "-m", p], capture_output=True, timeout=20)
        except subprocess.TimeoutExpired:
            fail("models: kvserve info -m %s hangs" % p)
            continue
        if r.returncode < 0:
            fail("models: kvserve info -m %s died of signal %d" % (p, -r.returncode))
        elif r.returncode not in (0, 1):
            fail("models: kvserve info -m %s exit %d" % (p, r.returncode))
        elif r.returncode == 1 and len(r.stderr.decode(errors="replace").strip().splitlines()) != 1:
            fail("models: %s: want one line, got %r" % (p, r.stderr[:300]))
    return len(cases)


def mutate(rng, body):
    b = bytearray(body)
    op = rng.randrange(7)
    if op == 0 and b:
        del b[rng.randrange(len(b)):]
    elif op == 1:
        for _ in range(rng.randrange(1, 6)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
    elif op == 2:
        b = b.replace(b'"Once', b'"\xff\xfe', 1)
    elif op == 3:
        b = b.replace(b'"Once', b'"On\\u0000ce', 1)
    elif op == 4:
        b = b"[" * 5000 + b"]" * 5000
    elif op == 5:
        b = b.replace(b"16", b"-1" if rng.random() < 0.5 else b"1e999", 1)
    else:
        b = b.replace(b'"prompt"', b'"prompt":{"a":[1,{"b":null}]},"x"', 1)
    return bytes(b)


def probe_json(port, n, rng):
    bases = [b'{"prompt":"Once upon a time","max_tokens":16,"temperature":0}',
             b'{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":16}',
             b'{"prompt":[1,403,407],"max_tokens":16,"echo":true,"logprobs":2,"stop":["a","b"]}']
    for i in range(n):
        path = "/v1/chat/completions" if i % 3 == 1 else ("/tokenize" if i % 7 == 0 else "/v1/completions")
        body = mutate(rng, bases[i % 3])
        st, _, payload = request(port, "POST", path, body)
        if st == 0:
            fail("json: no answer to %r" % body[:120])
        else:
            check_error_body("json %r" % body[:60], st, payload)
    return n


FRAMING = [
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\nabc",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
    b"GET /health\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
    b"GET / HTTP/3.0\r\nHost: x\r\n\r\n",
]


def probe_framing(port, n, rng):
    for i in range(n):
        raw = FRAMING[i % len(FRAMING)]
        if i >= len(FRAMING):  # the same with random splits of the first line
            raw = raw[: rng.randrange(1, len(raw))] + raw[rng.randrange(0, 1):]
        out, closed = exchange(port, raw, wait=3)
        lines = len(re.findall(rb"HTTP/1\.[01] \d\d\d ", out))
        if lines > 1 or not closed:
            fail("framing %r: %d status lines, closed %s" % (raw[:50], lines, closed))
        if out:
            st = int(out[9:12]) if out[:7] == b"HTTP/1." else 0
            hdr, _, payload = out.partition(b"\r\n\r\n")
            if b"application/json" not in hdr:
                fail("framing %r: not JSON: %r" % (raw[:50], out[:200]))
            check_error_body("framing %r" % raw[:40], st, payload)
    return n


def probe_disconnect(port, n, rng):
    body = b'{"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"stream":true,"n":2}'
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    def one(i):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            if i % 4 == 0:  # reset in the middle of the upload
                s.sendall(head + body[: len(body) // 2])
            else:
                s.sendall(head + body)
                got, want = 0, rng.randrange(1, 4000)
                while got < want:
                    d = s.recv(min(4096, want - got))
                    if not d:
                        break
                    got += len(d)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        finally:
            s.close()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return n


def probe_overload(port, n):
    body = b'{"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true}'
    results = []
    def one():
        results.append(request(port, "POST", "/v1/completions", body, wait=60))
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    ok = sum(1 for st, _, _ in results if st == 200)
    busy = sum(1 for st, h, _ in results if st == 503)
    for st, h, p in results:
        if st == 503 and "Retry-After" not in h:
            fail("overload: 503 without Retry-After")
        if st not in (200, 503):
            fail("overload: status %d %r" % (st, p[:200]))
    if len(results) != n:
        fail("overload: %d of %d requests answered" % (len(results), n))
    return ok, busy


def probe_slow(binary, model, n, tmp):
    """n half-sent heads from one address (past its cap of 64) and idle keep-alives: /health on a
    new connection answers at once; the heads get 408 (or are evicted) and the idle ones close."""
    srv = Server(binary, model, ["--http-header-timeout", "2", "--http-keepalive-timeout", "1",
                                 "--http-max-connections-per-client", "64"], tmp)
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-a: ")
            socks.append(s)
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        worst = 0.0
        for _ in range(10):
            t0 = time.time()
            st = request(srv.port, "GET", "/health", wait=5)[0]
            worst = max(worst, time.time() - t0)
            if st != 200:
                fail("slow: /health answered %d among %d half-sent heads" % (st, n))
        if worst > 1.0:
            fail("slow: /health took %.0f ms among %d half-sent heads" % (worst * 1000, n))
        end, open_ = time.time() + 10, list(socks) + [idle]
        while open_ and time.time() < end:  # every one closes: 408, eviction or the idle timeout
            still = []
            for s in open_:
                s.settimeout(0.01)
                try:
                    while s.recv(65536):  # a 408 or the idle one's 200, then the close
                        pass
                except socket.timeout:
                    still.append(s)
                except OSError:
                    pass
            open_ = still
        if open_:
            fail("slow: %d of %d connections still open 10 s later" % (len(open_), n + 1))
    finally:
        for s in socks:
            s.close()
        srv.stop()
    return n, worst


def probe_edges(binary, model, tmp):
    srv = Server(binary, model, [], tmp)
    try:
        body = b'{"prompt":"Once upon a time","max_tokens":24}'
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        out, _ = exchange(srv.port, head + body, wait=10, shut=True)
        if not out.startswith(b"HTTP/1.1 200"):
            fail("edges: a half-closed request got %r" % out[:80])
        out, _ = exchange(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\nBad\r\n\r\n", wait=5)
        codes = re.findall(rb"HTTP/1\.1 (\d\d\d) ", out)
        if codes != [b"200", b"400"]:
            fail("edges: pipelined valid then malformed: %r" % codes)
        if request(srv.port, "GET", "http://x/health")[0] != 200:
            fail("edges: an absolute-form target is not served")
        if request(srv.port, "POST", "/v1/completions", body + b"xyz")[0] != 400:
            fail("edges: data after the JSON body was accepted")
        srv.p.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        if srv.p.poll() is not None or request(srv.port, "GET", "/health")[0] != 200:
            fail("edges: SIGHUP killed the server")
    finally:
        srv.stop()
    return 5


def probe_grammar(binary, model, tmp):
    srv = Server(binary, model, [], tmp)
    try:
        body = b'{"prompt":"x","max_tokens":4,"guided_regex":"(a?){10000}a{10000}"}'
        times = []
        for _ in range(2):
            t0 = time.time()
            st, _, payload = request(srv.port, "POST", "/v1/completions", body, wait=60)
            times.append(time.time() - t0)
            if st != 400 or b"took more than" not in payload:
                fail("grammar: %d %r" % (st, payload[:200]))
        if times[0] > 3.3:
            fail("grammar: refused after %.1f s" % times[0])
        if times[1] > 0.5:
            fail("grammar: the failure was not cached (%.1f s again)" % times[1])
    finally:
        srv.stop()
    return times


def fifo_blocks(d):
    """Every block file becomes a FIFO, or (every other one) a directory: (fifos, directories)."""
    n = [0, 0]
    for root, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith(".kvb"):
                p = os.path.join(root, f)
                os.unlink(p)
                kind = (n[0] + n[1]) % 2
                os.mkdir(p) if kind else os.mkfifo(p)
                n[kind] += 1
    return n


def probe_tier(binary, model, tmp):
    d = os.path.join(tmp, "tier")
    args = ["--kv-disk-dir", d, "--drain-timeout", "5"]
    body = (b'{"prompt":"Once upon a time, there was a little girl named Lily. She loved to play outside in the sun '
            b'with her friends. One day, she saw a big red ball in the park and ran to get it.","max_tokens":8,"temperature":0}')
    srv = Server(binary, model, args, tmp)
    first = request(srv.port, "POST", "/v1/completions", body)[2]
    srv.p.send_signal(signal.SIGTERM)
    srv.p.wait(20)
    srv = Server(binary, model, args, tmp)
    try:
        end = time.time() + 10
        while srv.metrics().get("kvserve_kv_tier_unverified_blocks", 0) > 0 and time.time() < end:
            time.sleep(0.05)
        fifos, dirs = fifo_blocks(d)
        if fifos + dirs < 2:
            fail("tier: run 1 wrote %d block file(s), not enough for a FIFO and a directory" % (fifos + dirs))
        st, _, again = request(srv.port, "POST", "/v1/completions", body, wait=20)
        if st != 200 or json.loads(again)["choices"][0]["text"] != json.loads(first)["choices"][0]["text"]:
            fail("tier: with FIFOs and directories for block files: %d %r" % (st, again[:200]))
        m = srv.metrics()
        if m.get("kvserve_kv_tier_disk_up") != 1:
            fail("tier: a FIFO or a directory under a block's name turned the disk tier off")
        if m.get("kvserve_kv_tier_files_skipped_total", 0) < 1:
            fail("tier: the FIFOs and directories were not counted")
        t0 = time.time()
        srv.p.send_signal(signal.SIGTERM)
        try:
            srv.p.wait(7)
        except subprocess.TimeoutExpired:
            fail("tier: SIGTERM did not exit within the drain timeout")
        return time.time() - t0
    finally:
        srv.stop()


def probe_model(binary, model, tmp):
    path = os.path.join(tmp, "model.gguf")
    data = open(model, "rb").read()
    open(path, "wb").write(data)
    srv = Server(binary, path, [], tmp)
    body = b'{"prompt":"Once upon a time","max_tokens":16,"temperature":0}'
    try:
        before = request(srv.port, "POST", "/v1/completions", body)[2]
        os.truncate(path, 64)
        mid = request(srv.port, "POST", "/v1/completions", body)[2]
        with open(path, "r+b") as f:
            f.write(bytes(b ^ 0x55 for b in data))
        after = request(srv.port, "POST", "/v1/completions", body)[2]
        texts = [json.loads(x)["choices"][0]["text"] if x.startswith(b"{") else None for x in (before, mid, after)]
        if srv.p.poll() is not None or len(set(texts)) != 1:
            fail("model: replaced under the server: %r" % (texts,))
        end = time.time() + 6  # the file is looked at every 2 s
        while "changed under the running server" not in srv.tail() and time.time() < end:
            time.sleep(0.1)
        if "changed under the running server" not in srv.tail():
            fail("model: no log line says the file changed:\n" + srv.tail())
    finally:
        srv.stop()
    return 3


def check_offsets(what, text, lp):
    """Every token of an echo sits at its text_offset in the text (the first piece's dummy-prefix
    space is not in the text)."""
    toks, offs = lp["tokens"], lp["text_offset"]
    if len(toks) != len(offs) or offs != sorted(offs):
        fail("%s: text_offset %r for %d tokens" % (what, offs, len(toks)))
        return
    for t, o in zip(toks, offs):
        want = t[1:] if o == 0 and t.startswith(" ") else t
        if not t.startswith("bytes:") and not text[o:].startswith(want):
            fail("%s: token %r is not at offset %d of %r (offsets %r)" % (what, t, o, text, offs))
            return


def probe_user(binary, model, tmp, rng):
    """What a new user tries: echo with logprobs, tool_choice "required", /metrics once idle."""
    here = os.path.dirname(os.path.abspath(__file__))
    tmpl = os.path.join(here, "..", "config", "templates", "chatml-tools.jinja")
    srv = Server(binary, model, ["--chat-template", "@" + tmpl], tmp)
    n = 0
    try:
        words = "Once upon a time there was a little girl named Lily who loved to play in the park".split()
        for _ in range(3):
            prompt = " ".join(words[:rng.randint(3, len(words))]) + rng.choice(["", ",", "."])
            body = json.dumps({"prompt": prompt, "max_tokens": 6, "echo": True, "logprobs": 1,
                               "temperature": 0}).encode()
            st, _, out = request(srv.port, "POST", "/v1/completions", body)
            if st != 200:
                fail("user: echo answered %d %r" % (st, out[:200]))
                continue
            c = json.loads(out)["choices"][0]
            check_offsets("user: echo of %r" % prompt, c["text"], c["logprobs"])
            n += 1
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        for parallel in (True, False):
            for mt in (rng.randint(5, 30), rng.randint(31, 120)):
                body = json.dumps({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools,
                                   "tool_choice": "required", "parallel_tool_calls": parallel, "max_tokens": mt,
                                   "temperature": 0.9, "seed": rng.randint(0, 1 << 30)}).encode()
                st, _, out = request(srv.port, "POST", "/v1/chat/completions", body)
                what = "user: tool_choice required, parallel %s, max_tokens %d" % (parallel, mt)
                if st != 200:
                    fail("%s: %d %r" % (what, st, out[:200]))
                    continue
                c = json.loads(out)["choices"][0]
                calls = c["message"].get("tool_calls") or []
                if c["message"].get("content") is not None:
                    fail("%s: content %r" % (what, c["message"]["content"]))
                if len(calls) > (16 if parallel else 1):
                    fail("%s: %d calls" % (what, len(calls)))
                if c["finish_reason"] == "tool_calls" and not calls:
                    fail("%s: finish_reason tool_calls without a call: %r" % (what, c))
                if c["finish_reason"] not in ("tool_calls", "length"):
                    fail("%s: finish_reason %r" % (what, c["finish_reason"]))
                for call in calls:
                    try:
                        if not isinstance(json.loads(call["function"]["arguments"]).get("city"), str):
                            raise ValueError
                    except (ValueError, AttributeError):
                        fail("%s: a call's arguments %r" % (what, call["function"]["arguments"]))
                n += 1
        # vllm:kv_cache_usage_perc counts blocks only the prefix cache holds as free: 0 once idle
        # (it lagged ~0.5 s behind an idle engine)
        request(srv.port, "POST", "/v1/completions", b'{"prompt":"Once upon a time","max_tokens":8}')
        end, usage = time.time() + 0.2, None
        while time.time() < end:
            usage = srv.metrics().get("vllm:kv_cache_usage_perc")
            if usage == 0:
                break
        if usage != 0:
            fail("user: vllm:kv_cache_usage_perc %s 200 ms after the last request" % usage)
        n += 1
    finally:
        srv.stop()
    return n


def wait_idle(srv):
    end, m = time.time() + 15, {}
    while time.time() < end:
        m = srv.metrics()
        if (m.get("vllm:num_requests_running") == 0 and m.get("vllm:num_requests_waiting") == 0
                and m.get("kvserve_kv_blocks_used") == m.get("kvserve_kv_blocks_cached")):
            return
        time.sleep(0.05)
    fail("not idle afterwards (a leaked request or KV block): %s" % {k: v for k, v in m.items() if "num_requests" in k or "blocks" in k})


def probe_signals(binary, model, n, tmp):
    srv = Server(binary, model, ["--drain-timeout", "20"], tmp)
    body = b'{"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true,"n":2}'
    outs = []
    def one():
        outs.append(request(srv.port, "POST", "/v1/completions", body, wait=30)[2])
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    srv.p.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(40)
    try:
        rc = srv.p.wait(20)
    except subprocess.TimeoutExpired:
        rc = None
        fail("signals: still running 20 s after SIGTERM")
    if rc not in (0, None):
        fail("signals: exit status %s after the drain:\n%s" % (rc, srv.tail()))
    lost = sum(1 for o in outs if b"data: [DONE]" not in o and b'"error"' not in o and not o.startswith(b"{\"error\""))
    # a stream either ran to [DONE] or (sent after the signal) was refused with 503 JSON
    if lost:
        fail("signals: %d of %d streams ended without [DONE] or an error" % (lost, len(outs)))
    srv.stop()
    return len(outs)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, model = sys.argv[1], sys.argv[2]
    short = "--short" in sys.argv
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 20261201
    k = 1 if short else 10
    rng = random.Random(seed)
    print("probe: seed %d%s" % (seed, ", short" if short else ""), flush=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="kvserve-probe-") as tmp:
        print("models: %d broken files" % probe_models(binary, model, 6 * k, rng, tmp), flush=True)
        srv = Server(binary, model, ["--max-body", "64KiB", "--max-queued-requests", "4", "--max-seqs", "2", "--kv-memory", "8MiB"], tmp)
        try:
            print("json: %d mutated bodies" % probe_json(srv.port, 40 * k, rng), flush=True)
            print("framing: %d abusive requests" % probe_framing(srv.port, len(FRAMING) * k + 4, rng), flush=True)
            print("disconnect: %d streams cut" % probe_disconnect(srv.port, 12 * k, rng), flush=True)
            ok, busy = probe_overload(srv.port, 12 * k)
            if not busy:
                fail("overload: nothing was refused (the queue limit did not act)")
            print("overload: %d served, %d refused with 503" % (ok, busy), flush=True)
            wait_idle(srv)
            if request(srv.port, "GET", "/health")[0] != 200:
                fail("the server is not healthy after the probes")
            if srv.p.poll() is not None:
                fail("the server died:\n" + srv.tail())
        finally:
            srv.stop()
        n, worst = probe_slow(binary, model, 150 * k, tmp)
        print("slow: /health within %.0f ms among %d half-sent heads" % (worst * 1000, n), flush=True)
        print("edges: %d HTTP edge cases" % probe_edges(binary, model, tmp), flush=True)
        t = probe_grammar(binary, model, tmp)
        print("grammar: refused in %.1f s, then in %.2f s" % (t[0], t[1]), flush=True)
        print("tier: FIFOs and directories for block files; SIGTERM exit in %.1f s" % probe_tier(binary, model, tmp), flush=True)
        print("model: %d answers across a replaced model file" % probe_model(binary, model, tmp), flush=True)
        print("user: %d requests as a new user makes them" % probe_user(binary, model, tmp, rng), flush=True)
        print("signals: %d streams through a drain" % probe_signals(binary, model, 3 * k, tmp), flush=True)
    print("probe: %s in %.1f s" % ("ok" if not FAILS else "%d failure(s)" % len(FAILS), time.time() - t0))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
