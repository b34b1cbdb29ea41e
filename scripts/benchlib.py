"""benchlib — the library behind scripts/bench_serving, an OpenAI-API serving benchmark.

Python 3 standard library only. Everything that is arithmetic (percentiles, per-request TTFT /
TPOT / ITL / end-to-end latency, the summary), parsing (SSE lines, Prometheus text) or data
generation (random, shared-prefix, multi-turn and JSONL workloads, Poisson arrival times) is a
plain function so the unit tests can drive it with synthetic timelines; the HTTP client and the
runner sit on top of them.

Metric definitions follow `vllm bench serve`:
  TTFT  time from sending the request to the first streamed chunk that carries text;
  ITL   gaps between consecutive chunks that carry text (per chunk, not per token);
  E2E   time from sending the request to the end of its stream;
  TPOT  (E2E - TTFT) / (output tokens - 1), output tokens from the usage chunk, only for
        requests with more than one output token.
Percentiles interpolate linearly between order statistics (numpy's default).

Bounds: every request has a wall-clock deadline (--timeout) and a socket timeout; the run stops
dispatching after --max-duration seconds; the number of requests is fixed up front. Only the
given base URL is contacted.
"""

import http.client
import json
import math
import re
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

# ----------------------------------------------------------------------------- arithmetic


def percentile(values, p):
    """The p-th percentile (0..100) of values with linear interpolation; None when empty."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    rank = (len(xs) - 1) * p / 100.0
    lo = int(math.floor(rank))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def mean(values):
    return sum(values) / len(values) if values else None


def stdev(values):
    """Population standard deviation (numpy.std's default); None when empty."""
    if not values:
        return None
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def timeline_metrics(t_start, content_times, t_end, output_tokens):
    """Per-request metrics in milliseconds from absolute timestamps in seconds.

    content_times: arrival times of the chunks that carried text, ascending. output_tokens: from
    the usage chunk (or an estimate). Returns {ttft_ms, itl_ms: [...], e2e_ms, tpot_ms}; ttft_ms
    is None without any text chunk, tpot_ms is None with fewer than two output tokens."""
    e2e_ms = (t_end - t_start) * 1000.0
    if not content_times:
        return {"ttft_ms": None, "itl_ms": [], "e2e_ms": e2e_ms, "tpot_ms": None}
    ttft_ms = (content_times[0] - t_start) * 1000.0
    itl_ms = [(b - a) * 1000.0 for a, b in zip(content_times, content_times[1:])]
    tpot_ms = None
    if output_tokens is not None and output_tokens > 1:
        tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1)
    return {"ttft_ms": ttft_ms, "itl_ms": itl_ms, "e2e_ms": e2e_ms, "tpot_ms": tpot_ms}


def _stats(prefix, values, pcts, out):
    out["mean_%s_ms" % prefix] = mean(values)
    out["median_%s_ms" % prefix] = percentile(values, 50)
    out["std_%s_ms" % prefix] = stdev(values)
    for p in pcts:
        out["p%s_%s_ms" % (_pct_name(p), prefix)] = percentile(values, p)


def _pct_name(p):
    return ("%g" % p).replace(".", "_")


def summarize(records, duration_s, pcts=(90, 99)):
    """The benchmark summary from per-request records (dicts with success, prompt_tokens,
    output_tokens, cached_tokens, ttft_ms, itl_ms, e2e_ms, tpot_ms) and the wall time."""
    ok = [r for r in records if r.get("success")]
    s = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration_s,
        "total_input_tokens": sum(r.get("prompt_tokens") or 0 for r in ok),
        "total_output_tokens": sum(r.get("output_tokens") or 0 for r in ok),
    }
    d = duration_s if duration_s and duration_s > 0 else None
    s["request_throughput"] = len(ok) / d if d else None
    s["output_throughput"] = s["total_output_tokens"] / d if d else None
    s["total_token_throughput"] = (s["total_input_tokens"] + s["total_output_tokens"]) / d if d else None
    _stats("ttft", [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None], pcts, s)
    _stats("tpot", [r["tpot_ms"] for r in ok if r.get("tpot_ms") is not None], pcts, s)
    _stats("itl", [x for r in ok for x in r.get("itl_ms") or []], pcts, s)
    _stats("e2el", [r["e2e_ms"] for r in ok if r.get("e2e_ms") is not None], pcts, s)
    cached = sum(r.get("cached_tokens") or 0 for r in ok)
    s["total_cached_tokens"] = cached
    s["usage_cache_hit_rate"] = (cached / s["total_input_tokens"]) if s["total_input_tokens"] else None
    s.update(served_by_counts(records))
    return s


def served_by_counts(records):
    """Behind a balancer: {served_by_requests: {replica: requests answered}, served_by_jobs:
    {replica: jobs (conversations) it answered at least one request of}}, or {} when no record
    names a replica."""
    reqs, jobs = {}, {}
    for r in records:
        name = r.get("served_by")
        if name:
            reqs[name] = reqs.get(name, 0) + 1
            jobs.setdefault(name, set()).add(r.get("job"))
    if not reqs:
        return {}
    return {"served_by_requests": dict(sorted(reqs.items())),
            "served_by_jobs": {k: len(v) for k, v in sorted(jobs.items())}}


# ----------------------------------------------------------------------------- parsing


class SSEParser:
    """Incremental Server-Sent Events parser: feed it lines (bytes or str), it returns the data
    of each complete event (str) at the blank line that ends it, else None. Comments (":") and
    fields other than data are skipped; multi-line data fields are joined with newlines."""

    def __init__(self):
        self._data = []

    def feed(self, line):
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        line = line.rstrip("\r\n")
        if line == "":
            return self.flush()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        return None

    def flush(self):
        """The pending event's data (at end of stream without a final blank line), or None."""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        return data


_PROM_RE = re.compile(r"^([A-Za-z_:][\w:]*?)(prefix_cache_(?:queries|hits))(?:_total)?(\{[^}]*\})?\s+(\S+)")


def parse_prefix_cache_metrics(text):
    """Sums the prefix-cache query and hit counters in Prometheus text, per name prefix
    ("vllm:", "kvserve_", ...). Returns {"queries": q, "hits": h} for the first prefix that has
    both (vllm: first), or None."""
    found = {}
    for line in text.splitlines():
        m = _PROM_RE.match(line)
        if not m:
            continue
        try:
            v = float(m.group(4))
        except ValueError:
            continue
        key = "queries" if m.group(2).endswith("queries") else "hits"
        d = found.setdefault(m.group(1), {})
        d[key] = d.get(key, 0.0) + v
    for ns in sorted(found, key=lambda n: (n != "vllm:", n)):
        if "queries" in found[ns] and "hits" in found[ns]:
            return found[ns]
    return None


def hit_rate(before, after):
    """Prefix-cache hit rate between two parse_prefix_cache_metrics results, or None."""
    if not before or not after:
        return None
    dq = after["queries"] - before["queries"]
    dh = after["hits"] - before["hits"]
    return dh / dq if dq > 0 else None


# ----------------------------------------------------------------------------- workloads

WORDS = (
    "the of and to in is was that for on with as by at from his her they you this have had not "
    "but are which one were all their there been when who will more would time about out so if "
    "what up into some them can only other new its than two first may any these then way like our "
    "over such make most made after also did many before must through back years where much your "
    "well down should because each just those people how too little state good very world still "
    "own see men work long get here between both life being under never day same another know "
    "while last might great old year off come since against go came right used take three house "
    "small found part again place around however home mother water room light river garden "
    "window story table winter summer forest stone bridge market friend letter morning evening "
    "dog cat bird tree flower road city village mountain ocean island cloud rain snow wind fire "
    "bread apple music paper school teacher doctor farmer sailor king queen child family road "
    "quiet happy bright dark warm cold green blue red yellow gentle brave clever tired hungry "
    "walk run jump sing read write open close carry build watch listen laugh smile remember "
    "follow answer question number letter minute hour week garden kitchen ladder basket candle"
).split()


class WordPrompter:
    """Builds prompts of random words whose token count is close to a target.

    Without a tokenizer, one word counts as one token. With one (a callable text → token count,
    e.g. the server's /tokenize), a tokens-per-word ratio is calibrated once and each prompt is
    re-sized up to twice so its count lands near the target; the final count is recorded."""

    def __init__(self, rng, count_tokens=None):
        self.rng = rng
        self.count = count_tokens
        self.ratio = 1.0
        if self.count:
            sample = self.words(400)
            n = self.count(" ".join(sample))
            if n and n > 0:
                self.ratio = n / 400.0

    def words(self, n):
        return [self.rng.choice(WORDS) for _ in range(max(0, n))]

    def make(self, n_tokens):
        """(text, estimated token count) for about n_tokens tokens."""
        n_tokens = max(1, int(n_tokens))
        ws = self.words(max(1, round(n_tokens / self.ratio)))
        text = " ".join(ws)
        if not self.count:
            return text, len(ws)
        got = self.count(text)
        for _ in range(2):
            if not got or got == n_tokens:
                break
            want = max(1, round(len(ws) * n_tokens / got))
            ws = ws[:want] if want <= len(ws) else ws + self.words(want - len(ws))
            text = " ".join(ws)
            got = self.count(text)
        return text, got if got else len(ws)


def sample_len(rng, mean_len, ratio):
    """A length drawn uniformly from [mean·(1-ratio), mean·(1+ratio)], at least 1."""
    lo = max(1, int(math.floor(mean_len * (1.0 - ratio))))
    hi = max(lo, int(math.ceil(mean_len * (1.0 + ratio))))
    return rng.randint(lo, hi)


def turn(prompt, prompt_len, output_len, system=None):
    """One request of a job: a user text (with an optional system text) and its output length."""
    return {"prompt": prompt, "prompt_len": prompt_len, "output_len": output_len, "system": system}


def random_jobs(rng, prompter, n, in_len, out_len, ratio):
    """n single-request jobs of random prompts (independent; no shared prefix on purpose)."""
    jobs = []
    for _ in range(n):
        text, est = prompter.make(sample_len(rng, in_len, ratio))
        jobs.append([turn(text, est, sample_len(rng, out_len, ratio))])
    return jobs


def shared_prefix_jobs(rng, prompter, n_groups, per_group, sys_len, q_len, out_len, n=None):
    """SGLang's generated-shared-prefix workload: n_groups system prompts of sys_len tokens, each
    followed by per_group questions of q_len tokens; shuffled; the first n kept if given."""
    jobs = []
    for _ in range(n_groups):
        system, sys_est = prompter.make(sys_len)
        for _ in range(per_group):
            q, q_est = prompter.make(q_len)
            jobs.append([turn(q, sys_est + q_est, out_len, system=system)])
    rng.shuffle(jobs)
    return jobs[:n] if n is not None else jobs


def multi_turn_jobs(rng, prompter, n_conv, n_turns, q_len, out_len, ratio, sys_len=0):
    """n_conv conversations of n_turns questions; each turn is sent with the whole history
    (earlier questions and the server's answers), so turns of a conversation run in order."""
    jobs = []
    for _ in range(n_conv):
        system = prompter.make(sys_len)[0] if sys_len > 0 else None
        conv = []
        for _ in range(n_turns):
            q, est = prompter.make(sample_len(rng, q_len, ratio))
            conv.append(turn(q, est, sample_len(rng, out_len, ratio), system=system))
        jobs.append(conv)
    return jobs


def jsonl_jobs(path, prompter, out_len, n=None):
    """Jobs from a JSONL file: one object per line with "prompt" and an optional "output_len"."""
    jobs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if n is not None and len(jobs) >= n:
                break
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            p = obj["prompt"]
            est = prompter.count(p) if prompter.count else None
            jobs.append([turn(p, est or len(p.split()), int(obj.get("output_len") or out_len))])
    return jobs


def arrival_offsets(rng, n, rate, burstiness=1.0):
    """Send times (seconds from the start) of n requests: all 0 for an infinite rate, else gaps
    drawn from a gamma distribution with shape burstiness and mean 1/rate (Poisson at 1.0)."""
    if rate is None or math.isinf(rate) or rate <= 0:
        return [0.0] * n
    theta = 1.0 / (rate * burstiness)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out


# ----------------------------------------------------------------------------- HTTP


class Target:
    """The server: scheme, host, port and path prefix from --base-url; the only host contacted."""

    def __init__(self, base_url, timeout, api_key=None):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("--base-url must look like http://host:port, got %r" % base_url)
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def conn(self, timeout=None):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout or self.timeout)

    def call(self, method, path, body=None, timeout=10.0, limit=1 << 24):
        """(status, body bytes) of a plain request; raises OSError/HTTPException on failure."""
        c = self.conn(timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            c.request(method, self.prefix + path, body=data, headers=self.headers)
            r = c.getresponse()
            return r.status, r.read(limit)
        finally:
            c.close()

    def get_json(self, path, body=None, method="GET"):
        try:
            st, data = self.call(method, path, body)
            return json.loads(data) if st == 200 else None
        except (OSError, http.client.HTTPException, ValueError):
            return None


def server_tokenizer(target):
    """A text → token count callable backed by the server's POST /tokenize, or None when it has none.

    Two request shapes exist: vLLM's (and kvserve's) {"prompt": text}, which counts the special
    tokens the server adds (BOS), and llama.cpp's {"content": text, "add_special": true}, which
    then counts the same. The vLLM shape is tried first; a server that answers it with no tokens
    for a non-empty text (llama.cpp ignores the unknown field) is asked in its own shape. So two
    servers with one tokenizer calibrate the same seed to the same prompts."""
    shapes = (lambda t: {"prompt": t}, lambda t: {"content": t, "add_special": True})

    def ask(shape, text):
        r = target.get_json("/tokenize", shape(text), method="POST")
        if not isinstance(r, dict):
            return None
        return r.get("count", len(r.get("tokens") or [])) or None

    for shape in shapes:
        if ask(shape, "hello world"):
            return lambda text, shape=shape: ask(shape, text)
    return None


def default_model(target):
    r = target.get_json("/v1/models")
    try:
        return r["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        return None


def read_metrics(target):
    try:
        st, data = target.call("GET", "/metrics")
    except (OSError, http.client.HTTPException):
        return None
    return parse_prefix_cache_metrics(data.decode("utf-8", "replace")) if st == 200 else None


def chunk_text(obj, chat):
    """The text a streamed chunk carries ("" when none)."""
    try:
        ch = obj.get("choices") or []
        if not ch:
            return ""
        if chat:
            return (ch[0].get("delta") or {}).get("content") or ""
        return ch[0].get("text") or ""
    except AttributeError:
        return ""


def build_body(model, t, history, chat, args):
    """The JSON body of one streamed request: turn t after the given history of (question,
    answer) pairs."""
    body = {"model": model, "max_tokens": t["output_len"], "temperature": args.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if chat:
        msgs = [{"role": "system", "content": t["system"]}] if t["system"] else []
        for q, a in history:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        msgs.append({"role": "user", "content": t["prompt"]})
        body["messages"] = msgs
    else:
        parts = [t["system"]] if t["system"] else []
        for q, a in history:
            parts += [q, a]
        parts.append(t["prompt"])
        body["prompt"] = "\n".join(parts)
    return body


def stream_request(target, path, body, chat, timeout, headers=None, served_by_header=None):
    """Sends one streamed request (with the extra headers, if any) and times it. Returns
    {success, error, usage, text, t_start, content_times, t_end, http_status, served_by,
    start_unix_s}; the
    times are time.perf_counter() seconds, served_by the value of the response header
    served_by_header (which replica behind a balancer answered). Never raises: any failure
    (connection, HTTP status, error event, a stream cut before [DONE], bad JSON, --timeout) is
    the request's error."""
    rec = {"success": False, "error": None, "text": "", "usage": None, "http_status": None,
           "served_by": None, "start_unix_s": time.time()}
    content_times, parts = [], []
    t_start = time.perf_counter()
    deadline = t_start + timeout
    c = target.conn(timeout)
    try:
        c.request("POST", target.prefix + path, body=json.dumps(body).encode(),
                  headers=dict(target.headers, Accept="text/event-stream", **(headers or {})))
        r = c.getresponse()
        rec["http_status"] = r.status
        if served_by_header:
            rec["served_by"] = r.getheader(served_by_header)
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, r.read(2048).decode("utf-8", "replace")[:300]))
        sse, done = SSEParser(), False
        while not done:
            line = r.readline(1 << 22)
            now = time.perf_counter()
            data = sse.feed(line) if line else sse.flush()
            if data is not None:
                if data.strip() == "[DONE]":
                    done = True
                    break
                obj = json.loads(data)
                if isinstance(obj, dict) and obj.get("error"):
                    err = obj["error"]
                    raise RuntimeError("stream error: %s" % (err.get("message") if isinstance(err, dict) else err))
                txt = chunk_text(obj, chat)
                if txt:
                    content_times.append(now)
                    parts.append(txt)
                if isinstance(obj, dict) and obj.get("usage"):
                    rec["usage"] = obj["usage"]
            if not line:
                break
            if now > deadline:
                raise TimeoutError("request exceeded --timeout %.0f s" % timeout)
        rec["success"] = done and bool(content_times)
        if not done:
            rec["error"] = "stream ended before [DONE]"
        elif not content_times:
            rec["error"] = "no text received"
    except Exception as e:  # every failure of one request is that request's result
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()
    rec["t_end"] = time.perf_counter()
    rec["t_start"] = t_start
    rec["content_times"] = content_times
    rec["text"] = "".join(parts)
    return rec


def finish_record(raw, t0, est_prompt_len, chunks_as_tokens=True):
    """A per-request record for the JSON from a stream_request result (times relative to t0)."""
    usage = raw.get("usage") or {}
    out_tokens = usage.get("completion_tokens")
    if out_tokens is None and chunks_as_tokens:
        out_tokens = len(raw["content_times"])
    m = timeline_metrics(raw["t_start"], raw["content_times"], raw["t_end"], out_tokens)
    details = usage.get("prompt_tokens_details") or {}
    rec = {
        "success": raw["success"],
        "error": raw["error"],
        "start_s": raw["t_start"] - t0,
        "start_unix_s": raw.get("start_unix_s"),
        "prompt_tokens": usage.get("prompt_tokens", est_prompt_len),
        "prompt_tokens_estimated": est_prompt_len,
        "output_tokens": out_tokens,
        "cached_tokens": details.get("cached_tokens"),
        "n_chunks": len(raw["content_times"]),
        "http_status": raw.get("http_status"),
        "served_by": raw.get("served_by"),
    }
    rec.update(m)
    return rec


# ----------------------------------------------------------------------------- runner


def run_jobs(target, model, jobs, args, chat, path, offsets, max_duration):
    """Runs the jobs (each a list of turns sent in order with a growing history) with at most
    args.max_concurrency in flight and the given send offsets. Returns (records, duration_s)."""
    n_workers = args.max_concurrency or min(len(jobs), args.max_threads)
    records, lock = [], threading.Lock()
    t0 = time.perf_counter()
    stop_at = t0 + max_duration

    def run_job(ji):
        history = []
        # One session id per job (a conversation, or a single request), the same for its turns.
        headers = {"x-session-id": "s%d-%d" % (args.seed, ji)} if args.session_header else None
        for ti, t in enumerate(jobs[ji]):
            if time.perf_counter() > stop_at:
                return
            body = build_body(model, t, history, chat, args)
            raw = stream_request(target, path, body, chat, args.timeout, headers,
                                 args.served_by_header)
            rec = finish_record(raw, t0, t["prompt_len"])
            rec.update({"job": ji, "turn": ti})
            with lock:
                records.append(rec)
            if not raw["success"]:
                return
            history.append((t["prompt"], raw["text"]))

    with ThreadPoolExecutor(max_workers=max(1, n_workers)) as ex:
        futs = []
        for ji in range(len(jobs)):
            wait = t0 + offsets[ji] - time.perf_counter()
            if t0 + offsets[ji] > stop_at:
                break
            if wait > 0:
                time.sleep(wait)
            futs.append(ex.submit(run_job, ji))
        for f in futs:
            f.result()
    duration = time.perf_counter() - t0
    records.sort(key=lambda r: (r["job"], r["turn"]))
    return records, duration


# ----------------------------------------------------------------------------- report


def format_table(s, pcts):
    """A vLLM-style text table of the summary."""
    w = 50
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=w, c="=")]

    def row(label, v, fmt="{:<10.2f}"):
        val = "n/a" if v is None else (fmt.format(v) if not isinstance(v, str) else v)
        lines.append("{:<40} {}".format(label, val).rstrip())

    row("Successful requests:", s["completed"], "{:<10}")
    row("Failed requests:", s["failed"], "{:<10}")
    if s.get("max_concurrency"):
        row("Maximum request concurrency:", s["max_concurrency"], "{:<10}")
    row("Benchmark duration (s):", s["duration"])
    row("Total input tokens:", s["total_input_tokens"], "{:<10}")
    row("Total generated tokens:", s["total_output_tokens"], "{:<10}")
    row("Request throughput (req/s):", s["request_throughput"])
    row("Output token throughput (tok/s):", s["output_throughput"])
    row("Total Token throughput (tok/s):", s["total_token_throughput"])
    if s.get("prefix_cache_hit_rate") is not None:
        row("Prefix cache hit rate (/metrics):", s["prefix_cache_hit_rate"], "{:<10.4f}")
    if s.get("usage_cache_hit_rate") is not None and s.get("total_cached_tokens"):
        row("Cached prompt tokens (usage) ratio:", s["usage_cache_hit_rate"], "{:<10.4f}")
    for key, title in (("served_by_requests", "Requests per replica:"),
                       ("served_by_jobs", "Conversations per replica:")):
        if s.get(key):
            row(title, " ".join("%s=%d" % kv for kv in s[key].items()))
    for key, title, name in (("ttft", "Time to First Token", "TTFT"),
                             ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
                             ("itl", "Inter-token Latency", "ITL"),
                             ("e2el", "End-to-end Latency", "E2EL")):
        lines.append("{s:{c}^{n}}".format(s=title, n=w, c="-"))
        row("Mean %s (ms):" % name, s["mean_%s_ms" % key])
        row("Median %s (ms):" % name, s["median_%s_ms" % key])
        for p in pcts:
            row("P%s %s (ms):" % (_pct_name(p), name), s["p%s_%s_ms" % (_pct_name(p), key)])
    lines.append("=" * w)
    return "\n".join(lines)
