#!/usr/bin/python3
"""End-to-end swarm test: a real BitTorrent client (libtorrent) through our tracker.

A seeder and a leecher, two libtorrent sessions on 127.0.0.1 (or the address
--listen-ip names), share a freshly generated random file. They can only learn
about each other from the tracker: DHT, local service discovery, UPnP, NAT-PMP
and peer exchange are all off, and the script never hands a peer address to
either session. Success means the leecher reaches the seeding state and its copy
of the file has the original's bytes.

Needs Debian's python3-libtorrent, which installs for /usr/bin/python3 only:

    apt-get install python3-libtorrent
    /usr/bin/python3 tests/e2e/swarm.py --tracker udp://127.0.0.1:6969/announce

--tracker may be given twice: the seeder then announces to the first URL and
the leecher to the second (e.g. one udp:// and one https:// endpoint of the same
tracker process). Both URLs must end up in the same swarm for the download to
complete. --insecure accepts a self-signed certificate on https:// trackers.

For a private tracker (UNIT3D-style, passkeys in the announce URLs):
--private marks the torrent private (`private = 1` in the info dict, which
changes its info-hash), --register URL puts the new torrent to the tracker's
site API (PUT URL with UNIT3D's JSON, torrent id --torrent-id) before either
session announces, and the script waits for the answer to the leecher's
event=completed announce (the one that counts the snatch) before it stops the
torrents; --seed-for keeps both seeding a while before the stop (private
trackers count seedtime between announces). Just before the stop, a line per
client gives the totals its stopped announce reports:

    TOTALS seeder uploaded=N downloaded=N


Exit status: 0 on success, 1 on timeout or any failure, 2 on bad arguments,
3 when libtorrent cannot be imported.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import libtorrent as lt
except ImportError as e:  # pragma: no cover - depends on the machine
    print(
        f"swarm.py: cannot import libtorrent ({e}) with {sys.executable}; "
        "run `apt-get install python3-libtorrent` and use /usr/bin/python3",
        file=sys.stderr,
    )
    sys.exit(3)


def log(msg):
    print(f"[{time.monotonic() - START:7.2f}s] {msg}", flush=True)


START = time.monotonic()


class Failure(Exception):
    pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--tracker",
        action="append",
        required=True,
        metavar="URL",
        help="tracker announce URL; give twice for seeder URL then leecher URL",
    )
    p.add_argument(
        "--size",
        type=int,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="size of the generated file (default 4 MiB)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="give up after this long (default 90)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="accept any certificate (e.g. self-signed) from https:// trackers",
    )
    p.add_argument(
        "--torrent-version",
        choices=["v1", "hybrid", "v2"],
        default="v1",
        help="kind of .torrent to create (default v1; hybrid announces both "
        "the v1 and the truncated v2 info-hash)",
    )
    p.add_argument(
        "--reannounce-after",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="if the leecher has had no peer for this long, ask it to announce "
        "again (ignoring the tracker's min interval); 0 disables (default 5)",
    )
    p.add_argument(
        "--leecher-first",
        action="store_true",
        help="start the leecher first (its first announce finds no peer; the "
        "seeder then learns of it from the tracker)",
    )
    p.add_argument(
        "--private",
        action="store_true",
        help="make a private torrent (private = 1 in the info dict; this "
        "changes the info-hash) and, before stopping, wait for the answer to "
        "the leecher's event=completed announce",
    )
    p.add_argument(
        "--register",
        metavar="URL",
        help="after making the torrent and before any announce, PUT it to "
        "this site API URL (UNIT3D's /announce/{api_key}/torrents JSON); "
        "fails unless the answer is 200",
    )
    p.add_argument(
        "--torrent-id",
        type=int,
        default=1,
        metavar="N",
        help="the site's torrent id for --register (default 1)",
    )
    p.add_argument(
        "--listen-ip",
        default="127.0.0.1",
        metavar="IP",
        help="the address both sessions listen on, and so the one the "
        "tracker sees them announce from when it is local (default "
        "127.0.0.1; another host's tracker needs the address of the link "
        "that reaches it)",
    )
    p.add_argument(
        "--seed-for",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="after the download, keep both clients seeding this long before "
        "stopping them (default 0)",
    )
    args = p.parse_args()
    if args.register and args.torrent_version != "v1":
        p.error("--register registers the v1 info-hash only: use --torrent-version v1")
    if args.seed_for < 0:
        p.error("--seed-for must not be negative")
    if len(args.tracker) > 2:
        p.error("--tracker may be given at most twice (seeder, leecher)")
    if args.size <= 0:
        p.error("--size must be positive")
    return args


def make_file(directory, name, size):
    """Writes `size` random bytes; returns the file's SHA-256."""
    path = os.path.join(directory, name)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 1 << 20))
            f.write(chunk)
            digest.update(chunk)
            left -= len(chunk)
    return path, digest.hexdigest()


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            digest.update(chunk)
    return digest.hexdigest()


def make_torrent(seed_dir, name, version, private):
    """The bencoded .torrent as a dict (no tracker yet)."""
    fs = lt.file_storage()
    lt.add_files(fs, os.path.join(seed_dir, name))
    flags = {
        "v1": lt.create_torrent.v1_only,
        "v2": lt.create_torrent.v2_only,
        "hybrid": 0,
    }[version]
    ct = lt.create_torrent(fs, 0, flags)
    ct.set_creator("tracker e2e swarm.py")
    if private:
        # `private = 1` in the info dict: part of the info-hash, and libtorrent
        # then finds peers only through the tracker (BEP 27).
        ct.set_priv(True)
    lt.set_piece_hashes(ct, seed_dir)
    return ct.generate()


def torrent_for(torrent_dict, tracker):
    """A torrent_info announcing only to `tracker` (the info-hash is the same
    whatever the tracker, as the announce URL is outside the info dict)."""
    d = dict(torrent_dict)
    d[b"announce"] = tracker.encode()
    d.pop(b"announce-list", None)
    return lt.torrent_info(lt.bdecode(lt.bencode(d)))


def register(url, torrent_id, info_hash, deadline):
    """PUTs the torrent to a private tracker's site API (UNIT3D-Announce's
    torrent JSON), retrying while nothing listens yet (the tracker's API
    may start a moment after its announce listeners)."""
    body = json.dumps(
        {
            "id": torrent_id,
            "status": 1,  # approved
            "info_hash": info_hash,
            "is_deleted": False,
            "seeders": 0,
            "leechers": 0,
            "times_completed": 0,
            "download_factor": 100,
            "upload_factor": 100,
        }
    ).encode()
    while True:
        req = urllib.request.Request(
            url, data=body, method="PUT", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            if time.monotonic() + 0.2 < deadline:
                log(f"register: {e}; trying again")
                time.sleep(0.2)
                continue
            raise Failure(f"register: no answer from the site API: {e}")
        if status != 200:
            raise Failure(
                f"register: the site API answered {status}, not 200: "
                f"{text.decode(errors='replace')[:200]}"
            )
        log(f"registered torrent {torrent_id} (info-hash {info_hash}): {status}")
        return


def listen_interface(ip):
    """libtorrent's listen_interfaces entry for `ip`, on a free port."""
    return f"[{ip}]:0" if ":" in ip else f"{ip}:0"


def make_session(label, insecure, listen_ip):
    settings = {
        # A free port, distinct per session.
        "listen_interfaces": listen_interface(listen_ip),
        "outgoing_interfaces": "",
        "listen_system_port_fallback": False,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "enable_ip_notifier": False,
        # Both peers are on one address (different ports).
        "allow_multiple_connections_per_ip": True,
        "anonymous_mode": False,
        "announce_to_all_tiers": True,
        "announce_to_all_trackers": True,
        # Plain TCP keeps peer connections simple to read in logs.
        "enable_incoming_utp": False,
        "enable_outgoing_utp": False,
        "enable_incoming_tcp": True,
        "enable_outgoing_tcp": True,
        # Localhost tracker URLs with any path, plain https validation switch.
        "ssrf_mitigation": False,
        "validate_https_trackers": not insecure,
        # Answer quickly when the tracker does not.
        "tracker_completion_timeout": 10,
        "tracker_receive_timeout": 5,
        "stop_tracker_timeout": 1,
        "min_reconnect_time": 1,
        "peer_connect_timeout": 5,
        "connection_speed": 50,
        "user_agent": f"tracker-e2e-{label}/libtorrent-{lt.__version__}",
        "alert_queue_size": 10000,
        "alert_mask": (
            lt.alert_category.error
            | lt.alert_category.tracker
            | lt.alert_category.status
            | lt.alert_category.connect
            | lt.alert_category.storage
            | lt.alert_category.peer
        ),
    }
    return lt.session(settings)


def wait_listening(ses, label, deadline):
    while time.monotonic() < deadline:
        if ses.is_listening() and ses.listen_port():
            log(f"{label}: listening on port {ses.listen_port()}")
            return ses.listen_port()
        for a in ses.pop_alerts():
            if isinstance(a, lt.listen_failed_alert):
                raise Failure(f"{label}: cannot listen: {a.message()}")
        time.sleep(0.05)
    raise Failure(f"{label}: did not start listening")


class Client:
    def __init__(self, label, ses, handle):
        self.label = label
        self.ses = ses
        self.h = handle
        self.last_tracker_error = None
        self.tracker_replies = 0
        self.connections = []
        # An event=completed announce was sent, and a reply came after it
        # (alerts come in order: a reply after the announce alert answers it
        # or a later announce).
        self.completed_announced = False
        self.completed_answered = False

    def drain(self):
        for a in self.ses.pop_alerts():
            kind = type(a).__name__
            if isinstance(a, lt.tracker_error_alert):
                self.last_tracker_error = a.message()
                log(f"{self.label}: TRACKER ERROR {a.message()}")
            elif isinstance(a, lt.tracker_warning_alert):
                log(f"{self.label}: tracker warning {a.message()}")
            elif isinstance(a, lt.tracker_reply_alert):
                self.tracker_replies += 1
                if self.completed_announced:
                    self.completed_answered = True
                log(f"{self.label}: tracker reply: {a.message()}")
            elif isinstance(a, lt.tracker_announce_alert):
                if a.event == lt.event_t.completed:
                    self.completed_announced = True
                log(f"{self.label}: announcing: {a.message()}")
            elif isinstance(a, (lt.scrape_reply_alert, lt.scrape_failed_alert)):
                log(f"{self.label}: {a.message()}")
            elif isinstance(a, (lt.peer_connect_alert, lt.peer_disconnected_alert)):
                if isinstance(a, lt.peer_connect_alert):
                    self.connections.append(a.message())
                log(f"{self.label}: {kind}: {a.message()}")
            elif isinstance(
                a,
                (
                    lt.torrent_error_alert,
                    lt.file_error_alert,
                    lt.listen_failed_alert,
                    lt.hash_failed_alert,
                ),
            ):
                log(f"{self.label}: ERROR {kind}: {a.message()}")
                if not isinstance(a, lt.hash_failed_alert):
                    raise Failure(f"{self.label}: {a.message()}")
            elif isinstance(a, (lt.state_changed_alert, lt.torrent_finished_alert)):
                log(f"{self.label}: {a.message()}")

    def status(self):
        return self.h.status()

    def describe(self):
        s = self.status()
        peers = []
        for p in self.h.get_peer_info():
            src = []
            for flag, name in (
                (lt.peer_info.tracker, "tracker"),
                (lt.peer_info.dht, "dht"),
                (lt.peer_info.pex, "pex"),
                (lt.peer_info.lsd, "lsd"),
                (lt.peer_info.resume_data, "resume"),
            ):
                if p.source & flag:
                    src.append(name)
            src.append("out" if p.flags & lt.peer_info.outgoing_connection else "in")
            peers.append(f"{p.ip[0]}:{p.ip[1]}({'+'.join(src) or '?'})")
        return (
            f"{self.label}: state={s.state} progress={s.progress * 100:5.1f}% "
            f"peers={s.num_peers} seeds={s.num_seeds} "
            f"down={s.download_payload_rate // 1024}KiB/s "
            f"up={s.upload_payload_rate // 1024}KiB/s "
            f"tracker_swarm(complete={s.num_complete} incomplete={s.num_incomplete}) "
            f"[{' '.join(peers)}]"
        )


def add_torrent(ses, ti, save_path):
    atp = lt.add_torrent_params()
    atp.ti = ti
    atp.save_path = save_path
    # Not auto-managed: no queueing; no DHT/LSD/PEX: the tracker is the only
    # way to find the other peer.
    atp.flags = (
        atp.flags
        & ~lt.torrent_flags.auto_managed
        & ~lt.torrent_flags.paused
    ) | lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd | lt.torrent_flags.disable_pex
    return ses.add_torrent(atp)


def start_client(label, ses, ti, save_dir, deadline, need_seeding, others=()):
    """Adds the torrent and waits for the first tracker reply (and, for the
    seeder, for its check to find the whole file)."""
    c = Client(label, ses, add_torrent(ses, ti, save_dir))
    last_print = 0.0
    while True:
        c.drain()
        for o in others:
            o.drain()
        s = c.status()
        if (s.is_seeding or not need_seeding) and c.tracker_replies > 0:
            break
        if time.monotonic() > deadline:
            raise Failure(
                (
                    f"timeout: the {label} never got a tracker reply"
                    if s.is_seeding or not need_seeding
                    else f"timeout: the {label} did not finish checking ({s.state})"
                )
                + f"; last tracker error: {c.last_tracker_error or 'none'}"
            )
        if time.monotonic() - last_print >= 1.0:
            log(c.describe())
            last_print = time.monotonic()
        time.sleep(0.05)
    log(c.describe())
    return c


def run(args, tmp):
    deadline = START + args.timeout
    seeder_url = args.tracker[0]
    leecher_url = args.tracker[-1]
    for url in (seeder_url, leecher_url):
        if url.startswith("https://") and not args.insecure:
            log(f"note: {url} is https; pass --insecure for a self-signed certificate")

    seed_dir = os.path.join(tmp, "seed")
    leech_dir = os.path.join(tmp, "leech")
    os.mkdir(seed_dir)
    os.mkdir(leech_dir)
    name = "payload.bin"
    src, want = make_file(seed_dir, name, args.size)
    log(f"generated {args.size} random bytes, sha256 {want}")

    tdict = make_torrent(seed_dir, name, args.torrent_version, args.private)
    ti_seed = torrent_for(tdict, seeder_url)
    ti_leech = torrent_for(tdict, leecher_url)
    log(
        f"torrent {args.torrent_version}{' private' if ti_seed.priv() else ''}: "
        f"info-hash v1={ti_seed.info_hashes().v1} "
        f"v2={ti_seed.info_hashes().v2} pieces={ti_seed.num_pieces()} "
        f"piece_length={ti_seed.piece_length()}"
    )
    if args.private and not ti_seed.priv():
        raise Failure("--private: libtorrent does not see the torrent as private")
    if args.register:
        register(args.register, args.torrent_id, str(ti_seed.info_hashes().v1).lower(), deadline)
    log(f"seeder tracker: {seeder_url}")
    log(f"leecher tracker: {leecher_url}")

    seeder_ses = make_session("seeder", args.insecure, args.listen_ip)
    leecher_ses = make_session("leecher", args.insecure, args.listen_ip)
    sport = wait_listening(seeder_ses, "seeder", deadline)
    lport = wait_listening(leecher_ses, "leecher", deadline)
    if sport == lport:
        raise Failure(f"both sessions listen on port {sport}")

    # One client first, until the tracker has answered it; then the other. By
    # default the seeder (full check of its copy, then announce), so the
    # leecher's first announce returns it; with --leecher-first the leecher's
    # first announce finds nobody and the seeder must learn of the leecher
    # from the tracker and connect to it.
    if args.leecher_first:
        leecher = start_client(
            "leecher", leecher_ses, ti_leech, leech_dir, deadline, need_seeding=False
        )
        seeder = start_client(
            "seeder", seeder_ses, ti_seed, seed_dir, deadline, need_seeding=True,
            others=(leecher,),
        )
    else:
        seeder = start_client(
            "seeder", seeder_ses, ti_seed, seed_dir, deadline, need_seeding=True
        )
        leecher = Client("leecher", leecher_ses, add_torrent(leecher_ses, ti_leech, leech_dir))
    last_print = 0.0
    clients = (seeder, leecher)
    no_peer_since = time.monotonic()
    reannounces = 0
    while True:
        for c in clients:
            c.drain()
        ls = leecher.status()
        if ls.num_peers > 0 or ls.is_seeding:
            no_peer_since = time.monotonic()
        elif (
            args.reannounce_after > 0
            and time.monotonic() - no_peer_since >= args.reannounce_after
        ):
            reannounces += 1
            log(f"leecher: no peer for {args.reannounce_after:g}s; asking it to announce again")
            leecher.h.force_reannounce(0, -1, lt.reannounce_flags_t.ignore_min_interval)
            no_peer_since = time.monotonic()
        if ls.is_seeding:
            break
        if time.monotonic() > deadline:
            for c in clients:
                log(c.describe())
            err = leecher.last_tracker_error or seeder.last_tracker_error
            raise Failure(
                f"timeout after {args.timeout:g}s: leecher at {ls.progress * 100:.1f}% "
                f"({ls.state}, {ls.num_peers} peers, {leecher.tracker_replies} tracker "
                f"replies, {reannounces} forced re-announces); last tracker error: "
                f"{err or 'none'}"
            )
        if time.monotonic() - last_print >= 1.0:
            for c in clients:
                log(c.describe())
            last_print = time.monotonic()
        time.sleep(0.1)

    for c in clients:
        c.drain()
        log(c.describe())
    got_path = os.path.join(leech_dir, name)
    if not os.path.exists(got_path):
        raise Failure(f"leecher is seeding but {got_path} does not exist")
    got = sha256_of(got_path)
    if os.path.getsize(got_path) != args.size or got != want:
        raise Failure(
            f"downloaded file differs: size {os.path.getsize(got_path)} sha256 {got}, "
            f"expected size {args.size} sha256 {want}"
        )
    with open(src, "rb") as a, open(got_path, "rb") as b:
        if a.read() != b.read():
            raise Failure("downloaded file's bytes differ from the original")
    for c in clients:
        for conn in c.connections:
            log(f"{c.label} connection: {conn}")
    log(
        f"OK: leecher downloaded {args.size} bytes (sha256 {got}) in "
        f"{time.monotonic() - START:.2f}s; {leecher.tracker_replies} leecher tracker "
        f"replies, {reannounces} forced re-announces"
    )

    if args.private:
        # A private tracker counts the snatch on the leecher's event=completed
        # announce, which libtorrent sends when the download finishes: wait
        # for its answer, so that the stop below does not overtake it.
        while not leecher.completed_answered:
            for c in clients:
                c.drain()
            if time.monotonic() > deadline:
                raise Failure(
                    "timeout: the leecher's event=completed announce "
                    + ("got no answer" if leecher.completed_announced else "was never sent")
                    + f"; last tracker error: {leecher.last_tracker_error or 'none'}"
                )
            time.sleep(0.05)
        log("leecher: its event=completed announce was answered")
    if args.seed_for > 0:
        log(f"both seeding for {args.seed_for:g}s before the stop")
        t_end = time.monotonic() + args.seed_for
        while time.monotonic() < t_end:
            for c in clients:
                c.drain()
            time.sleep(0.1)

    # The totals each client's stopped announce reports (libtorrent sends
    # uploaded = payload uploaded; downloaded = payload downloaded less
    # redundant and failed bytes). Both are seeds now: nothing moves between
    # these figures and the stop.
    for c in clients:
        s = c.status()
        down = max(
            0,
            s.total_payload_download - s.total_failed_bytes - s.total_redundant_bytes,
        )
        print(
            f"TOTALS {c.label} uploaded={s.total_payload_upload} downloaded={down} "
            f"redundant={s.total_redundant_bytes} failed={s.total_failed_bytes}",
            flush=True,
        )

    # Stop cleanly so the tracker sees event=stopped (best effort).
    for c in clients:
        c.ses.remove_torrent(c.h)
    t_end = time.monotonic() + 2
    while time.monotonic() < t_end:
        for c in clients:
            c.drain()
        time.sleep(0.1)


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-e2e-") as tmp:
        try:
            run(args, tmp)
        except Failure as e:
            log(f"FAIL: {e}")
            print(f"swarm.py: FAIL: {e}", file=sys.stderr, flush=True)
            return 1
        except Exception as e:  # anything unexpected is a failure, not a pass
            log(f"FAIL: unexpected {type(e).__name__}: {e}")
            print(f"swarm.py: FAIL: unexpected {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
