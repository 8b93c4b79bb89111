#!/usr/bin/env python3
"""Writes the corpus seeds in fuzz/corpus/<target>/: a few small valid inputs per
target (real BEP 15 packets, real HTTP requests, a real TLS ClientHello). Run it
from anywhere; it overwrites the seeds it makes and leaves other files alone.
The TLS ClientHellos come from Python's ssl module and so differ on every run."""

import os
import ssl
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
PROTOCOL_ID = 0x41727101980
HASH_A = bytes(range(1, 21))
HASH_B = b"\xaa" * 20
PEER_ID = b"-lt20A0-abcdefghijkl"


def seed(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def udp_header(connection_id, action, txid):
    return struct.pack(">qii", connection_id, action, txid)


def udp_announce(options=b""):
    return (
        udp_header(0x1234_5678_9ABC_DEF0, 1, 7)
        + HASH_A
        + PEER_ID
        + struct.pack(">QqQiIIiH", 0, 1 << 30, 0, 2, 0, 0xDEADBEEF, -1, 6881)
        + options
    )


def url_data(data):
    return bytes([2, len(data)]) + data


def percent(data):
    return "".join(
        chr(b) if chr(b).isalnum() or chr(b) in "-._~" else "%%%02X" % b for b in data
    )


def client_hello(maximum):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.maximum_version = maximum
    ctx.set_alpn_protocols(["http/1.1"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        conn.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def internet_checksum(data):
    """RFC 1071: the complement of the ones'-complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(">%dH" % (len(data) // 2), data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ethernet_udp(payload, ipv6=False, vlan=None):
    """A UDP datagram from a client to the tracker (port 6969) in an Ethernet
    frame, as an AF_XDP socket receives it, with an 802.1Q tag if `vlan`."""
    macs = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1])
    tag = b"" if vlan is None else struct.pack(">HH", 0x8100, vlan)
    length = 8 + len(payload)
    if ipv6:
        source = bytes([0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [1])
        destination = bytes([0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [2])
        pseudo = source + destination + struct.pack(">IxxxB", length, 17)
        network = struct.pack(">IHBB", 6 << 28, length, 17, 64) + source + destination
        ethertype = 0x86DD
    else:
        source, destination = bytes([192, 0, 2, 1]), bytes([198, 51, 100, 2])
        pseudo = source + destination + struct.pack(">xBH", 17, length)
        header = struct.pack(">BBHHHBBH", 0x45, 0, 20 + length, 0, 0x4000, 64, 17, 0)
        header += source + destination
        network = header[:10] + struct.pack(">H", internet_checksum(header)) + header[12:]
        ethertype = 0x0800
    udp = struct.pack(">HHHH", 6881, 6969, length, 0) + payload
    checksum = internet_checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack(">H", checksum) + udp[8:]
    return macs + tag + struct.pack(">H", ethertype) + network + udp


def xdp_frame_seeds():
    """Frames for xdp_frame: BEP 15 requests over IPv4 and IPv6, with and
    without a VLAN tag, and one short enough to carry Ethernet padding."""
    connect = udp_header(PROTOCOL_ID, 0, 1)
    seed("xdp_frame", "ipv4-connect", ethernet_udp(connect))
    seed("xdp_frame", "ipv4-vlan-announce", ethernet_udp(udp_announce(), vlan=0x6064))
    seed("xdp_frame", "ipv6-connect", ethernet_udp(connect, ipv6=True))
    seed("xdp_frame", "ipv6-vlan-announce", ethernet_udp(udp_announce(), ipv6=True, vlan=0x6064))
    seed("xdp_frame", "ipv4-padded", ethernet_udp(b"\x01\x02") + bytes(16))


def main():
    # UDP requests: connect, announce (plain and with BEP 41 URLData), scrape.
    seed("udp_request", "connect", udp_header(PROTOCOL_ID, 0, 1))
    seed("udp_request", "announce", udp_announce())
    seed(
        "udp_request",
        "announce-url-data",
        udp_announce(url_data(b"/announce") + url_data(b"?passkey=abc") + b"\x01\x00"),
    )
    # An option of a type the tracker does not know (skipped by its length)
    # before the passkey's URLData.
    seed(
        "udp_request",
        "announce-unknown-option",
        udp_announce(url_data(b"/announce") + bytes([9, 3, 1, 2, 3]) + url_data(b"?passkey=abc") + b"\x00"),
    )
    seed("udp_request", "scrape", udp_header(0x1234_5678_9ABC_DEF0, 2, 9) + HASH_A + HASH_B)

    # UDP responses: connect, announce (IPv4 and IPv6 peers), scrape, error.
    seed("udp_response", "connect", struct.pack(">iiq", 0, 1, 0x1234_5678_9ABC_DEF0))
    announce = struct.pack(">iiIII", 1, 7, 1800, 3, 2)
    seed(
        "udp_response",
        "announce-v4",
        announce + bytes([192, 0, 2, 1]) + struct.pack(">H", 6881) + bytes([10, 0, 0, 2, 0x1A, 0xE2]),
    )
    seed(
        "udp_response",
        "announce-v6",
        announce + bytes([0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [1]) + struct.pack(">H", 6881),
    )
    seed("udp_response", "scrape", struct.pack(">ii6I", 2, 9, 1, 2, 3, 4, 5, 6))
    seed("udp_response", "error", struct.pack(">ii", 3, 9) + b"unknown event")

    # HTTP queries and requests.
    announce_query = (
        "info_hash=%s&peer_id=%s&port=6881&uploaded=0&downloaded=0&left=1073741824"
        "&compact=1&event=started&numwant=50&key=5a1f&ip=%%5B2001%%3Adb8%%3A%%3A1%%5D%%3A6881"
        % (percent(HASH_A), percent(PEER_ID))
    )
    scrape_query = "info_hash=%s&info_hash=%s" % (percent(HASH_A), percent(HASH_B))
    seed("http_query", "announce", announce_query.encode())
    seed(
        "http_query",
        "announce-minimal",
        ("info_hash=%s&peer_id=%s&port=1" % (percent(HASH_B), percent(PEER_ID))).encode(),
    )
    seed("http_query", "scrape", scrape_query.encode())

    def get(target, extra=""):
        return (
            "GET %s HTTP/1.1\r\nHost: tracker.example:6969\r\nUser-Agent: qBittorrent/4.6.0\r\n"
            "X-Forwarded-For: 203.0.113.9, 198.51.100.7\r\n%s\r\n" % (target, extra)
        ).encode()

    seed("http_request", "announce", get("/announce?" + announce_query))
    seed("http_request", "scrape", get("/scrape?" + scrape_query, "Connection: close\r\n"))
    seed(
        "http_request",
        "pipelined",
        get("/announce?" + announce_query) + get("/scrape?" + scrape_query) + b"GET /scr",
    )
    seed(
        "http_request",
        "http10-keep-alive",
        b"GET /announce/?info_hash=x HTTP/1.0\r\nConnection: keep-alive\r\n"
        b"X-Forwarded-For: ::1\r\n\r\n",
    )

    # Answers: the input is structured (arbitrary), so these are just a few
    # byte strings for it to grow from.
    seed("bencode_roundtrip", "zeros", bytes(64))
    seed("bencode_roundtrip", "counting", bytes(range(128)))
    seed("bencode_roundtrip", "ones", b"\x01" * 96)

    # TLS: ClientHellos of TLS 1.3 and 1.2 clients, and plain HTTP on the TLS port.
    seed("tls_front", "client-hello-tls13", client_hello(ssl.TLSVersion.TLSv1_3))
    seed("tls_front", "client-hello-tls12", client_hello(ssl.TLSVersion.TLSv1_2))
    seed("tls_front", "plain-http", get("/announce?" + announce_query))

    # Ethernet frames, as an AF_XDP socket receives them.
    xdp_frame_seeds()


if __name__ == "__main__":
    main()
