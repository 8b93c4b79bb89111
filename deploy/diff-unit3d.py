#!/usr/bin/env python3
"""The scenarios of deploy/diff-unit3d, and their comparison.

Python 3.11, standard library only. deploy/diff-unit3d runs the database
and the trackers (ours; UNIT3D-Announce at MAX_PEERS_PER_TORRENT_PER_USER
4, which admits 3 as ours' 3 does; and UNIT3D-Announce at its default 3
for the one scenario whose `reference` is "default"); this file does the
rest, in three steps:

  diff-unit3d.py plan OUT [--seed N] [--random N]
      Writes OUT/plan.json (every scenario: its users, groups, torrents,
      peers and announces, with the ids, passkeys, info-hashes, peer ids,
      addresses and ports given to them) and OUT/seed.sql (the rows every
      database gets: groups, users, torrents, freeleech tokens, personal
      freeleech, featured torrents).
  diff-unit3d.py drive OUT --ours HOST:PORT --unit3d HOST:PORT
                           --unit3d-default HOST:PORT
      Plays every scenario, all of them interleaved in one pass (one
      thread each), each announce sent to ours and its scenario's
      UNIT3D-Announce at the same moment (both connections opened, then
      both requests written, then both answers read), with the
      scenario's sleeps between announces. Writes OUT/answers.json.
  diff-unit3d.py compare OUT [--ours-db NAME --unit3d-db NAME
                              --unit3d-default-db NAME]
      After the trackers have stopped (each flushes what it holds as it
      stops), reads the databases with the `mariadb` client (DIFF_MARIADB,
      DIFF_MARIADB_SOCKET and DIFF_MARIADB_USER from the environment),
      keeps their rows in OUT/rows.json (without the names: compares
      again from it), and writes OUT/results.md (the summary first),
      OUT/summary-for-docs.md (the summary alone), OUT/details/ (one file
      per differing scenario) and OUT/summary.json.

What is compared, per scenario (each has users and torrents of its own):
  - each answer: failure reason, warning message, complete, incomplete,
    downloaded, the peers listed (each resolved to the scenario's peer
    that announced from that address and port) and whether one of them
    is the announcing user's own;
  - users.uploaded and downloaded of its users;
  - each history row of its users on its torrents: uploaded,
    actual_uploaded, client_uploaded, downloaded, actual_downloaded,
    client_downloaded, seeder, active, immune, whether completed_at is
    set, and seedtime within SEEDTIME_SLACK seconds (both count it from
    clocks: UNIT3D-Announce from its flushes' times, ours from the
    announces');
  - each peers row: active, visible, seeder, uploaded, downloaded;
  - its torrents' seeders, leechers and times_completed.
Each difference is a kind ("users: download charged more than
UNIT3D-Announce", "answer: peer list includes own user", ...; the
answers to a `stopped` apart, "answer to a stop: ...") at a place (an
announce, a user, a history or peers row, a torrent). RULE_INFO names the
rules that explain differences (rows of docs/OPERATIONS.md's table of
differences, UNIT3D-Announce's bugs, and findings: ours by no documented
rule); RULES gives each kind the rules that can explain it. Replay
decides which, per scenario: it replays UNIT3D-Announce's rules (from
its source) and ours (from the docs) over the scenario's announces and
the answers each tracker gave, names the rule behind each announce whose
admission or credit differs, and checks its rows against both databases.
A difference no rule of its kind explains, and every place where the
replay and a database disagree, is unexplained. Apart from the kinds,
every scenario is checked for the two claims of issue 41 (ours never
charges less download, and never credits more upload, than
UNIT3D-Announce), each failure with the rule behind it.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.parse

MIB = 1 << 20
GIB = 1 << 30
# Every torrent's size: what a leecher has `left` at 0 downloaded.
SIZE = 4 * GIB
# Seconds between two announces of a scenario, unless the case says
# otherwise: more than a flush interval (1 s), since UNIT3D-Announce at
# 946b6e7 keeps, of one user's announces within one flush, only the last
# one's credit in users.uploaded and downloaded (its user queue replaces
# the entry where its history queue adds to it) and only the last one's
# completed_at: the two `same-flush-*` cases show it, the rest keep
# apart. At most MAX_GROW of upload between two announces, so that no
# honest step passes ours' max_upload_rate (10 Gbit/s, about 1164 MiB/s,
# measured since the peer's previous announce and after the user's other
# peers' credit): 256 MiB a step, steps 1.2 s or more apart.
GAP = 1.2
MAX_GROW = 256 * MIB
# Seconds by which the two seedtimes may differ and still count as equal:
# both count whole seconds, UNIT3D-Announce between its flushes (1 s
# apart, each up to a second after the announce) and ours between
# announces, so each seeding stretch may differ by a second or two.
# Differences near the slack can come and go between two runs.
SEEDTIME_SLACK = 3
USER_AGENT = "qBittorrent/4.6.5"
FIRST_USER = 100
FIRST_TORRENT = 1
UPLOADER = 1

# The site's groups, the same in both databases: (id, slug, download
# slots, immune, freeleech, double upload).
GROUPS = [
    (1, "user", None, 0, 0, 0),
    (2, "freeleech", None, 0, 1, 0),
    (3, "double-upload", None, 0, 0, 1),
    (4, "slots-1", 1, 0, 0, 0),
    (5, "slots-2", 2, 0, 0, 0),
    (6, "immune", None, 1, 0, 0),
    (7, "freeleech-double-upload", None, 0, 1, 1),
    (8, "uploader", None, 1, 0, 0),
]
GROUP_ID = {slug: gid for gid, slug, *_ in GROUPS}

# ---------------------------------------------------------------------------
# The rules that explain the differences: each a short name for a row of
# the table "Where it differs from UNIT3D-Announce" in docs/OPERATIONS.md
# (ROW: that row's first column), and whose rule it is: ours on purpose,
# UNIT3D-Announce's bug (ours does what its own setting or rule says), or
# a finding: ours, by no documented rule (results.md lists those apart).
OURS = "ours, on purpose"
THEIRS = "UNIT3D-Announce's bug"
FINDING = "finding in ours"
RULE_INFO = {
    "restart": ("restart: no upload, download charged its new total",
                "a counter that goes back", OURS),
    "first": ("first announce nobody recorded: charged past the user's last report",
              "a session's first announce nobody recorded", OURS),
    "after_stop": ("after a stop: no upload, download goes on",
                   "an announce after a `stopped`, a second `stopped`", OURS),
    "unknown_stop": ("unknown stop credited from its row",
                     "a stop of a peer this tracker does not know", OURS),
    "completion_once": ("completion once per user and torrent (a leecher turned seeder, or a seeder's "
                        "`completed`)",
                        "completions", OURS),
    "completed_at": ("completed_at without the event", "completions", OURS),
    "completed_leeching": ("no completed_at for a `completed` from a client still leeching",
                           "completions", OURS),
    "active": ("history.active while another peer stays",
               "`history.active` when one of a user's two peers stops", OURS),
    "stop_warning": ("no warning on a stop", "the answer to a `stopped`", OURS),
    "peer_family": ("peer list of the announcer's family", "peer lists", OURS),
    "seedtime": ("seedtime between a peer's own seeding announces (UNIT3D-Announce: its history row's updates)",
                 "seedtime", OURS),
    "rate_bound": ("upload-rate bound (max_upload_rate)", "the upload-rate bound", OURS),
    "user_replaced": ("UNIT3D-Announce replaces a user's pending credit within a flush", "flushes", THEIRS),
    "completed_at_replaced": ("UNIT3D-Announce replaces a pending completed_at within a flush",
                              "completions", THEIRS),
    "peer_limit": ("max_peers_per_torrent_per_user admits its number (UNIT3D-Announce one fewer)",
                   "`max_peers_per_torrent_per_user` = 3", THEIRS),
    "snatches_again": ("answers' downloaded counts a user's completion again once all its peers left",
                       "completions", OURS),
}

# Each kind of difference (by its family: the text before any " [" that
# carries the two values) to the rules that can explain it. Where a kind
# has one, that is its rule; where it has several, the scenario's
# announces tell which (explain() below replays both trackers' rules
# announce by announce and names the rule of each announce that makes a
# difference: one UNIT3D-Announce refused and ours admitted, a counter
# that went back, a peer new to one and not the other, ...). A kind in a
# scenario that no rule of its own explains, and every place where the
# replay disagrees with a database, is listed in results.md as
# unexplained. An empty tuple: no rule explains that kind.
UPLOAD_LESS = ("restart", "rate_bound", "peer_limit")
DOWNLOAD_MORE = ("restart", "first", "after_stop", "unknown_stop", "peer_limit")
LATEST = ("unknown_stop", "after_stop", "peer_limit")
# The kinds of difference in an answer, with their rules; each is told
# apart for the answers to a `stopped` ("answer to a stop: ...") and to
# the others ("answer: ..."), since a client ignores most of the former.
ANSWER_RULES = {
    "failure reason differs": ("unknown_stop", "after_stop", "peer_limit"),
    "warning differs": ("peer_limit",),
    "complete more than UNIT3D-Announce": ("peer_limit",),
    "complete less than UNIT3D-Announce": ("peer_limit",),
    "incomplete more than UNIT3D-Announce": ("peer_limit",),
    "incomplete less than UNIT3D-Announce": ("peer_limit",),
    "downloaded more than UNIT3D-Announce": ("completion_once", "snatches_again", "peer_limit"),
    "downloaded less than UNIT3D-Announce": ("completion_once", "snatches_again", "peer_limit"),
    "peer list includes own user": (),
    "UNIT3D-Announce's peer list includes own user": (),
    "peer list has another user's peer UNIT3D-Announce leaves out": ("peer_family", "peer_limit"),
    "peer list lacks another user's peer UNIT3D-Announce lists": ("peer_family", "peer_limit"),
    "peer list has one peer id twice": (),
    "UNIT3D-Announce's peer list has one peer id twice": (),
    "a peer listed at another address or port": (),
    "no answer": (),
}
RULES = {
    **{f"answer: {kind}": rules for kind, rules in ANSWER_RULES.items()},
    **{f"answer to a stop: {kind}": rules for kind, rules in ANSWER_RULES.items()},
    # UNIT3D-Announce answers every stop with the download-slot warning.
    "answer to a stop: warning differs": ("stop_warning",),
    "users: download charged more than UNIT3D-Announce": DOWNLOAD_MORE + ("user_replaced",),
    "users: download charged less than UNIT3D-Announce": ("peer_limit",),
    "users: upload credited more than UNIT3D-Announce": ("user_replaced", "peer_limit"),
    "users: upload credited less than UNIT3D-Announce": UPLOAD_LESS,
    "history: row only in ours": ("unknown_stop", "after_stop", "peer_limit"),
    "history: row only in UNIT3D-Announce's": ("peer_limit",),
    "history: upload credited more": ("peer_limit",),
    "history: upload credited less": UPLOAD_LESS,
    "history: actual_uploaded more": ("peer_limit",),
    "history: actual_uploaded less": ("restart", "peer_limit"),
    "history: client_uploaded differs": LATEST,
    "history: download charged more": DOWNLOAD_MORE,
    "history: download charged less": ("peer_limit",),
    "history: actual_downloaded more": DOWNLOAD_MORE,
    "history: actual_downloaded less": ("peer_limit",),
    "history: client_downloaded differs": LATEST,
    "history: seeder differs": LATEST,
    "history: active differs": ("active",) + LATEST,
    "history: immune differs": (),
    "history: completed_at set by ours only": ("completed_at", "completed_at_replaced", "peer_limit"),
    "history: completed_at set by UNIT3D-Announce only": ("peer_limit", "completed_leeching"),
    "history: seedtime more": ("seedtime",),
    "history: seedtime less": ("seedtime",),
    "peers: row only in ours": ("unknown_stop", "after_stop", "peer_limit"),
    "peers: row only in UNIT3D-Announce's": ("peer_limit",),
    "peers: active differs": ("unknown_stop", "after_stop", "peer_limit"),
    "peers: visible differs": ("unknown_stop", "after_stop", "peer_limit"),
    "peers: seeder differs": ("unknown_stop", "after_stop", "peer_limit"),
    "peers: uploaded differs": ("unknown_stop", "after_stop", "peer_limit"),
    "peers: downloaded differs": ("unknown_stop", "after_stop", "peer_limit"),
    "torrents: seeders more than UNIT3D-Announce": ("peer_limit",),
    "torrents: seeders less than UNIT3D-Announce": ("peer_limit",),
    "torrents: leechers more than UNIT3D-Announce": ("peer_limit",),
    "torrents: leechers less than UNIT3D-Announce": ("peer_limit",),
    "torrents: times_completed more than UNIT3D-Announce": ("peer_limit", "completion_once"),
    "torrents: times_completed less than UNIT3D-Announce": ("completion_once",),
}


def family_of(kind):
    return kind.split(" [", 1)[0]


def rules_of(kind):
    """The rules that can explain KIND."""
    return RULES.get(kind, RULES.get(family_of(kind), ()))


def rule_name(rule):
    return RULE_INFO[rule][0]


# ---------------------------------------------------------------------------
# Scenarios.


class Scenario:
    """Users, torrents, peers and the announces of one case."""

    def __init__(self, name, kind, note=""):
        self.name = name
        self.kind = kind  # "scripted" or "random"
        self.note = note
        # Which UNIT3D-Announce plays it beside ours: "main" (run at
        # MAX_PEERS_PER_TORRENT_PER_USER 4, admitting 3 as ours' 3 does)
        # or "default" (at its default 3, which admits 2).
        self.reference = "main"
        self.users = {}  # key -> {group, personal, can_download}
        self.torrents = {}  # key -> {free, doubleup, featured, tokens}
        self.peers = {}  # key -> {user, ip, port, id_of}
        self.steps = []
        self.start = 0.0

    def user(self, key, group="user", personal=False, can_download=True):
        self.users[key] = {"group": group, "personal": personal, "can_download": can_download}
        return key

    def torrent(self, key="t", free=0, doubleup=False, featured=False, tokens=()):
        self.torrents[key] = {"free": free, "doubleup": doubleup, "featured": featured,
                              "tokens": list(tokens)}
        return key

    def peer(self, key, user, ip="127.0.0.2", same_id_as=None):
        """A peer (a client's session: a peer id) of USER; SAME_ID_AS
        gives it the peer id of another peer (of another user)."""
        self.peers[key] = {"user": user, "ip": ip, "id_of": same_id_as}
        return key

    def ann(self, peer, event=None, up=0, down=0, left=None, torrent="t", port=None,
            ip=None, wait=GAP, compact="1", passkey=None, info_hash=None):
        """An announce of PEER; LEFT defaults to SIZE - DOWN; PORT is an
        alternate port's number (0: the peer's own), IP another source
        address."""
        if left is None:
            left = max(0, SIZE - down)
        self.steps.append({"peer": peer, "event": event, "uploaded": up, "downloaded": down,
                           "left": left, "torrent": torrent, "alt_port": port or 0,
                           "ip": ip, "wait": wait, "compact": compact,
                           "passkey": passkey, "info_hash": info_hash})

    def sleep(self, seconds):
        """Waits longer after the last announce."""
        self.steps[-1]["wait"] += seconds


def scripted():
    """The named cases: each a rule that differs or could."""
    out = []

    def case(name, note, users=("a",), group="user", **torrent):
        s = Scenario(name, "scripted", note)
        for u in users:
            s.user(u, group)
        s.torrent("t", **torrent)
        out.append(s)
        return s

    M = MIB
    s = case("honest-leech-complete-seed", "started, two announces, completed, seeding, stopped")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 10 * M, 200 * M)
    s.ann("p", None, 20 * M, 400 * M)
    s.ann("p", "completed", 30 * M, SIZE, left=0)
    s.ann("p", None, 200 * M, SIZE, left=0, wait=2.5)
    s.ann("p", None, 400 * M, SIZE, left=0)
    s.ann("p", "stopped", 450 * M, SIZE, left=0)

    s = case("started-repeated-leecher", "event=started on every announce, downloaded 0 -> 900 MiB")
    s.peer("p", "a")
    for d in (0, 300, 600, 900):
        s.ann("p", "started", 0, d * M)

    s = case("started-repeated-seeder", "a seeder announcing started every time, uploaded growing")
    s.peer("p", "a")
    for u in (0, 200, 400, 600):
        s.ann("p", "started", u * M, 0, left=0, wait=1.5)

    s = case("started-mid-session", "one started in the middle of a session: 0, 100, started 200, 300 MiB")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 0, 100 * M)
    s.ann("p", "started", 0, 200 * M)
    s.ann("p", None, 0, 300 * M)

    s = case("completed-twice", "completed, then completed again")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 0, SIZE - 100 * M)
    s.ann("p", "completed", 0, SIZE, left=0)
    s.ann("p", "completed", 50 * M, SIZE, left=0)
    s.ann("p", None, 100 * M, SIZE, left=0)

    s = case("two-peers-one-user-complete", "two leechers of one user, each completing")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0)
    s.ann("p", "completed", 0, SIZE, left=0)
    s.ann("q", "completed", 0, SIZE, left=0)

    # A `completed` that completes nothing (a session's first announce,
    # already a seeder) sets history.completed_at; the user's first
    # completion comes after, its announces well apart from the first so
    # that the first is written before.
    s = case("completed-event-then-completion", "a seeder's first announce says completed; then another peer "
             "of the user leeches and completes")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "completed", 0, 0, left=0)
    s.sleep(2.0)
    s.ann("q", "started", 0, 0)
    s.ann("q", "completed", 0, SIZE, left=0)

    s = case("completion-after-all-stopped", "a user completes, stops its only peer, starts it again as a "
             "leecher and completes again")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", "completed", 0, SIZE, left=0)
    s.ann("p", "stopped", 0, SIZE, left=0)
    s.ann("p", "started", 0, 0)
    s.ann("p", "completed", 0, SIZE, left=0)

    s = case("seeder-without-completed", "left reaches 0 with no completed event")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 0, SIZE - 10 * M)
    s.ann("p", None, 0, SIZE, left=0)
    s.ann("p", None, 30 * M, SIZE, left=0)

    s = case("seeder-back-to-leecher", "a seeder whose left grows again (a recheck), then completes again")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 100 * M, 0, left=0)
    s.ann("p", None, 150 * M, 0, left=300 * M)
    s.ann("p", None, 150 * M, 300 * M, left=0)
    s.ann("p", "completed", 150 * M, 300 * M, left=0)

    s = case("upload-back-hides-download", "uploaded 1000, 999, 998, 997 bytes while downloaded 0 -> 900 MiB")
    s.peer("p", "a")
    s.ann("p", "started", 1000, 0)
    s.ann("p", None, 999, 300 * M)
    s.ann("p", None, 998, 600 * M)
    s.ann("p", None, 997, 900 * M)

    s = case("download-back-hides-upload", "downloaded going back by a byte while uploaded grows")
    s.peer("p", "a")
    s.ann("p", "started", 0, 1000)
    s.ann("p", None, 200 * M, 999)
    s.ann("p", None, 400 * M, 998)
    s.ann("p", None, 600 * M, 997)

    s = case("counters-reset", "both counters back to 0 (a client restarted with the same peer id), then growing")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 200 * M, 300 * M)
    s.ann("p", None, 0, 0)
    s.ann("p", None, 100 * M, 100 * M)

    s = case("download-reset-alone", "downloaded back to 0 and growing again, uploaded growing")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 100 * M, 500 * M)
    s.ann("p", None, 200 * M, 0)
    s.ann("p", None, 300 * M, 200 * M)

    s = case("upload-reset-alone", "uploaded back to 0 and growing again, downloaded growing")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 200 * M, 100 * M)
    s.ann("p", None, 0, 300 * M)
    s.ann("p", None, 100 * M, 500 * M)

    s = case("counters-stay", "the same totals announced again and again")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    for _ in range(3):
        s.ann("p", None, 100 * M, 200 * M)

    s = case("download-jump", "downloaded jumps by 3 GiB between two announces")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 0, 3 * GIB)
    s.ann("p", None, 0, 3 * GIB + 100 * M)

    s = case("upload-jump", "uploaded jumps by 200 GiB in a second (past ours' max_upload_rate)")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 200 * GIB, 0, left=0)
    s.ann("p", None, 200 * GIB + 100 * M, 0, left=0)

    s = case("upload-alone", "only uploaded grows, a leecher")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    for u in (100, 200, 300):
        s.ann("p", None, u * M, 0)

    s = case("download-alone", "only downloaded grows")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    for d in (100, 200, 300):
        s.ann("p", None, 0, d * M)

    s = case("first-announce-with-totals", "a peer's first announce already has totals (credited nothing)")
    s.peer("p", "a")
    s.ann("p", None, 500 * M, 700 * M)
    s.ann("p", None, 600 * M, 900 * M)

    # A session's first announce in one flush with its user's restart on
    # the torrent: charged past the restart's total (0), not yet written,
    # not past the total the database still holds (500 MiB).
    s = case("first-announce-same-flush", "a peer restarts at 0 and, 0.05 s later (in the same flush), another "
             "peer id of the user reports 200 MiB")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 0, 500 * M, wait=3.0)
    s.ann("p", None, 0, 0, wait=0.05)
    s.ann("q", "started", 0, 200 * M)
    s.ann("q", None, 0, 300 * M)

    s = case("two-peers-one-user-leeching", "two peers (two peer ids, two ports) of one user, both leeching")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0)
    s.ann("p", None, 10 * M, 200 * M)
    s.ann("q", None, 20 * M, 300 * M)
    s.ann("p", "stopped", 10 * M, 250 * M)
    s.ann("q", None, 30 * M, 400 * M)

    s = case("two-peers-one-user-seed-and-leech", "one user's seeder and leecher on one torrent (its own peers in lists)")
    s.peer("seed", "a")
    s.peer("leech", "a")
    s.ann("seed", "started", 0, 0, left=0)
    s.ann("leech", "started", 0, 0)
    s.ann("leech", None, 0, 200 * M)
    s.ann("seed", None, 200 * M, 0, left=0)
    s.ann("leech", None, 0, 400 * M)

    s = case("own-peers-freeleech-self-feed", "on a freeleech torrent a user's leecher is fed by its own seeder",
             free=100)
    s.peer("seed", "a")
    s.peer("leech", "a")
    s.ann("seed", "started", 0, 0, left=0)
    s.ann("leech", "started", 0, 0)
    s.ann("seed", None, 250 * M, 0, left=0)
    s.ann("leech", None, 0, 250 * M)

    s = case("one-id-two-ports", "one peer id announcing from two ports in turn")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 100 * M, 0, left=0, port=1)
    s.ann("p", None, 200 * M, 0, left=0)
    s.ann("p", None, 300 * M, 0, left=0, port=1)

    s = case("one-id-four-ports", "a seeder's one peer id from 4 ports, then another user's leecher",
             users=("a", "b"))
    s.peer("p", "a")
    s.peer("l", "b")
    s.ann("p", "started", 0, 0, left=0)
    for k in (1, 2, 3):
        s.ann("p", "started", 0, 0, left=0, port=k)
    s.ann("l", "started", 0, 0)

    s = case("one-id-two-addresses", "one peer id from 127.0.0.2 and 127.0.0.3 in turn", users=("a", "b"))
    s.peer("p", "a")
    s.peer("l", "b", ip="127.0.0.4")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 100 * M, 0, left=0, ip="127.0.0.3")
    s.ann("l", "started", 0, 0)
    s.ann("p", None, 200 * M, 0, left=0)
    s.ann("l", None, 0, 100 * M)

    s = case("stop-from-second-address", "a seeder stops from its second address; another user's leecher looks",
             users=("a", "b"))
    s.peer("p", "a")
    s.peer("l", "b", ip="127.0.0.4")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 50 * M, 0, left=0, ip="127.0.0.3")
    s.ann("p", "stopped", 60 * M, 0, left=0, ip="127.0.0.3")
    s.ann("l", "started", 0, 0)
    s.ann("l", None, 0, 10 * M)

    s = case("stop-from-second-port", "a seeder stops from its second port; another user's leecher looks",
             users=("a", "b"))
    s.peer("p", "a")
    s.peer("l", "b")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", None, 50 * M, 0, left=0, port=1)
    s.ann("p", "stopped", 60 * M, 0, left=0, port=1)
    s.ann("l", "started", 0, 0)

    s = case("stop-unknown-peer", "a stop of a peer never seen")
    s.peer("p", "a")
    s.ann("p", "stopped", 100 * M, 100 * M)

    s = case("stop-twice", "stopped at 100 MiB, then stopped again at 300 MiB")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("p", "stopped", 100 * M, 0, left=0)
    s.ann("p", "stopped", 300 * M, 0, left=0)

    s = case("announce-after-stop", "an announce with no event after a stop, the totals continuing")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 50 * M, 100 * M)
    s.ann("p", "stopped", 100 * M, 200 * M)
    s.ann("p", None, 150 * M, 300 * M)
    s.ann("p", None, 200 * M, 400 * M)

    s = case("started-after-stop-new-session", "stopped, then a new session: started with totals from 0")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 50 * M, 200 * M)
    s.ann("p", "stopped", 100 * M, 300 * M)
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 100 * M, 200 * M)

    s = case("stop-with-counters-back", "a stop whose uploaded went back and downloaded grew")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 300 * M, 100 * M)
    s.ann("p", "stopped", 200 * M, 400 * M)

    s = case("stop-then-limit", "three peers of one user, one stops, a fourth comes")
    for k in ("p", "q", "r", "s"):
        s.peer(k, "a")
    for k in ("p", "q", "r"):
        s.ann(k, "started", 0, 0)
    s.ann("q", "stopped", 0, 10 * M)
    s.ann("s", "started", 0, 0)

    def factor_case(name, note, group="user", **torrent):
        s = case(name, note, group=group, **torrent)
        s.peer("p", "a")
        s.ann("p", "started", 0, 0)
        s.ann("p", None, 101 * M + 1, 301 * M + 1)
        s.ann("p", None, 201 * M + 3, 601 * M + 3)
        s.ann("p", "stopped", 251 * M + 5, 701 * M + 5)
        return s

    factor_case("group-freeleech", "a freeleech group", group="freeleech")
    factor_case("group-double-upload", "a double-upload group", group="double-upload")
    factor_case("torrent-freeleech", "a 100% freeleech torrent", free=100)
    factor_case("torrent-half-freeleech", "a 50% freeleech torrent, odd byte counts", free=50)
    factor_case("torrent-double-upload", "a double-upload torrent", doubleup=True)
    factor_case("freeleech-token", "the user holds a freeleech token for the torrent", tokens=("a",))
    s = factor_case("personal-freeleech", "the user has personal freeleech")
    s.users["a"]["personal"] = True
    factor_case("featured-torrent", "a featured torrent (freeleech and double upload)", featured=True)
    factor_case("immune-group", "a group with hit-and-run immunity", group="immune")

    s = case("download-slots-1", "a group with one download slot leeching two torrents, then seeding one",
             group="slots-1")
    s.torrent("u")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0, torrent="u")
    s.ann("q", None, 0, 100 * M, torrent="u")
    s.ann("p", None, 0, 100 * M)
    s.ann("p", "completed", 0, SIZE, left=0)
    s.ann("q", None, 0, 200 * M, torrent="u")
    s.ann("q", None, 0, 300 * M, torrent="u")

    s = case("download-slots-limited-stop", "a slot-limited leecher stops; its slot was never taken",
             group="slots-1")
    s.torrent("u")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0, torrent="u")
    s.ann("q", "stopped", 0, 50 * M, torrent="u")
    s.ann("p", None, 0, 100 * M)
    s.ann("q", "started", 0, 0, torrent="u")

    s = case("download-slots-2-three-torrents", "two slots, three torrents leeched", group="slots-2")
    s.torrent("u")
    s.torrent("v")
    for k in ("p", "q", "r"):
        s.peer(k, "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0, torrent="u")
    s.ann("r", "started", 0, 0, torrent="v")
    s.ann("r", None, 0, 100 * M, torrent="v")
    s.ann("p", "stopped", 0, 50 * M)
    s.ann("r", None, 0, 200 * M, torrent="v")

    s = case("peer-limit", "four peers of one user on one torrent")
    for k in ("p", "q", "r", "s"):
        s.peer(k, "a")
        s.ann(k, "started", 0, 0)
    s.ann("p", None, 0, 100 * M)

    # The off-by-one of UNIT3D-Announce's peer limit, on purpose: this case
    # alone is played against UNIT3D-Announce at its default
    # MAX_PEERS_PER_TORRENT_PER_USER (3), which refuses the user's third
    # peer ("You already have 3 peers" to a user with 2) where ours admits
    # it; the comparison checks that it does (OFF_BY_ONE_CASE).
    s = case("peer-limit-unit3d-default", "four peers of one user on one torrent, against UNIT3D-Announce "
             "at its default peer limit 3 (it admits 2)")
    s.reference = "default"
    for k in ("p", "q", "r", "s"):
        s.peer(k, "a")
        s.ann(k, "started", 0, 0)
    s.ann("p", None, 0, 100 * M)

    s = case("peer-limit-invisible-peers", "slot-limited (invisible) leechers of one user and the peer limit",
             group="slots-1")
    s.torrent("u")
    s.peer("x", "a")
    s.ann("x", "started", 0, 0, torrent="u")
    for k in ("p", "q", "r"):
        s.peer(k, "a")
        s.ann(k, "started", 0, 0)
    s.ann("p", "completed", 0, SIZE, left=0)

    s = case("own-peers-leecher-list", "a user's leecher with its own seeder and another user's seeder",
             users=("a", "b"))
    s.peer("own", "a")
    s.peer("other", "b")
    s.peer("l", "a")
    s.ann("own", "started", 0, 0, left=0)
    s.ann("other", "started", 0, 0, left=0)
    s.ann("l", "started", 0, 0)
    s.ann("l", None, 0, 50 * M)

    s = case("own-peers-seeder-list", "a user's seeder with its own leecher and another user's leecher",
             users=("a", "b"))
    s.peer("s", "a")
    s.peer("own", "a")
    s.peer("other", "b")
    s.ann("own", "started", 0, 0)
    s.ann("other", "started", 0, 0)
    s.ann("s", "started", 0, 0, left=0)
    s.ann("s", None, 10 * M, 0, left=0)

    s = case("counts-several-users", "seeders and leechers of four users; a leecher completes, one stops",
             users=("a", "b", "c", "d"))
    s.peer("sa", "a")
    s.peer("sb", "b")
    s.peer("lc", "c")
    s.peer("ld", "d")
    s.ann("sa", "started", 0, 0, left=0)
    s.ann("sb", "started", 0, 0, left=0)
    s.ann("lc", "started", 0, 0)
    s.ann("ld", "started", 0, 0)
    s.ann("lc", "completed", 0, SIZE, left=0)
    s.ann("sb", "stopped", 100 * M, 0, left=0)
    s.ann("ld", None, 0, 100 * M)
    s.ann("sa", None, 100 * M, 0, left=0)

    s = case("same-peer-id-two-users", "two users' clients with one peer id", users=("a", "b"))
    s.peer("p", "a")
    s.peer("q", "b", same_id_as="p")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("q", "started", 0, 0)
    s.ann("q", None, 0, 100 * M)
    s.ann("p", None, 100 * M, 0, left=0)

    s = case("second-peer-history-active", "a user's second peer stops while the first goes on")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0, left=0)
    s.ann("q", "started", 0, 0, left=0)
    s.ann("q", "stopped", 10 * M, 0, left=0)

    s = case("seedtime-seeder", "a seeder announcing three times 2.5 s apart")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0, wait=2.5)
    s.ann("p", None, 10 * M, 0, left=0, wait=2.5)
    s.ann("p", None, 20 * M, 0, left=0)

    # Two seeders of one user at once: the user seeds the torrent about
    # 8.75 s; each peer's own announces are 2.5 s apart.
    s = case("seedtime-two-seeders", "two seeding peers of one user announcing in turn, 1.25 s apart")
    s.peer("p", "a")
    s.peer("q", "a")
    for k in range(8):
        s.ann("pq"[k % 2], "started" if k < 2 else None, (k // 2) * 10 * M, 0, left=0, wait=1.25)

    s = case("seedtime-stop", "a seeder that stops after 3 s")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, left=0, wait=3.0)
    s.ann("p", "stopped", 10 * M, 0, left=0)

    s = case("event-paused", "event=paused (BEP 21's partial seed)")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", "paused", 10 * M, 100 * M)
    s.ann("p", "paused", 20 * M, 200 * M)

    s = case("compact-0", "compact=0")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, compact="0")
    s.ann("p", None, 10 * M, 100 * M, compact="0")

    s = case("port-stop-0", "a stop from port 0 (some clients send it)")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", "stopped", 10 * M, 100 * M, port=-1)

    s = case("download-disabled", "a user whose downloading is disabled: leeching refused, seeding allowed")
    s.users["a"]["can_download"] = False
    s.torrent("u")
    s.peer("p", "a")
    s.peer("q", "a")
    s.ann("p", "started", 0, 0)
    s.ann("q", "started", 0, 0, left=0, torrent="u")
    s.ann("q", None, 10 * M, 0, left=0, torrent="u")

    # Three announces 0.05 s apart: at least two of them share a flush.
    # 20 MiB of upload each, under ours' max_upload_rate.
    s = case("same-flush-two-announces", "three announces of one peer 0.05 s apart, two or more in one flush")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", None, 20 * M, 200 * M, wait=0.05)
    s.ann("p", None, 40 * M, 400 * M, wait=0.05)
    s.ann("p", None, 60 * M, 600 * M)

    # In one flush with the next announce unless a flush falls in the
    # 0.03 s between them.
    s = case("same-flush-completed", "completed, then another announce 0.03 s later, within one flush")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0)
    s.ann("p", "completed", 0, SIZE, left=0, wait=0.03)
    s.ann("p", None, 10 * M, SIZE, left=0)

    s = case("unknown-passkey", "a passkey the site does not have")
    s.peer("p", "a")
    s.ann("p", "started", 0, 0, passkey="0" * 32)

    return out


def random_scenario(rng, index):
    """A random sequence over 1 to 3 peers of 1 or 2 users."""
    s = Scenario(f"random-{index:03d}", "random")
    nusers = rng.choice((1, 1, 2))
    groups = ["user"] * 6 + ["freeleech", "double-upload", "slots-1", "immune"]
    for u in "ab"[:nusers]:
        s.user(u, rng.choice(groups), personal=rng.random() < 0.05)
    tokens = ["a"] if rng.random() < 0.08 else []
    s.torrent("t", free=rng.choice((0,) * 8 + (50, 100)), doubleup=rng.random() < 0.15,
              featured=rng.random() < 0.05, tokens=tokens)
    npeers = rng.randint(1, 3)
    peers = []
    for k in range(npeers):
        user = "ab"[k % nusers] if nusers == 2 else "a"
        name = f"p{k}"
        s.peer(name, user)
        seeder = rng.random() < 0.3
        peers.append({"name": name, "up": 0, "down": 0, "seeder": seeder, "done": 0})
    s.note = (f"{nusers} user(s) ({', '.join(s.users[u]['group'] for u in s.users)}), {npeers} peer(s); "
              f"torrent free {s.torrents['t']['free']}%, doubleup {int(s.torrents['t']['doubleup'])}, "
              f"featured {int(s.torrents['t']['featured'])}, token {bool(tokens)}")
    events = [None] * 8 + ["started"] * 4 + ["completed"] * 2 + ["stopped"] * 3
    modes = ["grow"] * 11 + ["stay"] * 4 + ["back"] * 2 + ["reset"] * 2 + ["jump"]
    for _ in range(rng.randint(3, 10)):
        p = rng.choice(peers)
        event = rng.choice(events)
        for counter in ("up", "down"):
            mode = rng.choice(modes)
            if counter == "down" and p["seeder"] and mode in ("grow", "jump"):
                mode = "stay"
            if mode == "grow":
                p[counter] += rng.randint(1, MAX_GROW // MIB) * MIB
            elif mode == "jump":
                p[counter] += (rng.randint(1, MAX_GROW // MIB) * MIB if counter == "up"
                               else rng.randint(1, 3) * GIB)
            elif mode == "back":
                p[counter] = max(0, p[counter] - rng.randint(1, 64) * MIB)
            elif mode == "reset":
                p[counter] = 0
        if event == "completed":
            p["seeder"] = True
        left = 0 if p["seeder"] else max(1, SIZE - p["down"])
        if left == 1 and rng.random() < 0.5:
            left = 0
            p["seeder"] = True
        r = rng.random()
        port = 1 if r < 0.08 else 2 if r < 0.1 else 0
        ip = "127.0.0.3" if rng.random() < 0.06 else None
        s.ann(p["name"], event, p["up"], p["down"], left=left, port=port, ip=ip,
              wait=rng.choice((GAP, GAP, 1.4, 1.7, 2.2)))
    return s


def features(s):
    """What a scenario does that a rule could treat differently."""
    out = set()
    state = {}  # peer -> "alive" | "stopped"
    last = {}
    ports = {}
    addrs = {}
    completed = {}
    users_peers = {}
    for st in s.steps:
        p = st["peer"]
        known = state.get(p)
        ports.setdefault(p, set()).add(st["alt_port"])
        addrs.setdefault(p, set()).add(st["ip"] or s.peers[p]["ip"])
        users_peers.setdefault((s.peers[p]["user"], st["torrent"]), set()).add(p)
        if st["event"] == "started" and known == "alive":
            out.add("repeated started")
        if st["event"] == "completed":
            completed[p] = completed.get(p, 0) + 1
            if completed[p] == 2:
                out.add("completed twice")
        if st["event"] == "stopped" and known != "alive":
            out.add("stop of an unknown or stopped peer")
        if st["event"] != "stopped" and st["event"] != "started" and known == "stopped":
            out.add("announce after a stop")
        if known == "alive" and p in last:
            up, down = last[p]
            if st["uploaded"] < up:
                out.add("uploaded goes back")
            if st["downloaded"] < down:
                out.add("downloaded goes back")
        last[p] = (st["uploaded"], st["downloaded"])
        state[p] = "stopped" if st["event"] == "stopped" else "alive"
    if any(len(v) > 1 for v in ports.values()):
        out.add("one peer id from two ports")
    if any(len(v) > 1 for v in addrs.values()):
        out.add("one peer id from two addresses")
    if any(len(v) > 1 for v in users_peers.values()):
        out.add("two peers of one user")
    if len(s.users) > 1:
        out.add("two users")
    for u in s.users.values():
        if u["group"] != "user" or u["personal"]:
            out.add(f"group {u['group']}" + (" + personal freeleech" if u["personal"] else ""))
    for t in s.torrents.values():
        if t["free"]:
            out.add(f"torrent {t['free']}% freeleech")
        if t["doubleup"]:
            out.add("torrent double upload")
        if t["featured"]:
            out.add("featured torrent")
        if t["tokens"]:
            out.add("freeleech token")
    return sorted(out)


def plan(args):
    rng = random.Random(args.seed)
    scenarios = scripted() + [random_scenario(rng, i) for i in range(args.random)]
    uid, tid, pnum = FIRST_USER, FIRST_TORRENT, 0
    users, torrents = [], []
    out = []
    for n, s in enumerate(scenarios):
        ids = {}
        for key, u in s.users.items():
            ids[key] = uid
            users.append({"id": uid, "group": u["group"], "personal": u["personal"],
                          "can_download": u["can_download"]})
            uid += 1
        tids = {}
        for key, t in s.torrents.items():
            tids[key] = tid
            torrents.append({"id": tid, **t, "tokens": [ids[u] for u in t["tokens"]]})
            tid += 1
        peers = {}
        for key, p in s.peers.items():
            pnum += 1
            # 20 bytes: an Azureus-style prefix and 12 digits of its own.
            peer_id = f"-qB4650-{pnum:012d}"
            peers[key] = {"user": p["user"], "user_id": ids[p["user"]], "ip": p["ip"],
                          "peer_id": peer_id, "id_of": p["id_of"],
                          # Its own port, and three others it may also use.
                          "ports": [10000 + pnum, 20000 + pnum, 30000 + pnum, 40000 + pnum]}
        for key, p in peers.items():
            if p["id_of"]:
                p["peer_id"] = peers[p["id_of"]]["peer_id"]
        steps = []
        for st in s.steps:
            p = peers[st["peer"]]
            port = 0 if st["alt_port"] < 0 else p["ports"][st["alt_port"]]
            info_hash = st["info_hash"] or info_hash_of(tids[st["torrent"]])
            steps.append({
                "peer": st["peer"], "user": p["user"], "user_id": p["user_id"],
                "torrent": st["torrent"], "torrent_id": tids[st["torrent"]],
                "passkey": st["passkey"] or passkey_of(p["user_id"]),
                "info_hash": info_hash.hex(), "peer_id": p["peer_id"],
                "ip": st["ip"] or p["ip"], "port": port, "event": st["event"],
                "uploaded": st["uploaded"], "downloaded": st["downloaded"], "left": st["left"],
                "compact": st["compact"], "wait": st["wait"]})
        out.append({"name": s.name, "kind": s.kind, "note": s.note, "reference": s.reference,
                    # Spread over 4 s, so that not every first announce
                    # comes at once.
                    "start": round((n * 0.37) % 4.0, 2),
                    "users": {k: {"id": ids[k], **s.users[k]} for k in s.users},
                    "torrents": {k: {"id": tids[k], **s.torrents[k]} for k in s.torrents},
                    "peers": peers, "steps": steps, "features": features(s)})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "plan.json"), "w") as f:
        json.dump({"seed": args.seed, "scenarios": out}, f, indent=1)
    with open(os.path.join(args.out, "seed.sql"), "w") as f:
        f.write(seed_sql(users, torrents))
    nscripted = sum(1 for s in out if s["kind"] == "scripted")
    print(f"{len(out)} scenarios ({nscripted} scripted, {len(out) - nscripted} random, seed {args.seed}), "
          f"{len(users)} users, {len(torrents)} torrents, "
          f"{sum(len(s['steps']) for s in out)} announces to each tracker")


def passkey_of(user_id):
    return hashlib.md5(f"diff-unit3d-passkey-{user_id}".encode()).hexdigest()


def info_hash_of(torrent_id):
    return hashlib.sha1(f"diff-unit3d-torrent-{torrent_id}".encode()).digest()


def seed_sql(users, torrents):
    """The rows both databases get, in one transaction. The foreign keys
    of users and torrents to tables the trackers never read (chat
    rooms, categories, types) are not checked for them."""
    q = []
    q.append("SET FOREIGN_KEY_CHECKS = 0;")
    q.append("START TRANSACTION;")
    rows = []
    for gid, slug, slots, immune, fl, du in GROUPS:
        rows.append(f"({gid}, '{slug}', '{slug}', {gid}, {'NULL' if slots is None else slots}, "
                    f"{immune}, {fl}, {du}, '#ffffff', 'fa-user', 1, 1, 1, 1)")
    q.append("INSERT INTO `groups` (id, name, slug, position, download_slots, is_immune, "
             "is_freeleech, is_double_upload, color, icon, can_chat, can_comment, can_invite, "
             "can_request) VALUES\n" + ",\n".join(rows) + ";")
    rows = [f"({UPLOADER}, 'uploader', 'uploader@example.test', 'x', '{passkey_of(UPLOADER)}', "
            f"{GROUP_ID['uploader']}, 1, 'rss-{UPLOADER}', '2025-01-01 00:00:00', '2025-01-01 00:00:00')"]
    for u in users:
        rows.append(f"({u['id']}, 'user{u['id']}', 'user{u['id']}@example.test', 'x', "
                    f"'{passkey_of(u['id'])}', {GROUP_ID[u['group']]}, {int(u['can_download'])}, "
                    f"'rss-{u['id']}', '2025-01-01 00:00:00', '2025-01-01 00:00:00')")
    q.append("INSERT INTO users (id, username, email, password, passkey, group_id, can_download, "
             "rsskey, created_at, updated_at) VALUES\n" + ",\n".join(rows) + ";")
    rows = []
    for t in torrents:
        rows.append(f"({t['id']}, 'torrent {t['id']}', '', 't{t['id']}.torrent', 1, {SIZE}, "
                    f"{UPLOADER}, 1, {t['free']}, {int(t['doubleup'])}, "
                    f"UNHEX('{info_hash_of(t['id']).hex()}'), '2025-01-01 00:00:00', '2025-01-01 00:00:00')")
    q.append("INSERT INTO torrents (id, name, description, file_name, num_file, size, user_id, "
             "status, free, doubleup, info_hash, created_at, updated_at) VALUES\n"
             + ",\n".join(rows) + ";")
    tokens = [(u, t["id"]) for t in torrents for u in t["tokens"]]
    if tokens:
        q.append("INSERT INTO freeleech_tokens (user_id, torrent_id, created_at, updated_at) VALUES\n"
                 + ",\n".join(f"({u}, {t}, '2025-01-01 00:00:00', '2025-01-01 00:00:00')" for u, t in tokens) + ";")
    personal = [u["id"] for u in users if u["personal"]]
    if personal:
        q.append("INSERT INTO personal_freeleeches (user_id, created_at, updated_at) VALUES\n"
                 + ",\n".join(f"({u}, '2025-01-01 00:00:00', '2025-01-01 00:00:00')" for u in personal) + ";")
    featured = [t["id"] for t in torrents if t["featured"]]
    if featured:
        q.append("INSERT INTO featured_torrents (user_id, torrent_id, created_at, updated_at) VALUES\n"
                 + ",\n".join(f"({UPLOADER}, {t}, '2025-01-01 00:00:00', '2025-01-01 00:00:00')" for t in featured) + ";")
    q.append("COMMIT;")
    q.append("SET FOREIGN_KEY_CHECKS = 1;")
    return "\n".join(q) + "\n"


# ---------------------------------------------------------------------------
# Driving.


def bdecode(data):
    """A bencoded value from bytes (strings stay bytes)."""

    def at(i):
        c = data[i:i + 1]
        if c == b"i":
            j = data.index(b"e", i)
            return int(data[i + 1:j]), j + 1
        if c == b"l":
            i, out = i + 1, []
            while data[i:i + 1] != b"e":
                v, i = at(i)
                out.append(v)
            return out, i + 1
        if c == b"d":
            i, out = i + 1, {}
            while data[i:i + 1] != b"e":
                k, i = at(i)
                v, i = at(i)
                out[k] = v
            return out, i + 1
        if c.isdigit():
            j = data.index(b":", i)
            n = int(data[i:j])
            return data[j + 1:j + 1 + n], j + 1 + n
        raise ValueError(f"not bencode at byte {i}")

    value, end = at(0)
    if end != len(data):
        raise ValueError("trailing bytes after the bencoded value")
    return value


def request_of(step):
    q = [("info_hash", urllib.parse.quote_from_bytes(bytes.fromhex(step["info_hash"]), safe="")),
         ("peer_id", urllib.parse.quote(step["peer_id"], safe="")),
         ("port", str(step["port"])), ("uploaded", str(step["uploaded"])),
         ("downloaded", str(step["downloaded"])), ("left", str(step["left"]))]
    if step["compact"] is not None:
        q.append(("compact", step["compact"]))
    if step["event"] is not None:
        q.append(("event", step["event"]))
    target = f"/announce/{step['passkey']}?" + "&".join(f"{k}={v}" for k, v in q)
    return (f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {USER_AGENT}\r\n"
            f"Accept-Encoding: identity\r\nConnection: close\r\n\r\n").encode()


def parse_answer(raw):
    """The fields compared, from a raw HTTP answer."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return {"error": f"no HTTP answer ({len(raw)} bytes)"}
    lines = head.split(b"\r\n")
    status = lines[0].decode(errors="replace")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    try:
        d = bdecode(body)
    except (ValueError, IndexError) as e:
        return {"error": f"{status}: not bencode ({e}): {body[:80]!r}"}
    if not isinstance(d, dict):
        return {"error": f"{status}: not a dictionary"}

    def text(key):
        v = d.get(key)
        return v.decode(errors="replace") if isinstance(v, bytes) else None

    peers = []
    raw_peers = d.get(b"peers", b"")
    if isinstance(raw_peers, bytes):
        for i in range(0, len(raw_peers) - len(raw_peers) % 6, 6):
            ip = ".".join(str(b) for b in raw_peers[i:i + 4])
            peers.append([ip, int.from_bytes(raw_peers[i + 4:i + 6], "big")])
    elif isinstance(raw_peers, list):
        for p in raw_peers:
            if isinstance(p, dict):
                peers.append([p.get(b"ip", b"").decode(errors="replace"), p.get(b"port")])
    return {"status": status, "failure": text(b"failure reason"),
            "warning": text(b"warning message"), "complete": d.get(b"complete"),
            "incomplete": d.get(b"incomplete"), "downloaded": d.get(b"downloaded"),
            "interval": d.get(b"interval"), "min_interval": d.get(b"min interval"),
            "peers": peers}


def announce_both(step, targets):
    """STEP to each of TARGETS at once: every connection opened, then
    every request written, then every answer read."""
    req = request_of(step)
    socks, out = [], []
    for host, port in targets:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(15)
        try:
            s.bind((step["ip"], 0))
            s.connect((host, port))
            socks.append(s)
        except OSError as e:
            s.close()
            socks.append(e)
    for s in socks:
        if isinstance(s, socket.socket):
            try:
                s.sendall(req)
            except OSError:
                pass
    for s in socks:
        if not isinstance(s, socket.socket):
            out.append({"error": f"connect: {s}"})
            continue
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
            out.append(parse_answer(b"".join(chunks)))
        except OSError as e:
            out.append({"error": f"read: {e}"})
        finally:
            s.close()
    return out


def drive(args):
    with open(os.path.join(args.out, "plan.json")) as f:
        scenarios = json.load(f)["scenarios"]

    def hostport(v):
        h, _, p = v.rpartition(":")
        return h, int(p)

    targets = {"main": [hostport(args.ours), hostport(args.unit3d)],
               "default": [hostport(args.ours), hostport(args.unit3d_default)]}
    t0 = time.monotonic()

    def run(s):
        time.sleep(s["start"])
        answers = []
        for step in s["steps"]:
            ours, ref = announce_both(step, targets[s.get("reference", "main")])
            answers.append({"at": round(time.monotonic() - t0, 3), "ours": ours, "unit3d": ref})
            time.sleep(step["wait"])
        return s["name"], answers

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        for name, answers in pool.map(run, scenarios):
            results[name] = answers
    took = time.monotonic() - t0
    with open(os.path.join(args.out, "answers.json"), "w") as f:
        json.dump({"seconds": round(took, 1), "answers": results}, f)
    errors = sum(1 for a in results.values() for x in a for side in ("ours", "unit3d")
                 if "error" in x[side])
    print(f"{sum(len(a) for a in results.values())} announces to each tracker in {took:.1f} s"
          f"{f'; {errors} without an answer' if errors else ''}")


# ---------------------------------------------------------------------------
# Comparing.


def sql(db, query):
    cmd = [os.environ.get("DIFF_MARIADB", "mariadb"), "--no-defaults", "--protocol=socket",
           f"--socket={os.environ['DIFF_MARIADB_SOCKET']}",
           f"--user={os.environ.get('DIFF_MARIADB_USER', 'root')}", "-N", "-B", db, "-e", query]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


def num(v):
    return None if v in (None, "NULL") else int(v)


def read_db(db):
    users = {int(r[0]): {"uploaded": int(r[1]), "downloaded": int(r[2])}
             for r in sql(db, "SELECT id, uploaded, downloaded FROM users")}
    history = {}
    for r in sql(db, "SELECT user_id, torrent_id, uploaded, actual_uploaded, client_uploaded, "
                     "downloaded, actual_downloaded, client_downloaded, seeder, active, immune, "
                     "completed_at IS NOT NULL, seedtime FROM history"):
        history[(int(r[0]), int(r[1]))] = dict(zip(
            ("uploaded", "actual_uploaded", "client_uploaded", "downloaded", "actual_downloaded",
             "client_downloaded", "seeder", "active", "immune", "completed_at", "seedtime"),
            (num(v) for v in r[2:])))
    peers = {}
    for r in sql(db, "SELECT user_id, torrent_id, peer_id, INET6_NTOA(ip), port, active, visible, "
                     "seeder, uploaded, downloaded FROM peers"):
        peers[(int(r[0]), int(r[1]), r[2])] = {
            "ip": r[3], "port": num(r[4]), "active": num(r[5]), "visible": num(r[6]),
            "seeder": num(r[7]), "uploaded": num(r[8]), "downloaded": num(r[9])}
    torrents = {int(r[0]): {"seeders": int(r[1]), "leechers": int(r[2]),
                            "times_completed": int(r[3])}
                for r in sql(db, "SELECT id, seeders, leechers, times_completed FROM torrents")}
    return {"users": users, "history": history, "peers": peers, "torrents": torrents}


def q(text):
    return "none" if text is None else f"«{text}»"


def compare_answer(s, index, ours, ref, add_kind):
    """Kinds of difference between two answers to the step INDEX of S."""
    step = s["steps"][index]
    prefix = "answer to a stop" if step["event"] == "stopped" else "answer"

    def add(kind):
        add_kind(prefix + kind[len("answer"):], ("step", index))

    if "error" in ours or "error" in ref:
        if ("error" in ours) != ("error" in ref):
            who = "ours" if "error" in ours else "UNIT3D-Announce"
            add(f"answer: no answer [{who}]")
        return
    if ours["failure"] != ref["failure"]:
        add(f"answer: failure reason differs [ours {q(ours['failure'])}, UNIT3D-Announce {q(ref['failure'])}]")
        return
    if ours["failure"] is not None:
        return
    if ours["warning"] != ref["warning"]:
        add(f"answer: warning differs [ours {q(ours['warning'])}, UNIT3D-Announce {q(ref['warning'])}]")
    for field in ("complete", "incomplete", "downloaded"):
        a, b = ours[field], ref[field]
        if a != b:
            if isinstance(a, int) and isinstance(b, int):
                add(f"answer: {field} {'more' if a > b else 'less'} than UNIT3D-Announce")
            else:
                add(f"answer: {field} differs [ours {a}, UNIT3D-Announce {b}]")
    # Where each peer announced from, step by step: an address and port
    # it never used resolves to none.
    used = set()
    for st in s["steps"]:
        used.add((st["ip"], st["port"], st["peer"]))

    def resolve(listed):
        out = []
        for ip, port in listed:
            key = next((k for (i, pt, k) in used if i == ip and pt == port), None)
            out.append((key, ip, port))
        return out

    lo, lr = resolve(ours["peers"]), resolve(ref["peers"])
    me = step["user"]

    def owner(key):
        return s["peers"][key]["user"] if key else None

    own_o = any(owner(k) == me for k, _, _ in lo)
    own_r = any(owner(k) == me for k, _, _ in lr)
    if own_o and not own_r:
        add("answer: peer list includes own user")
    if own_r and not own_o:
        add("answer: UNIT3D-Announce's peer list includes own user")
    others_o = {k for k, _, _ in lo if owner(k) != me}
    others_r = {k for k, _, _ in lr if owner(k) != me}
    if others_o - others_r:
        add("answer: peer list has another user's peer UNIT3D-Announce leaves out")
    if others_r - others_o:
        add("answer: peer list lacks another user's peer UNIT3D-Announce lists")

    def twice(lst):
        ids = [s["peers"][k]["peer_id"] + s["peers"][k]["user"] for k, _, _ in lst if k]
        return len(ids) != len(set(ids))

    if twice(lo):
        add("answer: peer list has one peer id twice")
    if twice(lr):
        add("answer: UNIT3D-Announce's peer list has one peer id twice")
    at_o = {k: (ip, port) for k, ip, port in lo}
    at_r = {k: (ip, port) for k, ip, port in lr}
    if any(k in at_r and at_r[k] != at_o[k] for k in at_o if not twice(lo)):
        add("answer: a peer listed at another address or port")


def more_less(add, what, a, b, suffix=""):
    if a is None or b is None or a == b:
        return
    add(f"{what} {'more' if a > b else 'less'}{suffix}")


def compare_db(s, ours, ref, add_kind):
    """Kinds of difference between the two databases' rows of S; each is
    given with where it is: ("user", id), ("pair", (user, torrent)),
    ("peer", (user, torrent, peer id)) or ("torrent", id)."""
    uids = {u["id"]: k for k, u in s["users"].items()}
    tids = {t["id"]: k for k, t in s["torrents"].items()}
    for uid in uids:
        a, b = ours["users"].get(uid), ref["users"].get(uid)
        if a and b:
            if a["downloaded"] != b["downloaded"]:
                add_kind(f"users: download charged {'more' if a['downloaded'] > b['downloaded'] else 'less'}"
                         " than UNIT3D-Announce", ("user", uid))
            if a["uploaded"] != b["uploaded"]:
                add_kind(f"users: upload credited {'more' if a['uploaded'] > b['uploaded'] else 'less'}"
                         " than UNIT3D-Announce", ("user", uid))
    keys = {k for db in (ours, ref) for k in db["history"] if k[0] in uids and k[1] in tids}
    for key in sorted(keys):
        def add(kind, key=key):
            add_kind(kind, ("pair", key))
        a, b = ours["history"].get(key), ref["history"].get(key)
        if not b:
            add("history: row only in ours")
            continue
        if not a:
            add("history: row only in UNIT3D-Announce's")
            continue
        more_less(add, "history: upload credited", a["uploaded"], b["uploaded"])
        more_less(add, "history: actual_uploaded", a["actual_uploaded"], b["actual_uploaded"])
        more_less(add, "history: download charged", a["downloaded"], b["downloaded"])
        more_less(add, "history: actual_downloaded", a["actual_downloaded"], b["actual_downloaded"])
        for f in ("client_uploaded", "client_downloaded", "seeder", "active", "immune"):
            if a[f] != b[f]:
                vals = f" [ours {a[f]}, UNIT3D-Announce {b[f]}]" if f in ("seeder", "active", "immune") else ""
                add(f"history: {f} differs{vals}")
        if a["completed_at"] != b["completed_at"]:
            add("history: completed_at set by " + ("ours only" if a["completed_at"] else "UNIT3D-Announce only"))
        if abs(a["seedtime"] - b["seedtime"]) > SEEDTIME_SLACK:
            add(f"history: seedtime {'more' if a['seedtime'] > b['seedtime'] else 'less'}")
    keys = {k for db in (ours, ref) for k in db["peers"] if k[0] in uids and k[1] in tids}
    for key in sorted(keys):
        def add(kind, key=key):
            add_kind(kind, ("peer", key))

        a, b = ours["peers"].get(key), ref["peers"].get(key)
        if not b:
            add("peers: row only in ours")
            continue
        if not a:
            add("peers: row only in UNIT3D-Announce's")
            continue
        for f in ("active", "visible", "seeder"):
            if a[f] != b[f]:
                add(f"peers: {f} differs [ours {a[f]}, UNIT3D-Announce {b[f]}]")
        for f in ("uploaded", "downloaded"):
            if a[f] != b[f]:
                add(f"peers: {f} differs")
    for tid in tids:
        a, b = ours["torrents"].get(tid), ref["torrents"].get(tid)
        if a and b:
            for f in ("seeders", "leechers", "times_completed"):
                more_less(lambda kind, tid=tid: add_kind(kind, ("torrent", tid)), f"torrents: {f}",
                          a[f], b[f], " than UNIT3D-Announce")


def claims_of(s, ours, ref):
    """Issue 41's two claims for one scenario: where ours charged less
    download, or credited more upload, than UNIT3D-Announce, each as
    (column, where), where as compare_db gives it."""
    uids = {u["id"] for u in s["users"].values()}
    tids = {t["id"] for t in s["torrents"].values()}
    less_down, more_up = [], []
    for uid in sorted(uids):
        a, b = ours["users"].get(uid), ref["users"].get(uid)
        if a and b:
            if a["downloaded"] < b["downloaded"]:
                less_down.append(("users.downloaded", ("user", uid)))
            if a["uploaded"] > b["uploaded"]:
                more_up.append(("users.uploaded", ("user", uid)))
    for key in sorted(ref["history"]):
        if key[0] in uids and key[1] in tids:
            a, b = ours["history"].get(key), ref["history"][key]
            a = a or {"downloaded": 0, "actual_downloaded": 0}
            if a["downloaded"] < b["downloaded"]:
                less_down.append(("history.downloaded", ("pair", key)))
            if a["actual_downloaded"] < b["actual_downloaded"]:
                less_down.append(("history.actual_downloaded", ("pair", key)))
    for key in sorted(ours["history"]):
        if key[0] in uids and key[1] in tids:
            a, b = ours["history"][key], ref["history"].get(key) or {"uploaded": 0}
            if a["uploaded"] > b["uploaded"]:
                more_up.append(("history.uploaded", ("pair", key)))
    return less_down, more_up


# ---------------------------------------------------------------------------
# Explaining: both trackers' accounting replayed, announce by announce,
# from a scenario's announces and the answers each tracker gave (an
# announce one refused changes nothing there), each by its own rules:
# UNIT3D-Announce's as its source at 946b6e7 has them (src/announce.rs,
# src/scheduler/*.rs), ours' as docs/OPERATIONS.md states them ("How an
# announce is credited"). Each announce whose credit differs between the
# two is given the rule that makes it differ; each kind of difference is
# then explained by the rules of the announces behind it. The replay's
# rows are checked against both databases, column by column: where they
# disagree, the replay misses a rule or a tracker has a bug, and the
# run says so (results.md, "Unexplained differences").

RATE = 1_250_000_000  # ours' max_upload_rate by default (10 Gbit/s), bytes a second
SLOT_WARNING = "Download slot limit reached."
STOPPED_UNKNOWN = "Stopped peer doesn't exist."
PEER_LIMIT = re.compile(r"You already have (\d+) peers on this torrent")
# Two announces of one user closer than this many seconds (as the driver
# timed them) may share one of UNIT3D-Announce's flushes (1 s apart).
SAME_FLUSH = 1.1


def admitted(answer):
    return "error" not in answer and answer["failure"] is None


def failure_of(answer):
    return None if "error" in answer else answer["failure"]


def factors_of(s, st):
    """The upload and download percent of announce ST, the same in both:
    the highest upload and lowest download of the site's, the group's
    and the torrent's; no download with a token, personal freeleech or a
    featured torrent, which also doubles upload."""
    user = s["users"][st["user"]]
    torrent = s["torrents"][st["torrent"]]
    _, _, _, _, freeleech, double = next(g for g in GROUPS if g[1] == user["group"])
    up = max(100, 200 if double else 100, 200 if torrent["doubleup"] else 100)
    down = min(100, 0 if freeleech else 100, 100 - torrent["free"])
    if user["personal"] or st["user"] in torrent["tokens"] or torrent["featured"]:
        down = 0
    if torrent["featured"]:
        up = 200
    return up, down


def new_pair():
    return {"uploaded": 0, "actual_uploaded": 0, "downloaded": 0, "actual_downloaded": 0,
            "client_uploaded": None, "client_downloaded": None, "seeder": None, "active": None,
            "completed_at": 0, "completed_by": None, "seedtime": 0.0, "intervals": 0,
            "counted_until": None, "done": False, "last": None, "prev": None, "completed_events": []}


class Replay:
    """Scenario S replayed by both trackers' rules, from ANSWERS (each
    announce's answers, as the driver got them)."""

    def __init__(self, s, answers):
        self.s = s
        self.answers_at = [a["at"] for a in answers]
        self.steps = []
        self.unexplained_steps = []
        self.u_pairs, self.o_pairs = {}, {}
        self.u_peers, self.o_peers = {}, {}
        # Completions per torrent: UNIT3D-Announce's (each peer's flips),
        # ours' in times_completed, and by ours' documented rule (a user's
        # first, once).
        self.u_flips, self.o_completions, self.o_firsts = {}, {}, {}
        self.departures = set()  # findings: where ours departs from its documented rules
        self.u_credits = {}  # user key -> [(at, credited up, credited down)]
        self.o_snatches = {}  # ours' snatches per torrent, as its answers count them
        # Each announce's torrent's snatches after it, as ours and
        # UNIT3D-Announce count them (their answers' `downloaded`).
        self.o_done_at, self.u_done_at = [], []
        self.o_firsts_at = []  # the same by ours' documented rule
        o_users = {}  # ours' user on a torrent while it has a peer there
        u_mem = {}  # UNIT3D-Announce's peers in memory
        o_rows = {}  # ours' rows in `peers` (the point each peer is credited from)
        o_mem = set()  # ours' accounts in memory
        windows = {}  # ours' upload-rate window per (user, torrent)
        limit_refused = set()  # peers UNIT3D-Announce refused for its peer limit
        for i, (st, ans) in enumerate(zip(s["steps"], answers)):
            at = ans["at"]
            key = (st["user"], st["torrent"], st["peer_id"])
            pk = (st["user"], st["torrent"])
            stop = st["event"] == "stopped"
            seeder = st["left"] == 0
            up, down = st["uploaded"], st["downloaded"]
            upf, downf = factors_of(s, st)
            rec = {"o": admitted(ans["ours"]), "u": admitted(ans["unit3d"]), "reasons": set(),
                   "o_credit": (0, 0, 0, 0), "u_credit": (0, 0, 0, 0), "o_row": False,
                   "u_row": False, "o_history": False, "u_history": False, "idle": False,
                   "torrent": st["torrent"], "pair": pk, "key": key, "stop": stop}
            # UNIT3D-Announce: src/announce.rs.
            u_old = u_mem.get(key)
            if rec["u"]:
                hidden = not stop and ans["unit3d"]["warning"] == SLOT_WARNING
                flip = False
                if stop:
                    # Each counter on its own, saturating; the peer forgotten.
                    du, dd = (max(0, up - u_old["up"]), max(0, down - u_old["down"])) if u_old else (0, 0)
                    if u_old is None:
                        self.unexplained_steps.append(
                            f"announce {i + 1}: UNIT3D-Announce admitted a stop of a peer it did not hold")
                    u_mem.pop(key, None)
                elif u_old is None:
                    du = dd = 0  # a new peer: nothing credited
                else:
                    # Either counter back: a restarted session, nothing credited.
                    back = up < u_old["up"] or down < u_old["down"]
                    du, dd = (0, 0) if back else (up - u_old["up"], down - u_old["down"])
                    flip = seeder and not u_old["seeder"]
                if not stop:
                    u_mem[key] = {"up": up, "down": down, "seeder": seeder}
                rec["u_credit"] = (upf * du // 100, du, downf * dd // 100, dd)
                pair = self.u_pairs.setdefault(pk, new_pair())
                self.book(pair, rec["u_credit"], st, i)
                pair["active"] = int(not stop)
                # Seedtime in SQL: from the row's updated_at where the row
                # was an active seeder and this announce is a seeder's.
                if pair["prev"] and pair["prev"][1] and pair["prev"][2] and seeder:
                    pair["seedtime"] += at - pair["prev"][0]
                    pair["intervals"] += 1
                pair["prev"] = (at, seeder, not stop)
                if st["event"] == "completed":
                    pair["completed_events"].append(i)
                rec["u_row"] = rec["u_history"] = True
                self.u_peers[key] = {"uploaded": up, "downloaded": down, "active": int(not stop),
                                     "seeder": int(seeder), "visible": int(not stop and not hidden), "step": i}
                if flip:
                    self.u_flips[st["torrent"]] = self.u_flips.get(st["torrent"], 0) + 1
                if rec["u_credit"][0] or rec["u_credit"][2]:
                    self.u_credits.setdefault(st["user"], []).append((at, rec["u_credit"][0], rec["u_credit"][2]))
            else:
                failure = failure_of(ans["unit3d"]) or ""
                if PEER_LIMIT.search(failure):
                    limit_refused.add(key)
                if stop and u_old is not None:
                    self.unexplained_steps.append(
                        f"announce {i + 1}: UNIT3D-Announce refused a stop of a peer it held")
            # Ours: docs/OPERATIONS.md, "How an announce is credited".
            prev = o_rows.get(key)
            restarted = prev is not None and (up < prev["up"] or down < prev["down"])
            flagged = False
            if rec["o"]:
                hidden = not stop and ans["ours"]["warning"] == SLOT_WARNING
                pair = self.o_pairs.get(pk)
                # What ours holds of the user on the torrent while one of
                # its peers is there: where its seeding was counted until,
                # and whether it completed the torrent (the answers'
                # snatches count that once).
                on = o_users.setdefault(pk, {"seeded_until": 0.0, "completed": False})
                held = key in o_mem
                completion = False
                if prev is None:
                    # A session nobody recorded: no upload, the download
                    # past the user's last report on the torrent before it
                    # (written or not; a stop nobody recorded that charged
                    # nothing reports none).
                    du = 0
                    dd = max(0, down - ((pair["client_downloaded"] or 0) if pair else 0))
                else:
                    du = 0 if restarted or prev["state"] == "stopped" else up - prev["up"]
                    dd = down - prev["down"] if down >= prev["down"] else down
                    completion = not stop and prev["state"] != "stopped" and seeder and not prev["seeder"]
                    if du:
                        start = max(windows.get(pk, 0.0), prev["at"])
                        if start + du / RATE > at:
                            flagged = True
                        else:
                            windows[pk] = start + du / RATE
                # Seedtime between two seeding announces of a peer that
                # stayed, once per user: from where the user's counting
                # reached, if later than the peer's previous announce.
                seeding = prev is not None and prev["state"] == "active" and prev["seeder"] and seeder
                since = max(prev["at"], on["seeded_until"]) if seeding else None
                if held and prev["seeder"] and seeder:
                    on["seeded_until"] = max(on["seeded_until"], at)
                # The answers' snatches: a user's first completion (a
                # leecher turned seeder, or a seeder's `completed`) while
                # ours holds it on the torrent.
                completes = completion or (st["event"] == "completed" and seeder and not stop)
                if completes and not on["completed"]:
                    on["completed"] = True
                    self.o_snatches[st["torrent"]] = self.o_snatches.get(st["torrent"], 0) + 1
                # A stop nobody recorded with nothing to charge: no row,
                # no history.
                rec["idle"] = prev is None and stop and dd == 0
                if stop:
                    o_mem.discard(key)
                    if not any(k[:2] == pk for k in o_mem):
                        o_users.pop(pk, None)  # the user gone from the torrent
                else:
                    o_mem.add(key)
                rec["o_credit"] = (0 if flagged else upf * du // 100, du, downf * dd // 100, dd)
                if not rec["idle"]:
                    o_rows[key] = {"up": up, "down": down, "seeder": seeder,
                                   "state": "stopped" if stop else "active", "at": at}
                    self.o_peers[key] = {"uploaded": up, "downloaded": down, "active": int(not stop),
                                         "seeder": int(seeder), "visible": int(not stop and not hidden),
                                         "step": i}
                    rec["o_row"] = True
                    pair = self.o_pairs.setdefault(pk, new_pair())
                    self.book(pair, rec["o_credit"], st, i)
                    pair["active"] = int(not stop or any(k[:2] == pk for k in o_mem))
                    # times_completed: a user's first completion (a leecher
                    # turned seeder, or a seeder's `completed`, which sets
                    # completed_at), once.
                    first = completion or (st["event"] == "completed" and seeder)
                    if first and not pair["done"]:
                        pair["done"] = True
                        self.o_firsts[st["torrent"]] = self.o_firsts.get(st["torrent"], 0) + 1
                    if first and not pair["completed_at"]:
                        self.o_completions[st["torrent"]] = self.o_completions.get(st["torrent"], 0) + 1
                        pair["completed_at"] = 1
                        pair["completed_by"] = ("completion", i) if completion else ("event", i)
                    if seeding:
                        pair["seedtime"] += at - since
                        # Ours counts whole seconds between announces: each
                        # stretch of intervals end to end may differ from
                        # the replay's by a second.
                        if since != pair["counted_until"]:
                            pair["intervals"] += 1
                        pair["counted_until"] = at
                    rec["o_history"] = True
            # The answer's `downloaded`: the torrent's snatches, the site's
            # (none here) and ours' since, which count a user's first
            # completion of the torrent once.
            self.o_done_at.append(self.o_snatches.get(st["torrent"], 0))
            self.u_done_at.append(self.u_flips.get(st["torrent"], 0))
            self.o_firsts_at.append(self.o_firsts.get(st["torrent"], 0))
            if rec["o"] and not stop and self.o_done_at[-1] != self.o_firsts_at[-1]:
                self.departures.add("snatches_again")
            if rec["o"] and not stop and ans["ours"]["downloaded"] != self.o_done_at[-1]:
                self.unexplained_steps.append(
                    f"announce {i + 1}: ours answered downloaded {ans['ours']['downloaded']}, the replay "
                    f"{self.o_done_at[-1]}")
            # Why the two differ at this announce.
            r = rec["reasons"]
            fo, fu = failure_of(ans["ours"]) or "", failure_of(ans["unit3d"]) or ""
            if rec["o"] and not rec["u"]:
                if fu == STOPPED_UNKNOWN:
                    if prev is None:
                        r.add("unknown_stop")
                    elif prev["state"] == "stopped":
                        r.add("after_stop")
                    elif key in limit_refused:
                        r.add("peer_limit")
                elif PEER_LIMIT.search(fu):
                    r.add("peer_limit")
            elif rec["u"] and not rec["o"]:
                if PEER_LIMIT.search(fo):
                    r.add("peer_limit")
            elif not rec["o"] and not rec["u"]:
                if fo != fu and PEER_LIMIT.search(fo) and PEER_LIMIT.search(fu):
                    r.add("peer_limit")
            elif rec["o_credit"] != rec["u_credit"]:
                if prev is None:
                    r.add("first")
                elif prev["state"] == "stopped":
                    r.add("after_stop")
                elif u_old is None:
                    if key in limit_refused:
                        r.add("peer_limit")
                elif restarted:
                    r.add("restart")
                if flagged:
                    r.add("rate_bound")
            if (rec["o"] != rec["u"] or (not rec["o"] and fo != fu)
                    or rec["o_credit"] != rec["u_credit"]) and not r:
                self.unexplained_steps.append(
                    f"announce {i + 1}: {'admitted' if rec['o'] else 'refused'} by ours, "
                    f"{'admitted' if rec['u'] else 'refused'} by UNIT3D-Announce, credits "
                    f"{rec['o_credit']} and {rec['u_credit']}: no rule says why")
            self.steps.append(rec)

    @staticmethod
    def book(pair, credit, st, i):
        pair["uploaded"] += credit[0]
        pair["actual_uploaded"] += credit[1]
        pair["downloaded"] += credit[2]
        pair["actual_downloaded"] += credit[3]
        pair["client_uploaded"], pair["client_downloaded"] = st["uploaded"], st["downloaded"]
        pair["seeder"] = int(st["left"] == 0)
        pair["last"] = i

    # -- where each difference comes from --------------------------------

    def user_key(self, uid):
        return next(k for k, u in self.s["users"].items() if u["id"] == uid)

    def torrent_key(self, tid):
        return next(k for k, t in self.s["torrents"].items() if t["id"] == tid)

    def pair_key(self, pair):
        return self.user_key(pair[0]), self.torrent_key(pair[1])

    def peer_key(self, peer):
        return self.user_key(peer[0]), self.torrent_key(peer[1]), peer[2]

    def reasons(self, steps):
        out = set()
        for rec in steps:
            out |= rec["reasons"]
        return out

    def one_sided(self, pred):
        """The announces matching PRED that only one tracker admitted."""
        return [r for r in self.steps if pred(r) and (r["o"] != r["u"] or (not r["o"] and r["reasons"]))]

    def swarm_reasons(self, torrent, until=None):
        """Why the two swarms of TORRENT differ (at announce UNTIL): the
        announces only one tracker admitted."""
        return self.reasons(self.one_sided(
            lambda r: r["torrent"] == torrent and (until is None or self.steps.index(r) <= until)))

    def credit_reasons(self, pairs, field, more):
        """Why ours credits more (MORE) or less than UNIT3D-Announce in
        FIELD (0 credited upload, 1 actual upload, 2 credited download, 3
        actual download) on PAIRS: the announces that do."""
        return self.reasons(r for r in self.steps if r["pair"] in pairs
                            and (r["o_credit"][field] > r["u_credit"][field] if more
                                 else r["o_credit"][field] < r["u_credit"][field]))

    def latest_reasons(self, pair):
        """Why the two rows of PAIR end with different announces: each
        announce after the earlier of the two lasts that only one wrote."""
        lo, lu = (self.o_pairs.get(pair) or {}).get("last"), (self.u_pairs.get(pair) or {}).get("last")
        if lo == lu:
            return set()
        out = set()
        first = min(x for x in (lo, lu) if x is not None)
        for rec in self.steps[first:]:
            if rec["pair"] == pair and rec["o_history"] != rec["u_history"]:
                out |= rec["reasons"]
        return out

    def user_replaced(self, user):
        """UNIT3D-Announce's users row lost credit to its flush's
        replacing: two of the user's credited announces close enough to
        share a flush."""
        times = sorted(t for t, _, _ in self.u_credits.get(user, []))
        return any(b - a < SAME_FLUSH for a, b in zip(times, times[1:]))

    def explain(self, kind, where, ours, ref):
        """The rules that explain KIND at WHERE (as compare_db and
        compare_answer give it)."""
        fam = family_of(kind)
        what, loc = where
        if what == "step":
            rec = self.steps[loc]
            torrent = rec["torrent"]
            if fam.endswith("failure reason differs"):
                return set(rec["reasons"])
            if fam == "answer to a stop: warning differs":
                a = self.s["steps"][loc]
                return {"stop_warning"} if a["event"] == "stopped" and "[ours none" in kind and SLOT_WARNING in kind \
                    else set()
            if "downloaded" in fam:
                out = self.swarm_reasons(torrent, loc)
                if self.o_done_at[loc] != self.o_firsts_at[loc]:
                    out.add("snatches_again")
                if self.u_done_at[loc] != self.o_firsts_at[loc]:
                    out.add("completion_once")
                return out
            return self.swarm_reasons(torrent, loc)
        if what == "user":
            user = self.user_key(loc)
            pairs = {pk for pk in set(self.o_pairs) | set(self.u_pairs) if pk[0] == user}
            more = "more" in kind
            field = 0 if "upload" in kind else 2
            out = self.credit_reasons(pairs, field, more)
            if more and self.user_replaced(user):
                out.add("user_replaced")
            return out
        if what == "pair":
            pair = self.pair_key(loc)
            o, u = self.o_pairs.get(pair) or new_pair(), self.u_pairs.get(pair) or new_pair()
            fields = {"history: upload credited": 0, "history: actual_uploaded": 1,
                      "history: download charged": 2, "history: actual_downloaded": 3}
            for prefix, field in fields.items():
                if fam.startswith(prefix + " "):
                    return self.credit_reasons({pair}, field, fam.endswith("more"))
            if fam.startswith("history: row only in"):
                return self.reasons(self.one_sided(lambda r: r["pair"] == pair))
            if fam in ("history: client_uploaded differs", "history: client_downloaded differs",
                       "history: seeder differs"):
                return self.latest_reasons(pair)
            if fam == "history: active differs":
                out = self.latest_reasons(pair)
                last = o["last"]
                if last is not None and self.steps[last]["stop"] and o["active"] == 1:
                    out.add("active")
                return out
            if fam == "history: completed_at set by ours only":
                out = set()
                by = o["completed_by"]
                if u["completed_events"]:
                    out.add("completed_at_replaced")
                elif by and by[0] == "completion":
                    out.add("completed_at")
                elif by:
                    out |= self.steps[by[1]]["reasons"]
                return out
            if fam == "history: completed_at set by UNIT3D-Announce only":
                out = self.reasons(self.one_sided(lambda r: r["pair"] == pair))
                if any(r["pair"] == pair and self.s["steps"][i]["event"] == "completed"
                       and self.s["steps"][i]["left"] > 0 for i, r in enumerate(self.steps)):
                    out.add("completed_leeching")
                return out
            if fam.startswith("history: seedtime"):
                # Both count it once per user; where the replays of the two
                # differ, by the intervals each counts.
                return {"seedtime"} if abs(o["seedtime"] - u["seedtime"]) >= 1 else set()
            return set()
        if what == "peer":
            peer = self.peer_key(loc)
            if fam.startswith("peers: row only in"):
                return self.reasons(self.one_sided(lambda r: r["key"] == peer))
            lo, lu = (self.o_peers.get(peer) or {}).get("step"), (self.u_peers.get(peer) or {}).get("step")
            if lo == lu or lo is None or lu is None:
                return set()
            return self.reasons(r for r in self.steps[min(lo, lu):]
                                if r["key"] == peer and r["o_row"] != r["u_row"])
        if what == "torrent":
            torrent = self.torrent_key(loc)
            if fam == "torrents: times_completed less than UNIT3D-Announce":
                firsts = self.o_firsts.get(torrent, 0)
                return {"completion_once"} if self.u_flips.get(torrent, 0) > firsts else set()
            if fam == "torrents: times_completed more than UNIT3D-Announce":
                once = self.o_completions.get(torrent, 0) > self.u_flips.get(torrent, 0)
                return ({"completion_once"} if once else set()) | self.swarm_reasons(torrent)
            return self.swarm_reasons(torrent)
        return set()

    # -- the replay against the databases ---------------------------------

    def check(self, ours, ref):
        """Where the replay's rows disagree with the databases: a list of
        (where, text)."""
        out = []
        s = self.s
        for side, db, pairs, peers in (("ours", ours, self.o_pairs, self.o_peers),
                                       ("UNIT3D-Announce", ref, self.u_pairs, self.u_peers)):
            for pk, p in sorted(pairs.items()):
                loc = (s["users"][pk[0]]["id"], s["torrents"][pk[1]]["id"])
                row = db["history"].get(loc)
                if row is None:
                    out.append((("pair", loc), f"{side}: history row expected, none"))
                    continue
                for f in ("uploaded", "actual_uploaded", "downloaded", "actual_downloaded",
                          "client_uploaded", "client_downloaded", "seeder", "active", "completed_at"):
                    want = p[f]
                    if f == "completed_at" and side != "ours":
                        want = int(bool(p["completed_events"]))
                        if want and not row[f] and any(
                                0 <= self.t(j) - self.t(e) < SAME_FLUSH
                                for e in p["completed_events"] for j in range(e + 1, len(self.steps))
                                if self.steps[j]["pair"] == pk and self.steps[j]["u"]):
                            continue  # replaced within a flush
                    if row[f] != want:
                        out.append((("pair", loc), f"{side}: history.{f} {row[f]}, replay {want}"))
                # Ours: a second per stretch counted end to end (whole
                # seconds between announces); UNIT3D-Announce: a second or
                # more per interval (counted at its flushes).
                slack = p["intervals"] + (1 if side == "ours" else SEEDTIME_SLACK)
                if abs(row["seedtime"] - p["seedtime"]) > slack:
                    out.append((("pair", loc), f"{side}: history.seedtime {row['seedtime']}, "
                                               f"replay {p['seedtime']:.1f}"))
            for key, p in sorted(peers.items()):
                loc = (s["users"][key[0]]["id"], s["torrents"][key[1]]["id"], key[2])
                row = db["peers"].get(loc)
                if row is None:
                    out.append((("peer", loc), f"{side}: peers row expected, none"))
                    continue
                for f in ("uploaded", "downloaded", "active", "seeder", "visible"):
                    if row[f] != p[f]:
                        out.append((("peer", loc), f"{side}: peers.{f} {row[f]}, replay {p[f]}"))
            for uk, u in s["users"].items():
                want = [sum(p[f] for pk, p in pairs.items() if pk[0] == uk) for f in ("uploaded", "downloaded")]
                row = db["users"].get(u["id"])
                got = [row["uploaded"], row["downloaded"]] if row else [0, 0]
                if got != want and not (side != "ours" and all(g <= w for g, w in zip(got, want))
                                        and self.user_replaced(uk)):
                    out.append((("user", u["id"]), f"{side}: users (uploaded, downloaded) {got}, replay {want}"))
            counts = self.o_completions if side == "ours" else self.u_flips
            for tk, t in s["torrents"].items():
                row = db["torrents"].get(t["id"])
                live = [p for k, p in peers.items() if k[1] == tk and p["active"] and p["visible"]]
                want = {"times_completed": counts.get(tk, 0),
                        "seeders": sum(1 for p in live if p["seeder"]),
                        "leechers": sum(1 for p in live if not p["seeder"])}
                for f, v in want.items():
                    if row and row[f] != v:
                        out.append((("torrent", t["id"]), f"{side}: torrents.{f} {row[f]}, replay {v}"))
        # Rows the replay does not expect.
        uids = {u["id"] for u in s["users"].values()}
        tids = {t["id"] for t in s["torrents"].values()}
        for side, db, pairs in (("ours", ours, self.o_pairs), ("UNIT3D-Announce", ref, self.u_pairs)):
            want = {(s["users"][pk[0]]["id"], s["torrents"][pk[1]]["id"]) for pk in pairs}
            for loc in db["history"]:
                if loc[0] in uids and loc[1] in tids and loc not in want:
                    out.append((("pair", loc), f"{side}: history row the replay does not make"))
        return out

    def t(self, i):
        return self.answers_at[i]


def fmt_answer(a):
    if "error" in a:
        return f"no answer: {a['error']}"
    if a["failure"] is not None:
        return f"failure {q(a['failure'])}"
    peers = " ".join(f"{ip}:{port}" for ip, port in a["peers"]) or "-"
    w = f" warning {q(a['warning'])}" if a["warning"] is not None else ""
    return (f"complete {a['complete']} incomplete {a['incomplete']} downloaded {a['downloaded']}"
            f"{w}; peers {peers}")


def fmt_where(where):
    what, loc = where
    if what == "step":
        return f"announce {loc + 1}"
    if what == "pair":
        return f"history ({loc[0]}, {loc[1]})"
    if what == "peer":
        return f"peer ({loc[0]}, {loc[1]}, {loc[2]})"
    return f"{what} {loc}"


def detail(s, answers, ours, ref, res, replay):
    out = [f"# {s['name']} ({s['kind']})", ""]
    if s["note"]:
        out += [s["note"], ""]
    if s["reference"] != "main":
        out += ["Played against UNIT3D-Announce at its default MAX_PEERS_PER_TORRENT_PER_USER (3).", ""]
    out.append("Users: " + ", ".join(
        f"{k} = id {u['id']} ({u['group']}{', personal freeleech' if u['personal'] else ''}"
        f"{', cannot download' if not u['can_download'] else ''})" for k, u in s["users"].items()))
    out.append("Torrents: " + ", ".join(
        f"{k} = id {t['id']} (free {t['free']}%, doubleup {int(t['doubleup'])}, "
        f"featured {int(t['featured'])}, tokens {t['tokens'] or '-'})" for k, t in s["torrents"].items()))
    out.append("Peers: " + ", ".join(
        f"{k} = user {p['user']}, {p['peer_id']}, {p['ip']}, ports {'/'.join(map(str, p['ports']))}"
        for k, p in s["peers"].items()))
    out.append("Features: " + (", ".join(s["features"]) or "-"))
    out += ["", "## Differences", "", "Each with where it is and the rules that explain it "
            "(`RULES` and `Replay` in deploy/diff-unit3d.py).", ""]
    for f in res["found"]:
        rules = ", ".join(rule_name(r) for r in f["rules"]) or "**unexplained**"
        out.append(f"- {f['kind']} ({fmt_where(f['where'])}): {rules}")
    if res["departures"]:
        out += ["", "## Findings: ours by no documented rule", ""] + [
            f"- {rule_name(r)} (docs: {RULE_INFO[r][1]})" for r in res["departures"]]
    if res["unexplained"]:
        out += ["", "## Unexplained", ""] + [f"- {fmt_where(u['where'])}: {u['text']}" for u in res["unexplained"]]
    for name, title in (("download_never_less", "download charged less than UNIT3D-Announce"),
                        ("upload_never_more", "upload credited more than UNIT3D-Announce")):
        if res["claims"][name]:
            out += ["", f"## Claim failing: {title}", ""]
            for c in res["claims"][name]:
                rules = ", ".join(rule_name(r) for r in c["rules"]) or "**no rule: a finding**"
                out.append(f"- {c['column']} ({fmt_where(c['where'])}): {rules}")
    out += ["", "## Announces", "",
            "Why: the rule that makes this announce's credit or admission differ, as the replay finds it.", "",
            "| # | at s | peer | torrent | event | uploaded | downloaded | left | from | ours | UNIT3D-Announce | why |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (st, a) in enumerate(zip(s["steps"], answers)):
        why = [rule_name(r) for r in sorted(replay.steps[i]["reasons"])]
        if replay.steps[i]["o"] and st["event"] != "stopped" and replay.o_done_at[i] != replay.o_firsts_at[i]:
            why.append(f"{rule_name('snatches_again')} (ours' downloaded {replay.o_done_at[i]}, by its "
                       f"documented rule {replay.o_firsts_at[i]})")
        why = ", ".join(why) or "-"
        out.append(f"| {i + 1} | {a['at']} | {st['peer']} ({st['user']}) | {st['torrent']} | "
                   f"{st['event'] if st['event'] is not None else '-'} | {st['uploaded']} | "
                   f"{st['downloaded']} | {st['left']} | {st['ip']}:{st['port']} | "
                   f"{fmt_answer(a['ours'])} | {fmt_answer(a['unit3d'])} | {why} |")
    uids = {u["id"]: k for k, u in s["users"].items()}
    tids = {t["id"]: k for k, t in s["torrents"].items()}

    def table(title, cols, rows_o, rows_r, keyname):
        nonlocal out
        out += ["", f"## {title}", "", f"| {keyname} | side | " + " | ".join(cols) + " |",
                "|---|---|" + "---|" * len(cols)]
        for key in sorted(set(rows_o) | set(rows_r)):
            for side, rows in (("ours", rows_o), ("UNIT3D-Announce", rows_r)):
                r = rows.get(key)
                cells = " | ".join(str(r[c]) for c in cols) if r else " | ".join("(none)" for _ in cols)
                out.append(f"| {key} | {side} | {cells} |")

    def pick(d, f):
        return {k: v for k, v in d.items() if f(k)}

    def inscen(k):
        return k[0] in uids and k[1] in tids

    table("users", ["uploaded", "downloaded"], pick(ours["users"], lambda k: k in uids),
          pick(ref["users"], lambda k: k in uids), "user")
    hcols = ["uploaded", "actual_uploaded", "client_uploaded", "downloaded", "actual_downloaded",
             "client_downloaded", "seeder", "active", "immune", "completed_at", "seedtime"]
    table("history (completed_at: 1 if set)", hcols, pick(ours["history"], inscen),
          pick(ref["history"], inscen), "(user, torrent)")
    pcols = ["ip", "port", "active", "visible", "seeder", "uploaded", "downloaded"]
    table("peers", pcols, pick(ours["peers"], inscen), pick(ref["peers"], inscen),
          "(user, torrent, peer id)")
    table("torrents", ["seeders", "leechers", "times_completed"],
          pick(ours["torrents"], lambda k: k in tids), pick(ref["torrents"], lambda k: k in tids),
          "torrent")
    return "\n".join(out) + "\n"


# The claims' columns: which counter, and which field of the replay's
# credit (0 credited upload, 2 credited download, 3 actual download).
CLAIM_FIELDS = {"users.downloaded": 2, "history.downloaded": 2, "history.actual_downloaded": 3,
                "users.uploaded": 0, "history.uploaded": 0}


def explain_scenario(s, answers, ours, ref):
    """Every difference of S with its place and rules, the claims failing
    with theirs, and what no rule explains."""
    found = []

    def add(kind, where):
        if not any(f["kind"] == kind and f["where"] == where for f in found):
            found.append({"kind": kind, "where": where})

    for i, ans in enumerate(answers):
        compare_answer(s, i, ans["ours"], ans["unit3d"], add)
    compare_db(s, ours, ref, add)
    replay = Replay(s, answers)
    disagree = replay.check(ours, ref)
    unexplained = [{"where": ("step", None), "text": t} for t in replay.unexplained_steps]
    unexplained += [{"where": w, "text": f"the replay disagrees with the database: {t}"} for w, t in disagree]
    doubtful = {w for w, _ in disagree}
    for f in found:
        rules = replay.explain(f["kind"], f["where"], ours, ref)
        f["rules"] = sorted(rules & set(rules_of(f["kind"])))
        if not f["rules"] or f["where"] in doubtful:
            why = (f"rules found {', '.join(sorted(rules))}, none of the kind's" if rules and not f["rules"]
                   else "the replay disagrees with the database there" if f["rules"] else "no rule found")
            f["rules"] = [] if f["where"] in doubtful else f["rules"]
            unexplained.append({"where": f["where"], "text": f"{f['kind']}: {why}"})
    less_down, more_up = claims_of(s, ours, ref)
    claims = {}
    for name, items, more in (("download_never_less", less_down, False), ("upload_never_more", more_up, True)):
        claims[name] = []
        for column, where in items:
            field = CLAIM_FIELDS[column]
            what, loc = where
            if what == "user":
                user = replay.user_key(loc)
                pairs = {pk for pk in set(replay.o_pairs) | set(replay.u_pairs) if pk[0] == user}
            else:
                user, pairs = None, {replay.pair_key(loc)}
            rules = replay.credit_reasons(pairs, field, more)
            if user is not None and more and replay.user_replaced(user):
                rules.add("user_replaced")
            if where in doubtful:
                rules = set()
            claims[name].append({"column": column, "where": where, "rules": sorted(rules)})
    kinds = []
    for f in found:
        if f["kind"] not in kinds:
            kinds.append(f["kind"])
    # Where ours departs from its documented rules, whether or not that
    # makes a difference with UNIT3D-Announce.
    departures = sorted(replay.departures | {r for rec in replay.steps for r in rec["reasons"]
                                             if RULE_INFO[r][2] == FINDING})
    return {"found": found, "kinds": kinds, "unexplained": unexplained, "claims": claims,
            "departures": departures}, replay


# The case that shows UNIT3D-Announce's peer limit one short, on purpose.
OFF_BY_ONE_CASE = "peer-limit-unit3d-default"


def off_by_one(s, answers):
    """Whether the case shows the off-by-one: UNIT3D-Announce at its
    default 3 refuses the user's third peer, which ours admits."""
    third = answers[2]
    f = failure_of(third["unit3d"]) or ""
    return admitted(third["ours"]) and bool(PEER_LIMIT.search(f)) and "3 peers" in f


def compare(args):
    with open(os.path.join(args.out, "plan.json")) as f:
        p = json.load(f)
    scenarios = p["scenarios"]
    with open(os.path.join(args.out, "answers.json")) as f:
        a = json.load(f)
    answers = a["answers"]
    rows = os.path.join(args.out, "rows.json")
    if args.ours_db:
        dbs = {"ours": read_db(args.ours_db), "main": read_db(args.unit3d_db),
               "default": read_db(args.unit3d_default_db)}
        with open(rows, "w") as f:
            json.dump({side: {table: [[list(k) if isinstance(k, tuple) else k, v] for k, v in t.items()]
                              for table, t in db.items()} for side, db in dbs.items()}, f)
    else:
        # Again from the rows a run read (OUT/rows.json), its databases gone.
        with open(rows) as f:
            dbs = {side: {table: {tuple(k) if isinstance(k, list) else k: v for k, v in t}
                          for table, t in db.items()} for side, db in json.load(f).items()}
    ours = dbs["ours"]
    refs = {"main": dbs["main"], "default": dbs["default"]}
    results = {}
    details = os.path.join(args.out, "details")
    os.makedirs(details, exist_ok=True)
    for f in os.listdir(details):
        os.remove(os.path.join(details, f))
    for s in scenarios:
        ref = refs[s["reference"]]
        res, replay = explain_scenario(s, answers[s["name"]], ours, ref)
        results[s["name"]] = res
        if res["found"] or res["unexplained"] or any(res["claims"].values()) or res["departures"]:
            with open(os.path.join(details, s["name"] + ".md"), "w") as f:
                f.write(detail(s, answers[s["name"]], ours, ref, res, replay))
    case = next((s for s in scenarios if s["name"] == OFF_BY_ONE_CASE), None)
    shown = case is not None and off_by_one(case, answers[case["name"]])
    write_results(args, p, a, scenarios, results, shown)


def write_results(args, p, a, scenarios, results, shown):
    kind_of = {s["name"]: s["kind"] for s in scenarios}
    size = {s["name"]: len(s["steps"]) for s in scenarios}
    n = len(scenarios)
    nscripted = sum(1 for s in scenarios if s["kind"] == "scripted")
    differing = [s["name"] for s in scenarios if results[s["name"]]["kinds"]]
    by_kind, by_rule, kind_rules = {}, {}, {}
    for s in scenarios:
        name = s["name"]
        for f in results[name]["found"]:
            names = by_kind.setdefault(f["kind"], [])
            if name not in names:
                names.append(name)
            for r in f["rules"]:
                kind_rules.setdefault(f["kind"], {}).setdefault(r, set()).add(name)
                by_rule.setdefault(r, set()).add(name)
        for r in results[name]["departures"]:
            by_rule.setdefault(r, set()).add(name)
    unexplained = [(s["name"], u) for s in scenarios for u in results[s["name"]]["unexplained"]]

    def split(names):
        sc = [x for x in names if kind_of[x] == "scripted"]
        return sc, [x for x in names if kind_of[x] == "random"]

    def cases(names, most=4):
        sc, rnd = split(sorted(names, key=lambda x: (kind_of[x] != "scripted", size[x], x)))
        shown_ = sc[:most] + rnd[:max(0, most - len(sc))]
        return ", ".join(f"`{x}`" for x in shown_) + (" ..." if len(names) > len(shown_) else "") or "-"

    claim_titles = (("download_never_less", "download charged by ours never less than UNIT3D-Announce's"),
                    ("upload_never_more", "upload credited by ours never more than UNIT3D-Announce's"))
    claim_rows = []
    for key, title in claim_titles:
        failing = [s["name"] for s in scenarios if results[s["name"]]["claims"][key]]
        rules, lacking = {}, []
        for name in failing:
            for c in results[name]["claims"][key]:
                if not c["rules"]:
                    lacking.append(name)
                for r in c["rules"]:
                    rules.setdefault(r, set()).add(name)
        why = "; ".join(f"{rule_name(r)} ({len(v)})" for r, v in sorted(rules.items(), key=lambda kv: -len(kv[1])))
        if lacking:
            why += ("; " if why else "") + f"**no rule ({len(set(lacking))}): a finding**"
        claim_rows.append(f"| {title} | {n - len(failing)} | {len(failing)} | {why or '-'} |")

    # The summary: what docs/OPERATIONS.md shows.
    ours_label = args.title.split(".", 1)[0] if args.title else "Ours"
    summary = [f"{ours_label} against UNIT3D-Announce 946b6e7, side by side on UNIT3D's real schema "
               f"(`deploy/diff-unit3d`): {n} scenarios ({nscripted} scripted, {n - nscripted} random), "
               f"{sum(size.values())} announces; {len(differing)} differ. Each difference, with the "
               "rule that explains it (a row of the table \"Where it differs from UNIT3D-Announce\", "
               "UNIT3D-Announce's bug, or a finding: ours by no documented rule) and the scenarios it "
               "appears in:", "",
               "| rule | whose | scenarios | e.g. |", "|---|---|---|---|"]
    whose = (OURS, THEIRS, FINDING)
    for r, names in sorted(by_rule.items(), key=lambda kv: (whose.index(RULE_INFO[kv[0]][2]), -len(kv[1]), kv[0])):
        summary.append(f"| {rule_name(r)} | {RULE_INFO[r][2]} | {len(names)} | {cases(names, 2)} |")
    summary += ["", "| issue 41's claim | holds in | fails in | explained by (scenarios) |", "|---|---|---|---|"]
    summary += claim_rows
    summary += ["", f"Unexplained differences: **{len(unexplained)}**"
                + (f" (in {len({x for x, _ in unexplained})} scenarios; see results.md)" if unexplained else "")
                + ". UNIT3D-Announce runs with MAX_PEERS_PER_TORRENT_PER_USER 4, which admits 3 as ours' 3 "
                "does; one case against its default 3 "
                + ("shows it admitting 2 (`peer-limit-unit3d-default`)." if shown
                   else "was to show it admitting 2, and **did not** (`peer-limit-unit3d-default`).")]

    lines = ["# UNIT3D-Announce side by side: differences", ""]
    lines += [f"{args.title}" if args.title else "", ""]
    lines += ["## Summary", ""] + summary
    lines += ["", "## Findings: where ours departs from its documented rules", ""]
    findings = [r for r in by_rule if RULE_INFO[r][2] == FINDING]
    if not findings:
        lines.append("None.")
    for r in sorted(findings):
        names = sorted(by_rule[r], key=lambda x: (size[x], x))
        scripted_ = [x for x in names if kind_of[x] == "scripted"]
        lines.append(f"- **{rule_name(r)}** (docs row: {RULE_INFO[r][1]}): {len(names)} scenarios, "
                     f"the smallest `{names[0]}` ({size[names[0]]} announces)"
                     + (f", scripted: {', '.join(f'`{x}`' for x in scripted_)}" if scripted_ else "")
                     + "; see details/NAME.md.")
    unseen = [rule_name(r) for r in RULE_INFO if r not in by_rule]
    lines += ["", "Rules no scenario shows in this run: " + ("; ".join(unseen) or "none") + "."]
    lines += ["", "## Issue 41's claims, scenario by scenario", ""]
    for key, title in claim_titles:
        failing = [s["name"] for s in scenarios if results[s["name"]]["claims"][key]]
        lines.append(f"- {title}: " + ("holds in every scenario." if not failing else
                                      f"fails in {len(failing)}:"))
        for name in failing:
            for c in results[name]["claims"][key]:
                rules = ", ".join(rule_name(r) for r in c["rules"]) or "**no rule: a finding**"
                lines.append(f"  - `{name}`, {c['column']} ({fmt_where(c['where'])}): {rules}")
    lines += ["", "## Unexplained differences", ""]
    if not unexplained:
        lines.append("None: every difference in every scenario is explained by a rule, and the replay "
                     "of both trackers' rules agrees with both databases, column by column.")
    for name, u in unexplained:
        lines.append(f"- `{name}`, {fmt_where(u['where']) if u['where'][1] is not None else 'replay'}: "
                     f"{u['text']}")
    lines += ["", f"## Off-by-one of UNIT3D-Announce's peer limit", "",
              "UNIT3D-Announce at 946b6e7 inserts a new peer before it counts the user's peers, so the new "
              "one counts itself: MAX_PEERS_PER_TORRENT_PER_USER 3 admits 2. This run gives it 4 (it admits "
              "3, as ours' 3 does) and plays `peer-limit-unit3d-default` against a third process at its "
              "default 3: " + ("it refused the user's third peer, which ours admitted." if shown else
                               "**it did not refuse the user's third peer**: see details/peer-limit-unit3d-default.md.")]
    lines += ["", "## Differences by kind", "",
              "Each kind with the rules that explain it, per scenario (`RULES` lists the rules each kind can "
              "have; the replay of the scenario's announces picks them), and the scenarios it appears in "
              "(a scenario may show several kinds). The answers to a `stopped` are kinds of their own "
              f"(\"answer to a stop\"). Seedtime counts as equal within {SEEDTIME_SLACK} s: both count whole "
              "seconds from clocks (UNIT3D-Announce at its flushes), so the seedtime kinds of scenarios near "
              "that move between two runs; the other kinds repeat.", "",
              "| difference | rules (scenarios) | scenarios | scripted | random | e.g. |",
              "|---|---|---|---|---|---|"]
    for k, names in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        sc, rnd = split(names)
        rules = "; ".join(f"{rule_name(r)} ({len(v)})" for r, v in
                          sorted(kind_rules.get(k, {}).items(), key=lambda kv: -len(kv[1])))
        lacking = [x for x in names if any(f["kind"] == k and not f["rules"] for f in results[x]["found"])]
        if lacking:
            rules += ("; " if rules else "") + f"**unexplained ({len(lacking)})**"
        lines.append(f"| {k} | {rules} | {len(names)} | {len(sc)} | {len(rnd)} | {cases(names)} |")
    feats = {}
    for s in scenarios:
        for f in s["features"]:
            feats.setdefault(f, []).append(s["name"])
    lines += ["", "## What the differing scenarios do", "",
              "| the scenario has | scenarios | differing | of which scripted |", "|---|---|---|---|"]
    for f, names in sorted(feats.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        d = [x for x in names if results[x]["kinds"]]
        lines.append(f"| {f} | {len(names)} | {len(d)} | {len(split(d)[0])} |")
    same = [s["name"] for s in scenarios if not results[s["name"]]["kinds"] and s["kind"] == "scripted"]
    lines += ["", "Scripted cases with no difference: " + (", ".join(f"`{x}`" for x in same) or "none"),
              "", "Each differing scenario: `details/NAME.md` (its differences with their rules, its "
              "announces with both answers and the rule behind each, its rows in both databases)."]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "summary-for-docs.md"), "w") as f:
        f.write("\n".join(summary) + "\n")

    def where_json(w):
        return [w[0], list(w[1]) if isinstance(w[1], tuple) else w[1]]

    out = {
        "title": args.title, "seed": p["seed"], "scenarios": n, "scripted": nscripted,
        "announces": sum(size.values()), "drive_seconds": a["seconds"],
        "differing": len(differing), "off_by_one_shown": shown,
        "rules": {r: {"name": v[0], "docs_row": v[1], "whose": v[2],
                      "scenarios": sorted(by_rule.get(r, ()))} for r, v in RULE_INFO.items()},
        "claims": {key: {"fails_in": [x for x in results if results[x]["claims"][key]],
                         "failures": {x: [{"column": c["column"], "where": where_json(c["where"]),
                                           "rules": c["rules"]} for c in results[x]["claims"][key]]
                                      for x in results if results[x]["claims"][key]}}
                   for key, _ in claim_titles},
        "unexplained": [{"scenario": x, "where": where_json(u["where"]), "text": u["text"]}
                        for x, u in unexplained],
        "kinds": [{"kind": k, "family": family_of(k), "rules": {r: sorted(v) for r, v in kind_rules.get(k, {}).items()},
                   "scenarios": names}
                  for k, names in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "per_scenario": {s["name"]: {"kind": s["kind"], "reference": s["reference"], "features": s["features"],
                                     "differences": [{"kind": f["kind"], "where": where_json(f["where"]),
                                                      "rules": f["rules"]} for f in results[s["name"]]["found"]]}
                         for s in scenarios},
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("\n".join(lines[:lines.index("## Differences by kind")]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--random", type=int, default=370)
    d = sub.add_parser("drive")
    d.add_argument("out")
    d.add_argument("--ours", required=True)
    d.add_argument("--unit3d", required=True)
    d.add_argument("--unit3d-default", required=True)
    c = sub.add_parser("compare")
    c.add_argument("out")
    c.add_argument("--ours-db", help="without the three: again from OUT/rows.json")
    c.add_argument("--unit3d-db")
    c.add_argument("--unit3d-default-db")
    c.add_argument("--title", default="")
    args = ap.parse_args()
    {"plan": plan, "drive": drive, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
