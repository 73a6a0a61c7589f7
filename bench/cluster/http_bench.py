#!/usr/bin/python3
"""Plain-HTTP baseline of the cluster benchmark: one server on the source, every other host a
client that downloads each file once, one after the other (what `curl` in a loop would do).

  http_bench.py serve --dir DIR --listen ADDR:PORT --ready F --stop F [--timeout 600]
  http_bench.py fetch --url-base http://ADDR:PORT --file REL... --out DIR
                      --ready F --go F --result F [--timeout 600]

The server is the standard library's threaded server (one thread per client connection); the
source's upload link is the bottleneck by design: N clients share it.
"""

import argparse
import functools
import http.server
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse_addr, wait_for_go, write_json_atomic  # noqa: E402


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request on stderr is noise at 16 hosts
        pass


def serve(args):
    host, port = parse_addr(args.listen)
    handler = functools.partial(QuietHandler, directory=args.dir)
    httpd = http.server.ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    write_json_atomic(args.ready, {"host": host})
    deadline = time.time() + args.timeout
    while time.time() < deadline and not os.path.exists(args.stop):
        time.sleep(0.1)
    httpd.shutdown()
    return 0


def fetch(args):
    deadline = time.time() + args.timeout
    write_json_atomic(args.ready, {"out": args.out})
    t0 = wait_for_go(args.go, deadline)
    got = 0
    for rel in args.file:
        dest = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        left = deadline - time.time()
        if left <= 0:
            raise TimeoutError("deadline passed")
        with urllib.request.urlopen(f"{args.url_base}/{rel}", timeout=min(left, 60)) as resp, \
                open(dest, "wb") as out:
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                out.write(block)
                got += len(block)
    done = time.time()
    write_json_atomic(args.result, {"system": "http", "t0": t0, "done": done,
                                    "seconds": done - t0, "payload_down": got})
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--dir", required=True)
    s.add_argument("--listen", required=True)
    s.add_argument("--ready", required=True)
    s.add_argument("--stop", required=True)
    s.add_argument("--timeout", type=float, default=600)
    f = sub.add_parser("fetch")
    f.add_argument("--url-base", required=True)
    f.add_argument("--file", action="append", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--ready", required=True)
    f.add_argument("--go", required=True)
    f.add_argument("--result", required=True)
    f.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    return serve(args) if args.cmd == "serve" else fetch(args)


if __name__ == "__main__":
    sys.exit(main())
