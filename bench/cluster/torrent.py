#!/usr/bin/python3
"""libtorrent baseline of the cluster benchmark (python3-libtorrent, Debian's 2.0.8).

  torrent.py make DATA_DIR OUT.torrent [--piece-size 262144]
      a v1 torrent of every file under DATA_DIR (no trackers: peers are connected by address)
  torrent.py run --torrent T --save DIR --listen ADDR:PORT [--peer ADDR:PORT]... [--seed]
                 --ready F --go F --stop F --result F [--timeout 600]
      one host: seed (DIR holds the data) or peer (DIR empty); waits for the go file, connects to
      every --peer, writes F (result) the moment it holds every piece, keeps uploading until the
      stop file appears, then rewrites the result with its final upload counters.

Tuning (so that the comparison is fair to libtorrent on a 2-core machine): TCP only
(uTP's per-packet work would saturate the CPU), unlimited unchoke slots, strict end game off,
DHT / LSD / UPnP / NAT-PMP / PEX off, peers connected directly, no rate limits, 256 KiB pieces,
v1-only metadata (v2's per-block Merkle hashing costs CPU and buys nothing here).
For tuning experiments, $WC_TORRENT_SETTINGS (a JSON object) is merged over these settings, and
$WC_TORRENT_SUPER_SEED=1 makes the seed super-seed.
"""

import argparse
import json
import os
import sys
import time

import libtorrent as lt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse_addr, wait_for_go, write_json_atomic  # noqa: E402


def make(args):
    data = os.path.abspath(args.data_dir)
    fs = lt.file_storage()
    lt.add_files(fs, data)
    if fs.num_files() == 0:
        sys.exit(f"no files under {data}")
    t = lt.create_torrent(fs, args.piece_size, flags=lt.create_torrent.v1_only)
    t.set_creator("weightcast cluster bench")
    lt.set_piece_hashes(t, os.path.dirname(data))
    with open(args.out, "wb") as f:
        f.write(lt.bencode(t.generate()))
    print(f"{args.out}: {fs.num_files()} files, {fs.total_size()} bytes, "
          f"{t.num_pieces()} pieces of {args.piece_size}")


def session_settings(listen):
    return {
        "listen_interfaces": listen,
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "enable_outgoing_tcp": True,
        "enable_incoming_tcp": True,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "unchoke_slots_limit": -1,
        "strict_end_game_mode": False,
        "connections_limit": 500,
        "active_downloads": -1,
        "active_seeds": -1,
        "active_limit": -1,
        "alert_mask": int(lt.alert.category_t.error_notification),
    }


def run(args):
    deadline = time.time() + args.timeout
    host, port = parse_addr(args.listen)
    peers = [parse_addr(p) for p in args.peer]
    settings = session_settings(f"{host}:{port}")
    settings.update(json.loads(os.environ.get("WC_TORRENT_SETTINGS", "{}")))
    ses = lt.session(settings)
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(args.torrent)
    params.save_path = args.save
    flags = lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd | lt.torrent_flags.disable_pex
    if args.seed:
        flags |= lt.torrent_flags.seed_mode  # the data is known good: no hash check at start
        if os.environ.get("WC_TORRENT_SUPER_SEED") == "1":
            flags |= lt.torrent_flags.super_seeding
    params.flags = flags  # not auto-managed: never queued, never paused by the session
    handle = ses.add_torrent(params)
    write_json_atomic(args.ready, {"host": host})

    t0 = wait_for_go(args.go, deadline)
    for p in peers:
        if p != (host, port):
            handle.connect_peer(p)

    result = {"system": "libtorrent", "host": host, "seed": args.seed, "t0": t0, "done": None}
    done = False
    last_connect = time.time()
    while time.time() < deadline:
        st = handle.status()
        if not done and st.is_seeding:
            done = True
            result["done"] = time.time()
            result["seconds"] = result["done"] - t0
            result["payload_down"] = st.total_payload_download
            result["payload_up"] = st.total_payload_upload
            write_json_atomic(args.result, result)
        if os.path.exists(args.stop):
            break
        # A connection refused before a peer listened is not retried by libtorrent without a
        # tracker; ask again now and then (a no-op for peers already connected).
        if not done and time.time() - last_connect > 2:
            for p in peers:
                if p != (host, port):
                    handle.connect_peer(p)
            last_connect = time.time()
        time.sleep(0.05)
    st = handle.status()
    result["payload_down"] = st.total_payload_download
    result["payload_up"] = st.total_payload_upload
    result["wire_up"] = st.total_upload
    result["progress"] = st.progress
    result["timed_out"] = not done
    write_json_atomic(args.result, result)
    ses.pause()
    return 0 if done else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("data_dir")
    m.add_argument("out")
    m.add_argument("--piece-size", type=int, default=256 * 1024)
    r = sub.add_parser("run")
    r.add_argument("--torrent", required=True)
    r.add_argument("--save", required=True)
    r.add_argument("--listen", required=True)
    r.add_argument("--peer", action="append", default=[])
    r.add_argument("--seed", action="store_true")
    r.add_argument("--ready", required=True)
    r.add_argument("--go", required=True)
    r.add_argument("--stop", required=True)
    r.add_argument("--result", required=True)
    r.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.cmd == "make":
        make(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
