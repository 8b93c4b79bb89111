#!/usr/bin/env python3
"""The wire recorder of deploy/gazelle/record/record, and the transcript it
writes (tests/fixtures/gazelle/ocelot-transcript.txt): record, format,
parse, replay.

Python 3.11, standard library only.

  wire.py serve --listen PORT --upstream PORT --site PORT --control PORT
                --events FILE
      A TCP proxy on 127.0.0.1:PORT in front of Ocelot on
      127.0.0.1:UPSTREAM: each connection's bytes are passed on unchanged
      in both directions, and once both sides have closed, what the client
      sent and what Ocelot sent back are appended, whole, to FILE (JSON
      lines). On 127.0.0.1:SITE it stands in for Gazelle's tools.php, the
      page Ocelot calls back to expire freeleech tokens: it records the
      request and answers 200 with an empty body, as that page does when
      it accepts. On 127.0.0.1:CONTROL the driver (driver.php) sends one
      JSON object a line, each answered "ok\\n" once handled:
        {"note": "call", "who": "gazelle"|"client", "label": "..."}
        {"note": "return", "value": ...}     what Gazelle's method returned
        {"note": "comment", "text": "..."}
        {"wait": "site", "count": N}          answered once N callbacks came
        {"quit": true}
      Notes go into FILE in the order they arrive; since the driver makes
      one call at a time and waits for its answer, each exchange lands
      between its call and its return.
  wire.py format --events FILE --out TRANSCRIPT --header LINE... --jitter N
      Writes the transcript (format below) from the events, marking what a
      replay may not compare exactly. N is Ocelot's announce_jitter at
      start; update_announce_jitter requests in the events change it.
  wire.py replay --transcript FILE --target PORT [--only N-M]
      Sends every request of the transcript that went to Ocelot (not the
      callbacks) to 127.0.0.1:PORT, one connection each, in order, reads
      each answer to the end and compares it with the recording as the
      `~` lines allow. Prints each difference; exits 1 if any.
  wire.py check-site --transcript FILE --events FILE
      Compares the callbacks a replay's tracker made (the events of a
      `serve` that stood in for the site) with the transcript's
      ocelot-to-site requests, byte for byte; waits up to 10 s for them.

The transcript format (a text file, one record a line):
  # ...            a comment (the header; the driver's section notes)
  === N WHO LABEL  exchange N: WHO is `gazelle` (a method of Gazelle's
                   app/Tracker.php, as LABEL says), `client` (a BitTorrent
                   client's announce or scrape, made by the driver) or
                   `ocelot-to-site` (Ocelot's token-expiry callback, whose
                   answer is the recorder's, not Gazelle's)
  > BYTES          the request, as sent
  < BYTES          the answer, as received
  ~ MASK           what a replay may not compare exactly (below)
  = JSON           what Gazelle's method returned to its caller (after
                   the exchange(s) it made), as JSON
BYTES: the bytes of one direction, in order, split into lines after each
LF. Printable ASCII stands for itself but for the backslash (\\\\); CR, LF
and tab are \\r, \\n, \\t; any other byte, and a space that would end a
line, is \\xHH (two lower-case hex digits). So a line of BYTES ends at \\n
or where that direction's bytes end, and joining a direction's lines,
unescaped, gives its bytes back exactly.
MASK, each about the answer's body (split from its head at the first
\\r\\n\\r\\n):
  bencode-int KEY LO..HI    the integer after the bencoded key KEY
                            (`8:intervali...e`) may be any in LO..HI (the
                            announce interval plus Ocelot's random jitter)
  json-value "LABEL"        in a stats report, the value of {"LABEL":
                            {"type":...,"value":V}} may differ (V: time,
                            resource usage, connection and queue counts)
  body                      the whole body may differ (jemalloc's text)
Everything else, the head included, is compared byte for byte, but for
Content-Length, which must equal the length of the body received.
"""

import argparse
import base64
import json
import re
import socket
import sys
import threading
import time

# The stats report's labels whose values depend on time, on the machine or
# on how the flush thread's timing fell (src/report.cpp); the rest
# (version, counts of requests, announces, peers, the interval) follow
# from the requests alone.
VARYING_STATS = [
    "connections opened",
    "open connections",
    "peak connections",
    "connections/s",
    "requests/s",
    "items in user queue",
    "items in torrent queue",
    "items in peer queue",
    "items in snatch queue",
    "items in token queue",
    "bytes written",
    "uptime",
    "user time",
    "system time",
    "maximum resident set size",
    "minor page faults",
    "major page faults",
    "blocks in",
    "blocks out",
    "voluntary context switches",
    "involuntary context switches",
]


# ---------------------------------------------------------------- serve


class Recorder:
    def __init__(self, events_path):
        self.out = open(events_path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.site_calls = 0
        self.site_cond = threading.Condition(self.lock)
        self.quit = threading.Event()

    def write(self, event):
        with self.lock:
            self.out.write(json.dumps(event) + "\n")
            self.out.flush()
            if event.get("type") == "exchange" and event.get("kind") == "site":
                self.site_calls += 1
                self.site_cond.notify_all()


def b64(data):
    return base64.b64encode(data).decode("ascii")


def pump(src, dst, sink, before_end=None):
    """Copies src to dst until src ends, keeping every byte in sink; then
    calls before_end, and half-closes dst."""
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            break
        sink.append(data)
        try:
            dst.sendall(data)
        except OSError:
            pass
    if before_end:
        before_end()
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def proxy_one(client, upstream_port, rec):
    request, response = [], []
    try:
        server = socket.create_connection(("127.0.0.1", upstream_port))
    except OSError as e:
        rec.write({"type": "error", "text": f"upstream: {e}"})
        client.close()
        return

    def record():
        # Written before the client sees the end of the answer: the
        # driver's next note comes after its call has returned, so the
        # exchange is in the file before it. Ocelot answers only a whole
        # request, so the request is whole by now.
        rec.write(
            {
                "type": "exchange",
                "kind": "ocelot",
                "request": b64(b"".join(request)),
                "response": b64(b"".join(response)),
            }
        )

    forth = threading.Thread(target=pump, args=(client, server, request))
    forth.start()
    pump(server, client, response, record)
    forth.join()
    server.close()
    client.close()


def site_one(client, rec):
    """Gazelle's tools.php, as far as Ocelot's callback needs: the request
    (up to its blank line; it has no body), then 200 with no body."""
    data = b""
    client.settimeout(10)
    try:
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        client.sendall(answer)
    except OSError:
        answer = b""
    client.close()
    rec.write({"type": "exchange", "kind": "site", "request": b64(data), "response": b64(answer)})


def control_one(conn, rec):
    f = conn.makefile("rwb")
    for line in f:
        msg = json.loads(line)
        if "note" in msg:
            rec.write({"type": "note", **msg})
        elif "wait" in msg:
            with rec.site_cond:
                rec.site_cond.wait_for(lambda: rec.site_calls >= msg["count"], msg.get("timeout", 15))
        elif msg.get("quit"):
            rec.quit.set()
        f.write(b"ok\n")
        f.flush()
    conn.close()


def listener(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    return s


def accept_loop(sock, handle):
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def serve(args):
    rec = Recorder(args.events)
    for port, handle in [
        (args.listen, lambda c: proxy_one(c, args.upstream, rec)),
        (args.site, lambda c: site_one(c, rec)),
        (args.control, lambda c: control_one(c, rec)),
    ]:
        sock = listener(port)
        threading.Thread(target=accept_loop, args=(sock, handle), daemon=True).start()
    print("listening", flush=True)
    rec.quit.wait()


# ---------------------------------------------------------------- format


def escape_lines(data):
    """BYTES as the transcript writes them: one string a line."""
    lines, cur = [], []
    for i, b in enumerate(data):
        if b == 0x0A:
            cur.append("\\n")
            lines.append("".join(cur))
            cur = []
        elif b == 0x0D:
            cur.append("\\r")
        elif b == 0x09:
            cur.append("\\t")
        elif b == 0x5C:
            cur.append("\\\\")
        elif b == 0x20:
            # Only the very last byte can end a line on a space.
            cur.append("\\x20" if i + 1 == len(data) else " ")
        elif 0x20 < b < 0x7F:
            cur.append(chr(b))
        else:
            cur.append(f"\\x{b:02x}")
    if cur:
        lines.append("".join(cur))
    return lines


ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|r|n|t|\\)")


def unescape(text):
    out = bytearray()
    pos = 0
    for m in ESCAPE.finditer(text):
        out += text[pos : m.start()].encode("ascii")
        code = m.group(1)
        out += {"r": b"\r", "n": b"\n", "t": b"\t", "\\": b"\\"}.get(code) or bytes(
            [int(code[1:], 16)]
        )
        pos = m.end()
    rest = text[pos:]
    if "\\" in rest:
        raise ValueError(f"bad escape in {text!r}")
    out += rest.encode("ascii")
    return bytes(out)


def split_answer(data):
    at = data.find(b"\r\n\r\n")
    if at < 0:
        return data, b""
    return data[: at + 4], data[at + 4 :]


def request_target(request):
    line = request.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return parts[1] if len(parts) > 1 else b""


def query_param(target, key):
    query = target.split(b"?", 1)[1] if b"?" in target else b""
    value = None
    for pair in query.split(b"&"):
        k, _, v = pair.partition(b"=")
        if k == key:
            value = v
    return value


def masks_for(request, response, state):
    """The `~` lines of one exchange with Ocelot."""
    target = request_target(request)
    _, body = split_answer(response)
    path = target.split(b"?", 1)[0]
    action = path.rsplit(b"/", 1)[-1]
    if action == b"update":
        # Track the runtime interval and jitter the announces draw from.
        if query_param(target, b"action") == b"update_announce_jitter":
            state["jitter"] = int(query_param(target, b"new_announce_jitter") or b"0")
        return []
    if action == b"report":
        get = query_param(target, b"get")
        if get == b"stats" and body.startswith(b"{"):
            return [f'json-value "{label}"' for label in VARYING_STATS if f'"{label}":'.encode() in body]
        if get in (b"jemalloc", b"prom_stats"):
            return ["body"]
        return []
    if action == b"announce" and not body.startswith(b"d14:failure reason"):
        m = re.search(rb"12:min intervali(\d+)e", body)
        if m and b"8:intervali" in body:
            low = int(m.group(1))
            return [f"bencode-int interval {low}..{low + state['jitter']}"]
    return []


def format_events(args):
    events = [json.loads(line) for line in open(args.events, encoding="utf-8") if line.strip()]
    state = {"jitter": args.jitter}
    doc = __doc__[__doc__.index("The transcript format") :].rstrip("\n").split("\n")
    header = args.header + [""] + doc
    out = [f"# {line}".rstrip() for line in header]
    n = 0
    label = None
    pending_return = False
    for ev in events:
        kind = ev["type"]
        if kind == "note" and ev["note"] == "comment":
            out += ["", f"# {ev['text']}"]
        elif kind == "note" and ev["note"] == "call":
            label = (ev["who"], ev["label"])
            pending_return = ev["who"] == "gazelle"
        elif kind == "note" and ev["note"] == "return":
            if not pending_return:
                raise SystemExit(f"a return without a call: {ev}")
            out.append("= " + json.dumps(ev["value"], ensure_ascii=True, separators=(",", ":")))
            pending_return = False
        elif kind == "exchange":
            n += 1
            request = base64.b64decode(ev["request"])
            response = base64.b64decode(ev["response"])
            if ev["kind"] == "site":
                who, text = "ocelot-to-site", "Ocelot's token-expiry callback to tools.php"
            elif label is None:
                raise SystemExit(f"exchange {n} came with no call note")
            else:
                who, text = label
            out += ["", f"=== {n} {who} {text}"]
            out += [f"> {line}" for line in escape_lines(request)]
            out += [f"< {line}" for line in escape_lines(response)]
            if ev["kind"] == "ocelot":
                out += [f"~ {mask}" for mask in masks_for(request, response, state)]
        elif kind == "error":
            raise SystemExit(f"the recorder failed: {ev['text']}")
    if pending_return:
        raise SystemExit("the last call has no return")
    with open(args.out, "w", encoding="ascii") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------- parse


class Exchange:
    def __init__(self, number, who, label):
        self.number = number
        self.who = who
        self.label = label
        self.request = []
        self.response = []
        self.masks = []
        self.returned = None

    @property
    def request_bytes(self):
        return b"".join(unescape(line) for line in self.request)

    @property
    def response_bytes(self):
        return b"".join(unescape(line) for line in self.response)


def parse(path):
    """The exchanges of a transcript, in order."""
    exchanges = []
    for lineno, line in enumerate(open(path, encoding="ascii"), 1):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        tag, _, rest = line.partition(" ")
        if tag == "===":
            number, who, label = rest.split(" ", 2)
            exchanges.append(Exchange(int(number), who, label))
            continue
        if not exchanges:
            raise SystemExit(f"{path}:{lineno}: a record before the first exchange")
        ex = exchanges[-1]
        if tag == ">":
            ex.request.append(rest)
        elif tag == "<":
            ex.response.append(rest)
        elif tag == "~":
            ex.masks.append(rest)
        elif tag == "=":
            ex.returned = json.loads(rest)
        else:
            raise SystemExit(f"{path}:{lineno}: unknown record {tag!r}")
    return exchanges


# ---------------------------------------------------------------- replay


def masked_body(body, masks):
    """The body with every masked value replaced by a marker, and the
    values found, for the range checks."""
    found = []
    for mask in masks:
        if mask == "body":
            return b"<body>", found
        kind, _, arg = mask.partition(" ")
        if kind == "bencode-int":
            key, span = arg.split(" ")
            key_b = key.encode()
            pattern = re.escape(str(len(key_b)).encode() + b":" + key_b + b"i") + rb"(-?\d+)e"
            m = re.search(pattern, body)
            if m:
                found.append((key, int(m.group(1)), span))
                body = body[: m.start(1)] + b"<int>" + body[m.end(1) :]
        elif kind == "json-value":
            label = json.loads(arg).encode()
            pattern = re.escape(b'"' + label + b'":{"type":"') + rb'[a-z]+","value":([^}]*)\}'
            m = re.search(pattern, body)
            if m:
                body = body[: m.start(1)] + b"<value>" + body[m.end(1) :]
        else:
            raise SystemExit(f"unknown mask {mask!r}")
    return body, found


def compare(recorded, received, masks):
    """The differences between a recorded answer and one received, as the
    masks allow; empty when they agree."""
    diffs = []
    rec_head, rec_body = split_answer(recorded)
    got_head, got_body = split_answer(received)

    def head_lines(head):
        lines = []
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                lines.append(b"Content-Length: <len>")
            else:
                lines.append(line)
        return lines

    if head_lines(rec_head) != head_lines(got_head):
        diffs.append(f"head: recorded {rec_head!r}, received {got_head!r}")
    m = re.search(rb"(?im)^content-length: (\d+)\r$", got_head)
    if m and int(m.group(1)) != len(got_body):
        diffs.append(f"Content-Length {m.group(1).decode()} but a body of {len(got_body)} bytes")
    want, _ = masked_body(rec_body, masks)
    got, values = masked_body(got_body, masks)
    if want != got:
        diffs.append(f"body: recorded {rec_body!r}, received {got_body!r}")
    for key, value, span in values:
        low, high = (int(x) for x in span.split(".."))
        if not low <= value <= high:
            diffs.append(f"{key} {value} outside {span}")
    return diffs


def exchange_with(port, request):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def replay(args):
    exchanges = [ex for ex in parse(args.transcript) if ex.who != "ocelot-to-site"]
    if args.only:
        first, _, last = args.only.partition("-")
        exchanges = [ex for ex in exchanges if int(first) <= ex.number <= int(last or first)]
    failed = 0
    for ex in exchanges:
        received = exchange_with(args.target, ex.request_bytes)
        diffs = compare(ex.response_bytes, received, ex.masks)
        if diffs:
            failed += 1
            print(f"exchange {ex.number} ({ex.who} {ex.label}):")
            for d in diffs:
                print(f"  {d}")
    print(f"{len(exchanges) - failed} of {len(exchanges)} exchanges as recorded")
    return 1 if failed else 0


def check_site(args):
    want = [ex.request_bytes for ex in parse(args.transcript) if ex.who == "ocelot-to-site"]
    got = []
    for _ in range(100):
        got = []
        for line in open(args.events, encoding="utf-8"):
            ev = json.loads(line)
            if ev.get("type") == "exchange" and ev.get("kind") == "site":
                got.append(base64.b64decode(ev["request"]))
        if len(got) >= len(want):
            break
        time.sleep(0.1)
    if got != want:
        print(f"callbacks to the site: recorded {want!r}, received {got!r}")
        return 1
    print(f"{len(want)} of {len(want)} callbacks to the site as recorded")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    for name in ("listen", "upstream", "site", "control"):
        s.add_argument(f"--{name}", type=int, required=True)
    s.add_argument("--events", required=True)
    f = sub.add_parser("format")
    f.add_argument("--events", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--header", nargs="*", default=[])
    f.add_argument("--jitter", type=int, required=True)
    r = sub.add_parser("replay")
    r.add_argument("--transcript", required=True)
    r.add_argument("--target", type=int, required=True)
    r.add_argument("--only")
    c = sub.add_parser("check-site")
    c.add_argument("--transcript", required=True)
    c.add_argument("--events", required=True)
    args = p.parse_args()
    if args.cmd == "serve":
        serve(args)
    elif args.cmd == "format":
        format_events(args)
    elif args.cmd == "check-site":
        sys.exit(check_site(args))
    else:
        sys.exit(replay(args))


if __name__ == "__main__":
    main()
