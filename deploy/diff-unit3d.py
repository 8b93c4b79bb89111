#!/usr/bin/env python3
"""The scenarios of deploy/diff-unit3d, and their comparison.

Python 3.11, standard library only. deploy/diff-unit3d runs the database
and the two trackers; this file does the rest, in three steps:

  diff-unit3d.py plan OUT [--seed N] [--random N]
      Writes OUT/plan.json (every scenario: its users, groups, torrents,
      peers and announces, with the ids, passkeys, info-hashes, peer ids,
      addresses and ports given to them) and OUT/seed.sql (the rows both
      databases get: groups, users, torrents, freeleech tokens, personal
      freeleech, featured torrents).
  diff-unit3d.py drive OUT --ours HOST:PORT --unit3d HOST:PORT
      Plays every scenario, all of them interleaved in one pass (one
      thread each), each announce sent to both trackers at the same
      moment (both connections opened, then both requests written, then
      both answers read), with the scenario's sleeps between announces.
      Writes OUT/answers.json.
  diff-unit3d.py compare OUT --ours-db NAME --unit3d-db NAME
      After both trackers have stopped (each flushes what it holds as it
      stops), reads both databases with the `mariadb` client
      (DIFF_MARIADB, DIFF_MARIADB_SOCKET and DIFF_MARIADB_USER from the
      environment) and writes OUT/results.md (the tables), OUT/details/
      (one file per differing scenario) and OUT/summary.json.

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
answers to a `stopped` apart, "answer to a stop: ..."); RULES below
maps a kind to a named rule, so that the differences a rule explains can
be labelled; every kind starts unlabelled. Apart from the kinds, every
scenario is checked for the two claims of issue 41: ours never charges
less download, and never credits more upload, than UNIT3D-Announce.
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
# The kinds of difference in an answer; each is told apart for the
# answers to a `stopped` ("answer to a stop: ...") and to the others
# ("answer: ..."), since a client ignores most of the former.
ANSWER_KINDS = [
    "failure reason differs",
    "warning differs",
    "complete more than UNIT3D-Announce",
    "complete less than UNIT3D-Announce",
    "incomplete more than UNIT3D-Announce",
    "incomplete less than UNIT3D-Announce",
    "downloaded more than UNIT3D-Announce",
    "downloaded less than UNIT3D-Announce",
    "peer list includes own user",
    "UNIT3D-Announce's peer list includes own user",
    "peer list has another user's peer UNIT3D-Announce leaves out",
    "peer list lacks another user's peer UNIT3D-Announce lists",
    "peer list has one peer id twice",
    "UNIT3D-Announce's peer list has one peer id twice",
    "a peer listed at another address or port",
    "no answer",
]
# The classification: each kind of difference (by its family: the text
# before any " [" that carries the two values) to a named rule, the
# reason it is expected (a line of docs/OPERATIONS.md's table of
# differences, or an issue), e.g.
#     "answer: peer list includes own user": "own peers listed (issue 41)",
# None: not explained yet. results.md shows each kind's rule.
RULES = {
    **{f"{prefix}: {kind}": None for prefix in ("answer", "answer to a stop") for kind in ANSWER_KINDS},
    "users: download charged more than UNIT3D-Announce": None,
    "users: download charged less than UNIT3D-Announce": None,
    "users: upload credited more than UNIT3D-Announce": None,
    "users: upload credited less than UNIT3D-Announce": None,
    "history: row only in ours": None,
    "history: row only in UNIT3D-Announce's": None,
    "history: upload credited more": None,
    "history: upload credited less": None,
    "history: actual_uploaded more": None,
    "history: actual_uploaded less": None,
    "history: client_uploaded differs": None,
    "history: download charged more": None,
    "history: download charged less": None,
    "history: actual_downloaded more": None,
    "history: actual_downloaded less": None,
    "history: client_downloaded differs": None,
    "history: seeder differs": None,
    "history: active differs": None,
    "history: immune differs": None,
    "history: completed_at set by ours only": None,
    "history: completed_at set by UNIT3D-Announce only": None,
    "history: seedtime more": None,
    "history: seedtime less": None,
    "peers: row only in ours": None,
    "peers: row only in UNIT3D-Announce's": None,
    "peers: active differs": None,
    "peers: visible differs": None,
    "peers: seeder differs": None,
    "peers: uploaded differs": None,
    "peers: downloaded differs": None,
    "torrents: seeders more than UNIT3D-Announce": None,
    "torrents: seeders less than UNIT3D-Announce": None,
    "torrents: leechers more than UNIT3D-Announce": None,
    "torrents: leechers less than UNIT3D-Announce": None,
    "torrents: times_completed more than UNIT3D-Announce": None,
    "torrents: times_completed less than UNIT3D-Announce": None,
}


def family_of(kind):
    return kind.split(" [", 1)[0]


def rule_of(kind):
    return RULES.get(kind, RULES.get(family_of(kind)))


# ---------------------------------------------------------------------------
# Scenarios.


class Scenario:
    """Users, torrents, peers and the announces of one case."""

    def __init__(self, name, kind, note=""):
        self.name = name
        self.kind = kind  # "scripted" or "random"
        self.note = note
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
        out.append({"name": s.name, "kind": s.kind, "note": s.note,
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

    targets = [hostport(args.ours), hostport(args.unit3d)]
    t0 = time.monotonic()

    def run(s):
        time.sleep(s["start"])
        answers = []
        for step in s["steps"]:
            ours, ref = announce_both(step, targets)
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


def compare_answer(s, step, ours, ref, add_kind):
    """Kinds of difference between two answers to STEP."""
    prefix = "answer to a stop" if step["event"] == "stopped" else "answer"

    def add(kind):
        add_kind(prefix + kind[len("answer"):])

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


def compare_db(s, ours, ref, add):
    uids = {u["id"]: k for k, u in s["users"].items()}
    tids = {t["id"]: k for k, t in s["torrents"].items()}
    for uid in uids:
        a, b = ours["users"].get(uid), ref["users"].get(uid)
        if a and b:
            if a["downloaded"] != b["downloaded"]:
                add(f"users: download charged {'more' if a['downloaded'] > b['downloaded'] else 'less'}"
                    " than UNIT3D-Announce")
            if a["uploaded"] != b["uploaded"]:
                add(f"users: upload credited {'more' if a['uploaded'] > b['uploaded'] else 'less'}"
                    " than UNIT3D-Announce")
    keys = {k for db in (ours, ref) for k in db["history"] if k[0] in uids and k[1] in tids}
    for key in sorted(keys):
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
                more_less(add, f"torrents: {f}", a[f], b[f], " than UNIT3D-Announce")


def claims_of(s, ours, ref):
    """Issue 41's two claims for one scenario: the columns where ours
    charged less download, or credited more upload, than UNIT3D-Announce."""
    uids = {u["id"] for u in s["users"].values()}
    tids = {t["id"] for t in s["torrents"].values()}
    less_down, more_up = [], []
    for uid in uids:
        a, b = ours["users"].get(uid), ref["users"].get(uid)
        if a and b:
            if a["downloaded"] < b["downloaded"]:
                less_down.append("users.downloaded")
            if a["uploaded"] > b["uploaded"]:
                more_up.append("users.uploaded")
    for key in ref["history"]:
        if key[0] in uids and key[1] in tids:
            a, b = ours["history"].get(key), ref["history"][key]
            a = a or {"downloaded": 0, "actual_downloaded": 0}
            if a["downloaded"] < b["downloaded"]:
                less_down.append("history.downloaded")
            if a["actual_downloaded"] < b["actual_downloaded"]:
                less_down.append("history.actual_downloaded")
    for key in ours["history"]:
        if key[0] in uids and key[1] in tids:
            a, b = ours["history"][key], ref["history"].get(key) or {"uploaded": 0}
            if a["uploaded"] > b["uploaded"]:
                more_up.append("history.uploaded")
    return sorted(set(less_down)), sorted(set(more_up))


def fmt_answer(a):
    if "error" in a:
        return f"no answer: {a['error']}"
    if a["failure"] is not None:
        return f"failure {q(a['failure'])}"
    peers = " ".join(f"{ip}:{port}" for ip, port in a["peers"]) or "-"
    w = f" warning {q(a['warning'])}" if a["warning"] is not None else ""
    return (f"complete {a['complete']} incomplete {a['incomplete']} downloaded {a['downloaded']}"
            f"{w}; peers {peers}")


def detail(s, answers, ours, ref, kinds, claims):
    out = [f"# {s['name']} ({s['kind']})", ""]
    if s["note"]:
        out += [s["note"], ""]
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
    out += ["", "## Differences", ""]
    out += [f"- {k}" + (f" (rule: {rule_of(k)})" if rule_of(k) else "") for k in kinds]
    if claims[0] or claims[1]:
        out += ["", "## Claims", ""]
        if claims[0]:
            out.append(f"- download charged less than UNIT3D-Announce: {', '.join(claims[0])}")
        if claims[1]:
            out.append(f"- upload credited more than UNIT3D-Announce: {', '.join(claims[1])}")
    out += ["", "## Announces", "",
            "| # | at s | peer | torrent | event | uploaded | downloaded | left | from | ours | UNIT3D-Announce |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (st, a) in enumerate(zip(s["steps"], answers)):
        out.append(f"| {i + 1} | {a['at']} | {st['peer']} ({st['user']}) | {st['torrent']} | "
                   f"{st['event'] if st['event'] is not None else '-'} | {st['uploaded']} | "
                   f"{st['downloaded']} | {st['left']} | {st['ip']}:{st['port']} | "
                   f"{fmt_answer(a['ours'])} | {fmt_answer(a['unit3d'])} |")
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

    pick = lambda d, f: {k: v for k, v in d.items() if f(k)}
    table("users", ["uploaded", "downloaded"], pick(ours["users"], lambda k: k in uids),
          pick(ref["users"], lambda k: k in uids), "user")
    hcols = ["uploaded", "actual_uploaded", "client_uploaded", "downloaded", "actual_downloaded",
             "client_downloaded", "seeder", "active", "immune", "completed_at", "seedtime"]
    inscen = lambda k: k[0] in uids and k[1] in tids
    table("history (completed_at: 1 if set)", hcols, pick(ours["history"], inscen),
          pick(ref["history"], inscen), "(user, torrent)")
    pcols = ["ip", "port", "active", "visible", "seeder", "uploaded", "downloaded"]
    table("peers", pcols, pick(ours["peers"], inscen), pick(ref["peers"], inscen),
          "(user, torrent, peer id)")
    table("torrents", ["seeders", "leechers", "times_completed"],
          pick(ours["torrents"], lambda k: k in tids), pick(ref["torrents"], lambda k: k in tids),
          "torrent")
    return "\n".join(out) + "\n"


def compare(args):
    with open(os.path.join(args.out, "plan.json")) as f:
        p = json.load(f)
    scenarios = p["scenarios"]
    with open(os.path.join(args.out, "answers.json")) as f:
        a = json.load(f)
    answers = a["answers"]
    ours, ref = read_db(args.ours_db), read_db(args.unit3d_db)
    per = {}
    claims = {}
    for s in scenarios:
        kinds = []

        def add(kind, kinds=kinds):
            if kind not in kinds:
                kinds.append(kind)

        for st, ans in zip(s["steps"], answers[s["name"]]):
            compare_answer(s, st, ans["ours"], ans["unit3d"], add)
        compare_db(s, ours, ref, add)
        per[s["name"]] = kinds
        claims[s["name"]] = claims_of(s, ours, ref)
    details = os.path.join(args.out, "details")
    os.makedirs(details, exist_ok=True)
    for f in os.listdir(details):
        os.remove(os.path.join(details, f))
    for s in scenarios:
        if per[s["name"]] or claims[s["name"]][0] or claims[s["name"]][1]:
            with open(os.path.join(details, s["name"] + ".md"), "w") as f:
                f.write(detail(s, answers[s["name"]], ours, ref, per[s["name"]], claims[s["name"]]))
    write_results(args, p, a, scenarios, per, claims)


def write_results(args, p, a, scenarios, per, claims):
    kind_of = {s["name"]: s["kind"] for s in scenarios}
    n = len(scenarios)
    nscripted = sum(1 for s in scenarios if s["kind"] == "scripted")
    differing = [s["name"] for s in scenarios if per[s["name"]]]
    by_kind = {}
    for name in (s["name"] for s in scenarios):
        for k in per[name]:
            by_kind.setdefault(k, []).append(name)

    def split(names):
        sc = [x for x in names if kind_of[x] == "scripted"]
        return sc, [x for x in names if kind_of[x] == "random"]

    def cases(names, most=12):
        sc, rnd = split(names)
        shown = ", ".join(f"`{x}`" for x in sc)
        if not sc and rnd:
            shown = "random: " + ", ".join(f"`{x}`" for x in rnd[:4]) + (" ..." if len(rnd) > 4 else "")
        return shown or "-"

    lines = ["# UNIT3D-Announce side by side: differences", ""]
    lines += [f"{args.title}" if args.title else "", ""]
    lines += [f"{n} scenarios ({nscripted} scripted, {n - nscripted} random from seed {p['seed']}), "
              f"{sum(len(s['steps']) for s in scenarios)} announces to each tracker in "
              f"{a['seconds']} s. Differing: **{len(differing)} of {n}** "
              f"({len(split(differing)[0])} scripted, {len(split(differing)[1])} random).", ""]
    lines += ["## Issue 41's claims", "",
              "| claim | holds in | fails in | columns where it fails (scenarios) | scripted cases failing |",
              "|---|---|---|---|---|"]
    for i, claim in enumerate(("download charged by ours never less than UNIT3D-Announce's",
                               "upload credited by ours never more than UNIT3D-Announce's")):
        failing = [s["name"] for s in scenarios if claims[s["name"]][i]]
        cols = {}
        for name in failing:
            for c in claims[name][i]:
                cols[c] = cols.get(c, 0) + 1
        lines.append(f"| {claim} | {n - len(failing)} | {len(failing)} | "
                     + (", ".join(f"{c} ({v})" for c, v in sorted(cols.items())) or "-")
                     + f" | {cases(failing) if failing else '-'} |")
    lines += ["", "## Differences by kind", "",
              "Each kind with the scenarios it appears in (a scenario may show several kinds), "
              "the rule that explains it (`RULES` in deploy/diff-unit3d.py; none yet: raw "
              "kinds), and the scripted cases among them.", "",
              "| difference | rule | scenarios | scripted | random | scripted cases |",
              "|---|---|---|---|---|---|"]
    for k, names in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        sc, rnd = split(names)
        lines.append(f"| {k} | {rule_of(k) or '-'} | {len(names)} | {len(sc)} | {len(rnd)} | "
                     f"{cases(names)} |")
    lines += ["", f"Seedtime counts as equal within {SEEDTIME_SLACK} s: both count whole seconds from "
              "clocks (UNIT3D-Announce at its flushes), so the seedtime kinds of scenarios near "
              "that move between two runs; the other kinds repeat. The answers to a `stopped` are "
              "kinds of their own (\"answer to a stop\")."]
    feats = {}
    for s in scenarios:
        for f in s["features"]:
            feats.setdefault(f, []).append(s["name"])
    lines += ["", "## What the differing scenarios do", "",
              "| the scenario has | scenarios | differing | of which scripted |", "|---|---|---|---|"]
    for f, names in sorted(feats.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        d = [x for x in names if per[x]]
        lines.append(f"| {f} | {len(names)} | {len(d)} | {len(split(d)[0])} |")
    same = [s["name"] for s in scenarios if not per[s["name"]] and s["kind"] == "scripted"]
    lines += ["", "Scripted cases with no difference: " + (", ".join(f"`{x}`" for x in same) or "none"),
              "", "Each differing scenario: `details/NAME.md` (its announces and both answers, "
              "its rows in both databases)."]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    summary = {
        "title": args.title, "seed": p["seed"], "scenarios": n, "scripted": nscripted,
        "announces": sum(len(s["steps"]) for s in scenarios), "drive_seconds": a["seconds"],
        "differing": len(differing),
        "claims": {
            "download_never_less": {
                "fails_in": [x for x in per if claims[x][0]],
                "columns": {x: claims[x][0] for x in per if claims[x][0]}},
            "upload_never_more": {
                "fails_in": [x for x in per if claims[x][1]],
                "columns": {x: claims[x][1] for x in per if claims[x][1]}}},
        "kinds": [{"kind": k, "family": family_of(k), "rule": rule_of(k), "scenarios": names}
                  for k, names in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "per_scenario": {s["name"]: {"kind": s["kind"], "features": s["features"],
                                     "differences": per[s["name"]]} for s in scenarios},
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\n".join(lines))


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
    c = sub.add_parser("compare")
    c.add_argument("out")
    c.add_argument("--ours-db", required=True)
    c.add_argument("--unit3d-db", required=True)
    c.add_argument("--title", default="")
    args = ap.parse_args()
    {"plan": plan, "drive": drive, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
