//! Ethernet frames that carry UDP, as an AF_XDP socket receives and sends
//! them: a request's headers parsed, and an answer's headers written in
//! place before its payload.
//!
//! Taken: Ethernet II with at most one 802.1Q tag, IPv4 without options or
//! fragments, IPv6 with UDP as its first next header. Anything else is an
//! error here: the XDP program is to pass such frames to the kernel's
//! stack, so seeing one means the program and this parser disagree. (The
//! program passes tagged frames too, for the kernel to judge by the VLANs
//! the host has; a tag is still parsed here, and kept in an answer.)
//!
//! Checksums are verified as the kernel's stack verifies them: the IPv4
//! header's always (`ip_rcv`), the UDP checksum unless an IPv4 datagram
//! carries none (0), and an IPv6 datagram without one is refused (RFC
//! 8200; `udp6` drops it). One form of a wrong UDP checksum is taken: the
//! pseudo-header's sum alone, which a sender on the same host leaves for
//! its device to finish (`CHECKSUM_PARTIAL`). Over a veth, or in generic
//! mode, frames from a local stack carry it; the kernel trusts them by the
//! mark on their buffer, which an XDP program cannot see.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

const ETHERNET_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
/// 802.1Q. 802.1ad (QinQ, 0x88A8) outer tags are not taken.
const ETHERTYPE_VLAN: u16 = 0x8100;

const IPPROTO_UDP: u8 = 17;
/// IPv6 next headers that are extension headers (RFC 8200 and the IANA
/// list), other than the fragment header, which is told apart.
const IPV6_EXTENSION_HEADERS: [u8; 10] = [0, 43, 50, 51, 60, 135, 139, 140, 253, 254];
const IPV6_FRAGMENT_HEADER: u8 = 44;

/// An IPv4 header without options: version 4, IHL 5.
const IPV4_VERSION_IHL: u8 = 0x45;
/// The IPv4 flags-and-offset bits that make a fragment: MF and the offset.
/// DF and the reserved bit say nothing about fragmenting.
const IPV4_FRAGMENT_BITS: u16 = 0x3FFF;
const IPV4_DONT_FRAGMENT: u16 = 0x4000;
/// Answers' TTL and hop limit (Linux's default).
const HOP_LIMIT: u8 = 64;

/// What an answer needs of the frame that asked: its link and network headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeaders {
    /// The sender's and our MAC addresses, as the request carried them.
    pub client_mac: [u8; 6],
    pub local_mac: [u8; 6],
    /// The 802.1Q tag's TCI (priority, DEI, VLAN id), when the frame had one.
    pub vlan: Option<u16>,
    /// The client's address and port (the request's source).
    pub client: SocketAddr,
    /// Ours (the request's destination).
    pub local: SocketAddr,
}

impl FrameHeaders {
    /// The headers of an answer to these, as its receiver parses them:
    /// each pair swapped, the VLAN tag kept.
    pub fn reversed(&self) -> FrameHeaders {
        FrameHeaders {
            client_mac: self.local_mac,
            local_mac: self.client_mac,
            vlan: self.vlan,
            client: self.local,
            local: self.client,
        }
    }
}

/// A UDP datagram received in an Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub headers: FrameHeaders,
    /// The UDP payload, without any Ethernet padding after it.
    pub payload: &'a [u8],
}

/// Why a frame is not a UDP datagram this parser takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The frame ends inside its Ethernet, IP or UDP header.
    Short,
    /// The ethertype is neither IPv4 nor IPv6, after at most one 802.1Q tag
    /// (a QinQ 0x88A8 tag, or a second 802.1Q one, lands here).
    NotIp,
    /// The IP version differs from the one the ethertype names.
    BadVersion,
    /// An IPv4 header other than 20 bytes: options, or an IHL under 5.
    IpOptions,
    /// An IPv4 fragment (MF set or an offset), or an IPv6 fragment header.
    Fragment,
    /// IPv6 extension headers before UDP.
    ExtensionHeader,
    /// Another transport protocol than UDP.
    NotUdp,
    /// The IP length (IPv4 total length, IPv6 payload length) is too small
    /// to hold a UDP header, or more than the frame holds.
    BadIpLength,
    /// The IPv4 header checksum does not verify.
    BadChecksum,
    /// The UDP length differs from the IP payload's length.
    BadUdpLength,
    /// UDP port 0 as source or destination: nothing sends from it or
    /// listens on it, and an answer could not be addressed.
    ZeroPort,
    /// The UDP checksum does not verify.
    BadUdpChecksum,
    /// An IPv6 datagram whose UDP checksum is 0: none, which IPv6 forbids.
    NoUdpChecksum,
}

impl FrameError {
    /// Every error, to register their metrics ahead.
    pub const ALL: [FrameError; 13] = [
        FrameError::Short,
        FrameError::NotIp,
        FrameError::BadVersion,
        FrameError::IpOptions,
        FrameError::Fragment,
        FrameError::ExtensionHeader,
        FrameError::NotUdp,
        FrameError::BadIpLength,
        FrameError::BadChecksum,
        FrameError::BadUdpLength,
        FrameError::ZeroPort,
        FrameError::BadUdpChecksum,
        FrameError::NoUdpChecksum,
    ];

    /// A name for metric labels and logs.
    pub fn name(self) -> &'static str {
        match self {
            FrameError::Short => "short",
            FrameError::NotIp => "not_ip",
            FrameError::BadVersion => "bad_version",
            FrameError::IpOptions => "ip_options",
            FrameError::Fragment => "fragment",
            FrameError::ExtensionHeader => "extension_header",
            FrameError::NotUdp => "not_udp",
            FrameError::BadIpLength => "bad_ip_length",
            FrameError::BadChecksum => "bad_checksum",
            FrameError::BadUdpLength => "bad_udp_length",
            FrameError::ZeroPort => "zero_port",
            FrameError::BadUdpChecksum => "bad_udp_checksum",
            FrameError::NoUdpChecksum => "no_udp_checksum",
        }
    }
}

/// Parses a received Ethernet frame into the UDP datagram it carries. Bytes
/// after the IP packet (Ethernet padding) are ignored. Both checksums are
/// verified (see the module's doc).
pub fn parse(frame: &[u8]) -> Result<Datagram<'_>, FrameError> {
    let (local_mac, rest) = frame.split_first_chunk::<6>().ok_or(FrameError::Short)?;
    let (client_mac, rest) = rest.split_first_chunk::<6>().ok_or(FrameError::Short)?;
    let (ethertype, rest) = rest.split_first_chunk::<2>().ok_or(FrameError::Short)?;
    let (vlan, ethertype, packet) = match u16::from_be_bytes(*ethertype) {
        ETHERTYPE_VLAN => {
            let (tci, rest) = rest.split_first_chunk::<2>().ok_or(FrameError::Short)?;
            let (inner, rest) = rest.split_first_chunk::<2>().ok_or(FrameError::Short)?;
            (
                Some(u16::from_be_bytes(*tci)),
                u16::from_be_bytes(*inner),
                rest,
            )
        }
        ethertype => (None, ethertype, rest),
    };
    let (client, local, payload) = match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(packet)?,
        ETHERTYPE_IPV6 => parse_ipv6(packet)?,
        _ => return Err(FrameError::NotIp),
    };
    Ok(Datagram {
        headers: FrameHeaders {
            client_mac: *client_mac,
            local_mac: *local_mac,
            vlan,
            client,
            local,
        },
        payload,
    })
}

/// The source, the destination and the UDP payload of an IPv4 packet
/// (padding may follow it).
fn parse_ipv4(packet: &[u8]) -> Result<(SocketAddr, SocketAddr, &[u8]), FrameError> {
    let (header, rest) = packet
        .split_first_chunk::<IPV4_HEADER_LEN>()
        .ok_or(FrameError::Short)?;
    let (udp, _) = rest
        .split_first_chunk::<UDP_HEADER_LEN>()
        .ok_or(FrameError::Short)?;
    if header[0] >> 4 != 4 {
        return Err(FrameError::BadVersion);
    }
    if header[0] != IPV4_VERSION_IHL {
        return Err(FrameError::IpOptions);
    }
    if u16::from_be_bytes([header[6], header[7]]) & IPV4_FRAGMENT_BITS != 0 {
        return Err(FrameError::Fragment);
    }
    if header[9] != IPPROTO_UDP {
        return Err(FrameError::NotUdp);
    }
    let total_length = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let payload = packet
        .get(..total_length)
        .and_then(|packet| packet.get(IPV4_HEADER_LEN + UDP_HEADER_LEN..))
        .ok_or(FrameError::BadIpLength)?;
    // Last of the header's checks: it reads every byte.
    if fold(sum_words(header)) != 0xFFFF {
        return Err(FrameError::BadChecksum);
    }
    let (source_port, destination_port) = parse_udp(udp, payload.len())?;
    // 0: the sender computed no checksum, which IPv4 allows.
    if udp[6..8] != [0, 0] {
        verify_udp_checksum(udp, payload, sum_words(&header[12..20]))?;
    }
    let source = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
    let destination = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
    Ok((
        SocketAddr::V4(SocketAddrV4::new(source, source_port)),
        SocketAddr::V4(SocketAddrV4::new(destination, destination_port)),
        payload,
    ))
}

/// The source, the destination and the UDP payload of an IPv6 packet
/// (padding may follow it). IPv4-mapped addresses stay IPv6: that is what
/// the packet was.
fn parse_ipv6(packet: &[u8]) -> Result<(SocketAddr, SocketAddr, &[u8]), FrameError> {
    let (fixed, rest) = packet.split_first_chunk::<8>().ok_or(FrameError::Short)?;
    let (source, rest) = rest.split_first_chunk::<16>().ok_or(FrameError::Short)?;
    let (destination, rest) = rest.split_first_chunk::<16>().ok_or(FrameError::Short)?;
    let (udp, _) = rest
        .split_first_chunk::<UDP_HEADER_LEN>()
        .ok_or(FrameError::Short)?;
    if fixed[0] >> 4 != 6 {
        return Err(FrameError::BadVersion);
    }
    match fixed[6] {
        IPPROTO_UDP => {}
        IPV6_FRAGMENT_HEADER => return Err(FrameError::Fragment),
        next if IPV6_EXTENSION_HEADERS.contains(&next) => return Err(FrameError::ExtensionHeader),
        _ => return Err(FrameError::NotUdp),
    }
    let payload_length = usize::from(u16::from_be_bytes([fixed[4], fixed[5]]));
    let payload = packet
        .get(IPV6_HEADER_LEN..)
        .and_then(|datagram| datagram.get(..payload_length))
        .and_then(|datagram| datagram.get(UDP_HEADER_LEN..))
        .ok_or(FrameError::BadIpLength)?;
    let (source_port, destination_port) = parse_udp(udp, payload.len())?;
    if udp[6..8] == [0, 0] {
        return Err(FrameError::NoUdpChecksum);
    }
    verify_udp_checksum(udp, payload, sum_words(source) + sum_words(destination))?;
    Ok((
        SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(*source),
            source_port,
            0,
            0,
        )),
        SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(*destination),
            destination_port,
            0,
            0,
        )),
        payload,
    ))
}

/// The source and destination ports of a UDP header whose length must
/// match the IP layer's. The checksum is left to `verify_udp_checksum`.
fn parse_udp(udp: &[u8; UDP_HEADER_LEN], payload_len: usize) -> Result<(u16, u16), FrameError> {
    let length = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if length != UDP_HEADER_LEN + payload_len {
        return Err(FrameError::BadUdpLength);
    }
    let source_port = u16::from_be_bytes([udp[0], udp[1]]);
    let destination_port = u16::from_be_bytes([udp[2], udp[3]]);
    if source_port == 0 || destination_port == 0 {
        return Err(FrameError::ZeroPort);
    }
    Ok((source_port, destination_port))
}

/// Checks a datagram's UDP checksum (not 0: the callers handle "none"),
/// the pseudo-header's two addresses summing to `address_sum`: the
/// pseudo-header, the header and the payload must sum to 0xFFFF, or the
/// checksum field must hold the pseudo-header's sum alone (the partial
/// checksum of a local sender, see the module's doc).
fn verify_udp_checksum(
    udp: &[u8; UDP_HEADER_LEN],
    payload: &[u8],
    address_sum: u64,
) -> Result<(), FrameError> {
    // The UDP length field, which parse_udp checked against the IP layer.
    let length = u64::from(u16::from_be_bytes([udp[4], udp[5]]));
    let pseudo_header_sum = address_sum + u64::from(IPPROTO_UDP) + length;
    if fold(pseudo_header_sum + sum_words(udp) + sum_words(payload)) == 0xFFFF {
        return Ok(());
    }
    if u16::from_be_bytes([udp[6], udp[7]]) == fold(pseudo_header_sum) {
        return Ok(());
    }
    Err(FrameError::BadUdpChecksum)
}

/// Bytes of link, network and UDP header an answer to `asked` starts with.
/// (The network header's size follows `asked.local`; `write_answer` refuses
/// headers whose two addresses are of different families.)
pub fn answer_header_len(asked: &FrameHeaders) -> usize {
    let network = match asked.local {
        SocketAddr::V4(_) => IPV4_HEADER_LEN,
        SocketAddr::V6(_) => IPV6_HEADER_LEN,
    };
    link_header_len(asked.vlan) + network + UDP_HEADER_LEN
}

fn link_header_len(vlan: Option<u16>) -> usize {
    match vlan {
        Some(_) => ETHERNET_HEADER_LEN + VLAN_TAG_LEN,
        None => ETHERNET_HEADER_LEN,
    }
}

/// Makes `frame[..header_len + payload_len]` an answer to `asked`: the
/// caller has already put the UDP payload at
/// `frame[answer_header_len(asked)..][..payload_len]`; this writes the
/// headers before it (MACs swapped, the VLAN tag kept, addresses and ports
/// swapped), the IPv4 header checksum, and the UDP checksum (computed over
/// the pseudo-header, always, IPv4 too; a computed 0 is sent as 0xFFFF, as
/// RFC 768 says). Returns the frame's length, or None when it does not fit
/// `frame`, the payload is longer than a UDP datagram can be, or `asked`
/// mixes IPv4 and IPv6; on None nothing is written.
pub fn write_answer(frame: &mut [u8], asked: &FrameHeaders, payload_len: usize) -> Option<usize> {
    let udp_length = u16::try_from(payload_len.checked_add(UDP_HEADER_LEN)?).ok()?;
    let frame_len = answer_header_len(asked).checked_add(payload_len)?;
    let frame = frame.get_mut(..frame_len)?;
    let (link, packet) = frame.split_at_mut_checked(link_header_len(asked.vlan))?;
    // Everything that can refuse is checked above or in the match before its
    // arm writes; the writes themselves cannot fail in a frame this long.
    let ethertype = match (asked.local, asked.client) {
        (SocketAddr::V4(local), SocketAddr::V4(client)) => {
            let total_length = u16::try_from(IPV4_HEADER_LEN + usize::from(udp_length)).ok()?;
            let datagram = put(packet, ipv4_header(total_length, local.ip(), client.ip()))?;
            let address_sum = sum_words(&local.ip().octets()) + sum_words(&client.ip().octets());
            write_udp(
                datagram,
                local.port(),
                client.port(),
                udp_length,
                address_sum,
            )?;
            ETHERTYPE_IPV4
        }
        (SocketAddr::V6(local), SocketAddr::V6(client)) => {
            let datagram = put(packet, ipv6_header(udp_length, local.ip(), client.ip()))?;
            let address_sum = sum_words(&local.ip().octets()) + sum_words(&client.ip().octets());
            write_udp(
                datagram,
                local.port(),
                client.port(),
                udp_length,
                address_sum,
            )?;
            ETHERTYPE_IPV6
        }
        _ => return None,
    };
    let rest = put(link, asked.client_mac)?;
    let rest = put(rest, asked.local_mac)?;
    let rest = match asked.vlan {
        Some(tci) => {
            let rest = put(rest, ETHERTYPE_VLAN.to_be_bytes())?;
            put(rest, tci.to_be_bytes())?
        }
        None => rest,
    };
    put(rest, ethertype.to_be_bytes())?;
    Some(frame_len)
}

/// Writes `bytes` at the start of `out`; returns what follows them.
fn put<const N: usize>(out: &mut [u8], bytes: [u8; N]) -> Option<&mut [u8]> {
    let (start, rest) = out.split_first_chunk_mut::<N>()?;
    *start = bytes;
    Some(rest)
}

/// An answer's IPv4 header, its checksum included.
fn ipv4_header(total_length: u16, source: &Ipv4Addr, destination: &Ipv4Addr) -> [u8; 20] {
    let mut header = [0; IPV4_HEADER_LEN];
    header[0] = IPV4_VERSION_IHL;
    header[2..4].copy_from_slice(&total_length.to_be_bytes());
    // Identification 0: with DF set it identifies no fragments (RFC 6864).
    header[6..8].copy_from_slice(&IPV4_DONT_FRAGMENT.to_be_bytes());
    header[8] = HOP_LIMIT;
    header[9] = IPPROTO_UDP;
    header[12..16].copy_from_slice(&source.octets());
    header[16..20].copy_from_slice(&destination.octets());
    let checksum = !fold(sum_words(&header));
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    header
}

/// An answer's IPv6 header: traffic class and flow label 0.
fn ipv6_header(payload_length: u16, source: &Ipv6Addr, destination: &Ipv6Addr) -> [u8; 40] {
    let mut header = [0; IPV6_HEADER_LEN];
    header[0] = 6 << 4;
    header[4..6].copy_from_slice(&payload_length.to_be_bytes());
    header[6] = IPPROTO_UDP;
    header[7] = HOP_LIMIT;
    header[8..24].copy_from_slice(&source.octets());
    header[24..40].copy_from_slice(&destination.octets());
    header
}

/// Writes the UDP header at the start of `datagram` (header and payload,
/// `length` bytes), with the checksum over the pseudo-header (whose two
/// addresses sum to `address_sum`), the header and the payload.
fn write_udp(
    datagram: &mut [u8],
    source_port: u16,
    destination_port: u16,
    length: u16,
    address_sum: u64,
) -> Option<()> {
    let (header, payload) = datagram.split_first_chunk_mut::<UDP_HEADER_LEN>()?;
    // The IPv4 and IPv6 pseudo-headers sum alike: the addresses, the
    // protocol and the UDP length, the rest zeros.
    let pseudo_header_sum = address_sum + u64::from(IPPROTO_UDP) + u64::from(length);
    let unsummed = udp_header(source_port, destination_port, length, 0);
    let sum = pseudo_header_sum + sum_words(&unsummed) + sum_words(payload);
    // 0 means "no checksum" in UDP; 0xFFFF is the same sum in ones' complement.
    let checksum = match !fold(sum) {
        0 => 0xFFFF,
        checksum => checksum,
    };
    *header = udp_header(source_port, destination_port, length, checksum);
    Some(())
}

fn udp_header(source_port: u16, destination_port: u16, length: u16, checksum: u16) -> [u8; 8] {
    let [source_high, source_low] = source_port.to_be_bytes();
    let [destination_high, destination_low] = destination_port.to_be_bytes();
    let [length_high, length_low] = length.to_be_bytes();
    let [checksum_high, checksum_low] = checksum.to_be_bytes();
    [
        source_high,
        source_low,
        destination_high,
        destination_low,
        length_high,
        length_low,
        checksum_high,
        checksum_low,
    ]
}

/// The Internet checksum's sum (RFC 1071) of `bytes` as big-endian 16-bit
/// words, an odd last byte padded with a zero, not yet folded. Summed as
/// 32-bit words into a u64: the carries out of each 16-bit half are the
/// end-around carries that `fold` adds back, since 2^16 = 1 modulo 2^16 - 1.
/// Sums of consecutive slices may be added as long as each but the last has
/// an even length. (No overflow below 16 GiB of input.)
fn sum_words(bytes: &[u8]) -> u64 {
    let (words, tail) = bytes.as_chunks::<4>();
    let mut sum: u64 = words
        .iter()
        .map(|word| u64::from(u32::from_be_bytes(*word)))
        .sum();
    let mut last = [0; 4];
    for (to, from) in last.iter_mut().zip(tail) {
        *to = *from;
    }
    sum += u64::from(u32::from_be_bytes(last));
    sum
}

/// Folds a `sum_words` sum into 16 bits, adding the carries back in: the
/// ones'-complement sum. Nonzero unless every word summed was zero.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    // The loop left 16 bits.
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const LOCAL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    /// Priority 3, VLAN 100.
    const TCI: u16 = 0x6064;

    /// 10.0.0.1:1234 to 10.0.0.2:6969, payload 01 02 03, written out by
    /// hand. IPv4 header sum (checksum field 0): 4500, 001F, 4000, 4011,
    /// 0A00, 0001, 0A00, 0002 sum to D933, so the checksum is !D933 = 26CC.
    /// UDP: the pseudo-header (0A00 0001 0A00 0002 0011 000B), the header
    /// (04D2 1B39 000B 0000) and the payload (0102 0300) sum to 3837, so the
    /// checksum is !3837 = C7C8.
    #[rustfmt::skip]
    const REQUEST_V4: [u8; 45] = [
        0x02, 0, 0, 0, 0, 0x02, // destination: ours
        0x02, 0, 0, 0, 0, 0x01, // source: the client's
        0x08, 0x00,
        0x45, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0xCC,
        10, 0, 0, 1,
        10, 0, 0, 2,
        0x04, 0xD2, 0x1B, 0x39, 0x00, 0x0B, 0xC7, 0xC8,
        1, 2, 3,
    ];
    /// The answer to `REQUEST_V4` with the same payload: both checksums are
    /// the same, since swapping addresses and ports does not change a sum.
    #[rustfmt::skip]
    const ANSWER_V4: [u8; 45] = [
        0x02, 0, 0, 0, 0, 0x01,
        0x02, 0, 0, 0, 0, 0x02,
        0x08, 0x00,
        0x45, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0xCC,
        10, 0, 0, 2,
        10, 0, 0, 1,
        0x1B, 0x39, 0x04, 0xD2, 0x00, 0x0B, 0xC7, 0xC8,
        1, 2, 3,
    ];
    /// [2001:db8::1]:1234 to [2001:db8::2]:6969, payload 01 02 03. UDP: the
    /// addresses (2DBA, 2DBB), the length (000B), the next header (0011),
    /// the header (04D2, 1B39, 000B) and the payload (0102, 0300) sum to
    /// 7FA9; the checksum is !7FA9 = 8056.
    #[rustfmt::skip]
    const REQUEST_V6: [u8; 65] = [
        0x02, 0, 0, 0, 0, 0x02,
        0x02, 0, 0, 0, 0, 0x01,
        0x86, 0xDD,
        0x60, 0, 0, 0, 0x00, 0x0B, 0x11, 0x40,
        0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        0x04, 0xD2, 0x1B, 0x39, 0x00, 0x0B, 0x80, 0x56,
        1, 2, 3,
    ];
    #[rustfmt::skip]
    const ANSWER_V6: [u8; 65] = [
        0x02, 0, 0, 0, 0, 0x01,
        0x02, 0, 0, 0, 0, 0x02,
        0x86, 0xDD,
        0x60, 0, 0, 0, 0x00, 0x0B, 0x11, 0x40,
        0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        0x1B, 0x39, 0x04, 0xD2, 0x00, 0x0B, 0x80, 0x56,
        1, 2, 3,
    ];

    /// `frame` with an 802.1Q tag carrying `tci` after the MAC addresses.
    fn tagged(frame: &[u8], tci: u16) -> Vec<u8> {
        let mut tagged = frame[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00]);
        tagged.extend_from_slice(&tci.to_be_bytes());
        tagged.extend_from_slice(&frame[12..]);
        tagged
    }

    fn headers_v4(vlan: Option<u16>) -> FrameHeaders {
        FrameHeaders {
            client_mac: CLIENT_MAC,
            local_mac: LOCAL_MAC,
            vlan,
            client: "10.0.0.1:1234".parse().unwrap(),
            local: "10.0.0.2:6969".parse().unwrap(),
        }
    }

    fn headers_v6(vlan: Option<u16>) -> FrameHeaders {
        FrameHeaders {
            client: "[2001:db8::1]:1234".parse().unwrap(),
            local: "[2001:db8::2]:6969".parse().unwrap(),
            ..headers_v4(vlan)
        }
    }

    /// The four hand-built requests: (frame, its headers).
    fn requests() -> Vec<(Vec<u8>, FrameHeaders)> {
        vec![
            (REQUEST_V4.to_vec(), headers_v4(None)),
            (tagged(&REQUEST_V4, TCI), headers_v4(Some(TCI))),
            (REQUEST_V6.to_vec(), headers_v6(None)),
            (tagged(&REQUEST_V6, TCI), headers_v6(Some(TCI))),
        ]
    }

    /// Where the IP header starts, and whether it is IPv4, read from the
    /// ethertype bytes.
    fn network_offset(frame: &[u8]) -> (usize, bool) {
        let offset = if frame[12..14] == [0x81, 0x00] {
            18
        } else {
            14
        };
        (offset, frame[offset - 2..offset] == [0x08, 0x00])
    }

    /// The slow reference: the ones'-complement sum of the bytes as 16-bit
    /// big-endian words, one word at a time with its end-around carry.
    fn reference_sum(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        let mut i = 0;
        while i < bytes.len() {
            let high = u32::from(bytes[i]);
            let low = u32::from(bytes.get(i + 1).copied().unwrap_or(0));
            sum += high << 8 | low;
            if sum > 0xFFFF {
                sum = (sum & 0xFFFF) + 1;
            }
            i += 2;
        }
        sum as u16
    }

    /// The pseudo-header, UDP header and payload of a frame's datagram, by
    /// the reference, and the IPv4 header's sum (IPv6: 0xFFFF).
    fn reference_sums(frame: &[u8]) -> (u16, u16) {
        let (at, v4) = network_offset(frame);
        let mut pseudo = Vec::new();
        if v4 {
            let total = usize::from(u16::from_be_bytes([frame[at + 2], frame[at + 3]]));
            let datagram = &frame[at + 20..at + total];
            pseudo.extend_from_slice(&frame[at + 12..at + 20]);
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
            pseudo.extend_from_slice(datagram);
            (reference_sum(&frame[at..at + 20]), reference_sum(&pseudo))
        } else {
            let length = usize::from(u16::from_be_bytes([frame[at + 4], frame[at + 5]]));
            let datagram = &frame[at + 40..at + 40 + length];
            pseudo.extend_from_slice(&frame[at + 8..at + 40]);
            pseudo.extend_from_slice(&(datagram.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 17]);
            pseudo.extend_from_slice(datagram);
            (0xFFFF, reference_sum(&pseudo))
        }
    }

    /// Writes an answer to `asked` carrying `payload` into a fresh buffer.
    fn answer(asked: &FrameHeaders, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0xAA; 2048];
        let start = answer_header_len(asked);
        frame[start..start + payload.len()].copy_from_slice(payload);
        let len = write_answer(&mut frame, asked, payload.len()).unwrap();
        frame.truncate(len);
        frame
    }

    /// Recomputes the IPv4 header checksum of a frame after an edit.
    fn fix_ipv4_checksum(frame: &mut [u8]) {
        let (at, v4) = network_offset(frame);
        assert!(v4);
        let ihl = usize::from(frame[at] & 0x0F) * 4;
        frame[at + 10..at + 12].copy_from_slice(&[0, 0]);
        let checksum = !reference_sum(&frame[at..at + ihl]);
        frame[at + 10..at + 12].copy_from_slice(&checksum.to_be_bytes());
    }

    /// Sets the 16-bit field at `at` past the IP header's start.
    fn set_ip_u16(frame: &mut [u8], at: usize, value: u16) {
        let (start, _) = network_offset(frame);
        frame[start + at..start + at + 2].copy_from_slice(&value.to_be_bytes());
    }

    fn set_ip_u8(frame: &mut [u8], at: usize, value: u8) {
        let (start, _) = network_offset(frame);
        frame[start + at] = value;
    }

    fn v4_requests() -> Vec<Vec<u8>> {
        vec![REQUEST_V4.to_vec(), tagged(&REQUEST_V4, TCI)]
    }

    fn v6_requests() -> Vec<Vec<u8>> {
        vec![REQUEST_V6.to_vec(), tagged(&REQUEST_V6, TCI)]
    }

    #[test]
    fn hand_built_frames_parse() {
        for (frame, headers) in requests() {
            let datagram = parse(&frame).unwrap();
            assert_eq!(datagram.headers, headers);
            assert_eq!(datagram.payload, [1, 2, 3]);
        }
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        for (mut frame, headers) in requests() {
            frame.resize(frame.len().max(60) + 7, 0);
            let datagram = parse(&frame).unwrap();
            assert_eq!(datagram.headers, headers);
            assert_eq!(datagram.payload, [1, 2, 3]);
        }
    }

    #[test]
    fn ipv4_mapped_addresses_stay_ipv6() {
        let mut frame = REQUEST_V6.to_vec();
        frame[22..38].copy_from_slice(&"::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap().octets());
        fix_udp_checksum(&mut frame);
        let client = parse(&frame).unwrap().headers.client;
        assert_eq!(client, "[::ffff:192.0.2.1]:1234".parse().unwrap());
        assert!(client.is_ipv6());
    }

    /// Where a frame's UDP checksum field is.
    fn udp_checksum_at(frame: &[u8]) -> usize {
        let (at, v4) = network_offset(frame);
        at + if v4 { 20 } else { 40 } + 6
    }

    /// Recomputes the UDP checksum of a frame after an edit.
    fn fix_udp_checksum(frame: &mut [u8]) {
        let at = udp_checksum_at(frame);
        frame[at..at + 2].copy_from_slice(&[0, 0]);
        let checksum = match !reference_sums(frame).1 {
            0 => 0xFFFF,
            checksum => checksum,
        };
        frame[at..at + 2].copy_from_slice(&checksum.to_be_bytes());
    }

    #[test]
    fn a_wrong_udp_checksum_is_refused() {
        for (frame, _) in requests() {
            let at = udp_checksum_at(&frame);
            for (byte, flip) in [(at, 0x5A), (at + 1, 0x01), (frame.len() - 1, 0x80)] {
                let mut wrong = frame.clone();
                wrong[byte] ^= flip;
                assert_eq!(parse(&wrong), Err(FrameError::BadUdpChecksum), "{byte}");
            }
            // A bit changed in an address the pseudo-header covers (the
            // IPv4 header's own checksum made right again).
            let mut wrong = frame.clone();
            wrong[at - 10] ^= 0x04;
            if network_offset(&wrong).1 {
                fix_ipv4_checksum(&mut wrong);
            }
            assert_eq!(parse(&wrong), Err(FrameError::BadUdpChecksum));
        }
    }

    #[test]
    fn ipv4_may_carry_no_udp_checksum_but_ipv6_must() {
        for (mut frame, headers) in requests() {
            let at = udp_checksum_at(&frame);
            frame[at..at + 2].copy_from_slice(&[0, 0]);
            if headers.client.is_ipv4() {
                assert_eq!(parse(&frame).unwrap().payload, [1, 2, 3]);
            } else {
                assert_eq!(parse(&frame), Err(FrameError::NoUdpChecksum));
            }
        }
    }

    #[test]
    fn a_local_senders_partial_checksum_is_taken() {
        // The pseudo-header sums of REQUEST_V4 (0A00 0001 0A00 0002 0011
        // 000B: 141F) and of REQUEST_V6 (2DBA, 2DBB, 000B, 0011: 5B91), as
        // the kernel writes them for its device to finish.
        for (mut frame, headers) in requests() {
            let at = udp_checksum_at(&frame);
            let partial: u16 = if headers.client.is_ipv4() {
                0x141F
            } else {
                0x5B91
            };
            frame[at..at + 2].copy_from_slice(&partial.to_be_bytes());
            assert_eq!(parse(&frame).unwrap().headers, headers);
            // One off is wrong.
            frame[at..at + 2].copy_from_slice(&(partial + 1).to_be_bytes());
            assert_eq!(parse(&frame), Err(FrameError::BadUdpChecksum));
        }
    }

    #[test]
    fn frames_cut_within_the_headers_are_short() {
        for (frame, _) in requests() {
            let headers_len = frame.len() - 3;
            for len in 0..headers_len {
                assert_eq!(parse(&frame[..len]), Err(FrameError::Short), "{len}");
            }
            // Cut in the payload: the IP length is more than the frame holds.
            for len in headers_len..frame.len() {
                assert_eq!(parse(&frame[..len]), Err(FrameError::BadIpLength), "{len}");
            }
        }
    }

    #[test]
    fn other_ethertypes_are_not_ip() {
        for (frame, _) in requests() {
            let mut arp = frame.clone();
            arp[12..14].copy_from_slice(&[0x08, 0x06]);
            assert_eq!(parse(&arp), Err(FrameError::NotIp));
        }
        for request in [&REQUEST_V4[..], &REQUEST_V6[..]] {
            // QinQ: an 802.1ad tag outside an 802.1Q one.
            let mut qinq = tagged(&tagged(request, TCI), 0x0005);
            qinq[12..14].copy_from_slice(&[0x88, 0xA8]);
            assert_eq!(parse(&qinq), Err(FrameError::NotIp));
            // A lone 802.1ad tag.
            let mut outer = tagged(request, TCI);
            outer[12..14].copy_from_slice(&[0x88, 0xA8]);
            assert_eq!(parse(&outer), Err(FrameError::NotIp));
            // Two 802.1Q tags.
            assert_eq!(
                parse(&tagged(&tagged(request, TCI), 7)),
                Err(FrameError::NotIp)
            );
        }
    }

    #[test]
    fn the_version_must_match_the_ethertype() {
        for mut frame in v4_requests() {
            set_ip_u8(&mut frame, 0, 0x65);
            fix_ipv4_checksum(&mut frame);
            assert_eq!(parse(&frame), Err(FrameError::BadVersion));
        }
        for mut frame in v6_requests() {
            set_ip_u8(&mut frame, 0, 0x45);
            assert_eq!(parse(&frame), Err(FrameError::BadVersion));
        }
    }

    #[test]
    fn ipv4_options_are_refused() {
        for request in v4_requests() {
            // IHL 6, a word of options (NOP, NOP, NOP, end), total length 35.
            let (at, _) = network_offset(&request);
            let mut frame = request[..at + 20].to_vec();
            frame.extend_from_slice(&[1, 1, 1, 0]);
            frame.extend_from_slice(&request[at + 20..]);
            set_ip_u8(&mut frame, 0, 0x46);
            set_ip_u16(&mut frame, 2, 35);
            fix_ipv4_checksum(&mut frame);
            assert_eq!(parse(&frame), Err(FrameError::IpOptions));
            // An IHL under 5.
            let mut frame = request.clone();
            set_ip_u8(&mut frame, 0, 0x44);
            fix_ipv4_checksum(&mut frame);
            assert_eq!(parse(&frame), Err(FrameError::IpOptions));
        }
    }

    #[test]
    fn fragments_are_refused() {
        for request in v4_requests() {
            for flags_offset in [0x2000, 0x6000, 0x0001, 0x4001, 0x1FFF, 0x3FFF] {
                let mut frame = request.clone();
                set_ip_u16(&mut frame, 6, flags_offset);
                fix_ipv4_checksum(&mut frame);
                assert_eq!(
                    parse(&frame),
                    Err(FrameError::Fragment),
                    "{flags_offset:#x}"
                );
            }
            // DF alone (as the request has it), none, and the reserved bit.
            for flags_offset in [0x4000, 0x0000, 0x8000] {
                let mut frame = request.clone();
                set_ip_u16(&mut frame, 6, flags_offset);
                fix_ipv4_checksum(&mut frame);
                assert!(parse(&frame).is_ok(), "{flags_offset:#x}");
            }
        }
        for mut frame in v6_requests() {
            set_ip_u8(&mut frame, 6, 44);
            assert_eq!(parse(&frame), Err(FrameError::Fragment));
        }
    }

    #[test]
    fn ipv6_extension_headers_are_refused() {
        for request in v6_requests() {
            for next_header in [0, 43, 50, 51, 60, 135, 139, 140, 253, 254] {
                let mut frame = request.clone();
                set_ip_u8(&mut frame, 6, next_header);
                assert_eq!(
                    parse(&frame),
                    Err(FrameError::ExtensionHeader),
                    "{next_header}"
                );
            }
        }
    }

    #[test]
    fn other_protocols_are_not_udp() {
        for protocol in [1, 6, 58, 59, 132, 255] {
            for mut frame in v4_requests() {
                set_ip_u8(&mut frame, 9, protocol);
                fix_ipv4_checksum(&mut frame);
                assert_eq!(parse(&frame), Err(FrameError::NotUdp), "{protocol}");
            }
            for mut frame in v6_requests() {
                set_ip_u8(&mut frame, 6, protocol);
                assert_eq!(parse(&frame), Err(FrameError::NotUdp), "{protocol}");
            }
        }
    }

    #[test]
    fn a_bad_ipv4_header_checksum_is_refused() {
        for request in v4_requests() {
            let (at, _) = network_offset(&request);
            let mut frame = request.clone();
            frame[at + 11] ^= 1;
            assert_eq!(parse(&frame), Err(FrameError::BadChecksum));
            // A changed TTL without a new checksum.
            let mut frame = request.clone();
            frame[at + 8] = 63;
            assert_eq!(parse(&frame), Err(FrameError::BadChecksum));
            // A changed address.
            let mut frame = request.clone();
            frame[at + 15] = 9;
            assert_eq!(parse(&frame), Err(FrameError::BadChecksum));
        }
    }

    #[test]
    fn bad_ip_lengths_are_refused() {
        for request in v4_requests() {
            // Too small for a UDP header, and more than the frame holds.
            for total_length in [0, 19, 20, 27, 32, 46, 0xFFFF] {
                let mut frame = request.clone();
                set_ip_u16(&mut frame, 2, total_length);
                fix_ipv4_checksum(&mut frame);
                assert_eq!(
                    parse(&frame),
                    Err(FrameError::BadIpLength),
                    "{total_length}"
                );
            }
        }
        for request in v6_requests() {
            for payload_length in [0, 7, 12, 0xFFFF] {
                let mut frame = request.clone();
                set_ip_u16(&mut frame, 4, payload_length);
                assert_eq!(
                    parse(&frame),
                    Err(FrameError::BadIpLength),
                    "{payload_length}"
                );
            }
        }
    }

    #[test]
    fn the_udp_length_must_be_the_ip_payloads() {
        for request in v4_requests().into_iter().chain(v6_requests()) {
            let udp_length = request.len() - 7;
            // One less, one more, none (IPv6 jumbograms), under a header.
            for length in [10, 12, 0, 7, 8] {
                let mut frame = request.clone();
                frame[udp_length..udp_length + 2].copy_from_slice(&u16::to_be_bytes(length));
                assert_eq!(parse(&frame), Err(FrameError::BadUdpLength), "{length}");
            }
            // And a shorter IP packet, the rest taken for padding: the UDP
            // length is now one more than the IP payload's.
            let mut frame = request.clone();
            let (_, v4) = network_offset(&frame);
            if v4 {
                set_ip_u16(&mut frame, 2, 30);
                fix_ipv4_checksum(&mut frame);
            } else {
                set_ip_u16(&mut frame, 4, 10);
            }
            assert_eq!(parse(&frame), Err(FrameError::BadUdpLength));
        }
    }

    #[test]
    fn port_zero_is_refused() {
        for request in v4_requests().into_iter().chain(v6_requests()) {
            let udp = request.len() - 11;
            for port in [udp, udp + 2] {
                let mut frame = request.clone();
                frame[port..port + 2].copy_from_slice(&[0, 0]);
                assert_eq!(parse(&frame), Err(FrameError::ZeroPort));
            }
        }
    }

    #[test]
    fn error_names_are_distinct_labels() {
        let mut names: Vec<_> = FrameError::ALL.iter().map(|error| error.name()).collect();
        assert!(names
            .iter()
            .all(|name| !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FrameError::ALL.len());
    }

    #[test]
    fn answers_match_the_hand_written_bytes() {
        assert_eq!(answer(&headers_v4(None), &[1, 2, 3]), ANSWER_V4);
        assert_eq!(answer(&headers_v6(None), &[1, 2, 3]), ANSWER_V6);
        assert_eq!(
            answer(&headers_v4(Some(TCI)), &[1, 2, 3]),
            tagged(&ANSWER_V4, TCI)
        );
        assert_eq!(
            answer(&headers_v6(Some(TCI)), &[1, 2, 3]),
            tagged(&ANSWER_V6, TCI)
        );
    }

    #[test]
    fn the_ipv4_header_checksum_matches_a_known_vector() {
        // RFC 1071's method on the header of a captured packet (as
        // Wikipedia's "IPv4 header checksum" shows it): checksum B861.
        let header: [u8; 20] = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xC0, 0xA8,
            0x00, 0x01, 0xC0, 0xA8, 0x00, 0xC7,
        ];
        assert_eq!(!fold(sum_words(&header)), 0xB861);
        let source = Ipv4Addr::new(192, 168, 0, 1);
        let destination = Ipv4Addr::new(192, 168, 0, 199);
        assert_eq!(
            ipv4_header(0x73, &source, &destination)[10..12],
            [0xB8, 0x61]
        );
    }

    #[test]
    fn a_udp_checksum_of_zero_is_sent_as_ffff() {
        // Without the payload, the sum is 3433 (see REQUEST_V4); a payload
        // word of CBCC makes it FFFF, whose complement is 0.
        let frame = answer(&headers_v4(None), &[0xCB, 0xCC]);
        assert_eq!(frame[40..42], [0xFF, 0xFF]);
        assert_eq!(reference_sums(&frame), (0xFFFF, 0xFFFF));
        assert_eq!(parse(&frame).unwrap().payload, [0xCB, 0xCC]);
    }

    #[test]
    fn answers_parse_back() {
        for (request, expected) in requests() {
            let asked = parse(&request).unwrap().headers;
            assert_eq!(asked, expected);
            for payload in [&[][..], &[7][..], &[1, 2, 3][..], &[0xFF; 1400][..]] {
                let frame = answer(&asked, payload);
                let answered = parse(&frame).unwrap();
                assert_eq!(answered.headers, asked.reversed());
                assert_eq!(answered.payload, payload);
                assert_eq!(reference_sums(&frame), (0xFFFF, 0xFFFF));
            }
        }
    }

    #[test]
    fn answers_that_do_not_fit_are_not_written() {
        for (_, asked) in requests() {
            let len = answer_header_len(&asked) + 100;
            let mut frame = vec![0xAA; len - 1];
            assert_eq!(write_answer(&mut frame, &asked, 100), None);
            assert!(frame.iter().all(|&b| b == 0xAA));
            let mut frame = vec![0xAA; len];
            assert_eq!(write_answer(&mut frame, &asked, 100), Some(len));
            assert!(frame[len - 100..].iter().all(|&b| b == 0xAA));
            assert_eq!(write_answer(&mut frame, &asked, usize::MAX), None);
        }
    }

    #[test]
    fn the_longest_datagrams() {
        let mut frame = vec![0x5A; 70_000];
        for (asked, longest) in [
            (headers_v4(None), 65_535 - 28),
            (headers_v4(Some(TCI)), 65_535 - 28),
            (headers_v6(None), 65_535 - 8),
            (headers_v6(Some(TCI)), 65_535 - 8),
        ] {
            assert_eq!(write_answer(&mut frame, &asked, longest + 1), None);
            let len = write_answer(&mut frame, &asked, longest).unwrap();
            assert_eq!(len, answer_header_len(&asked) + longest);
            let answered = parse(&frame[..len]).unwrap();
            assert_eq!(answered.payload.len(), longest);
            assert_eq!(reference_sums(&frame[..len]), (0xFFFF, 0xFFFF));
        }
    }

    #[test]
    fn mixed_families_are_not_answered() {
        let mut frame = vec![0xAA; 2048];
        let v4 = headers_v4(None);
        let v6 = headers_v6(None);
        for asked in [
            FrameHeaders {
                local: v6.local,
                ..v4
            },
            FrameHeaders {
                client: v6.client,
                ..v4
            },
        ] {
            assert_eq!(write_answer(&mut frame, &asked, 10), None);
        }
        assert!(frame.iter().all(|&b| b == 0xAA));
    }

    fn any_headers() -> impl Strategy<Value = FrameHeaders> {
        let address = prop_oneof![
            any::<[u8; 4]>().prop_map(std::net::IpAddr::from),
            any::<[u8; 16]>().prop_map(std::net::IpAddr::from),
        ];
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            any::<Option<u16>>(),
            address,
            any::<[u8; 16]>(),
            1..=u16::MAX,
            1..=u16::MAX,
        )
            .prop_map(
                |(client_mac, local_mac, vlan, client, other, client_port, local_port)| {
                    // The local address of the client's family.
                    let local = match client {
                        std::net::IpAddr::V4(_) => {
                            std::net::IpAddr::from([other[0], other[1], other[2], other[3]])
                        }
                        std::net::IpAddr::V6(_) => std::net::IpAddr::from(other),
                    };
                    FrameHeaders {
                        client_mac,
                        local_mac,
                        vlan,
                        client: SocketAddr::new(client, client_port),
                        local: SocketAddr::new(local, local_port),
                    }
                },
            )
    }

    proptest! {
        /// Any answer parses back to the swapped headers and its payload,
        /// and both checksums verify by the reference.
        #[test]
        fn answers_round_trip(
            asked in any_headers(),
            payload in proptest::collection::vec(any::<u8>(), 0..1400),
        ) {
            let frame = answer(&asked, &payload);
            let answered = parse(&frame).unwrap();
            prop_assert_eq!(answered.headers, asked.reversed());
            prop_assert_eq!(answered.payload, &payload[..]);
            prop_assert_eq!(reference_sums(&frame), (0xFFFF, 0xFFFF));
            let udp_checksum = answer_header_len(&asked) - 2;
            prop_assert_ne!(&frame[udp_checksum..udp_checksum + 2], &[0, 0]);
        }

        /// The fast sum folds to the reference's, at every length.
        #[test]
        fn sums_match_the_reference(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(fold(sum_words(&bytes)), reference_sum(&bytes));
        }

        /// Sums of consecutive slices add up when split at an even length
        /// (as `write_udp` sums the header and the payload apart).
        #[test]
        fn sums_of_parts_add_up(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<prop::sample::Index>(),
        ) {
            let (start, end) = bytes.split_at(at.index(bytes.len() + 1) & !1);
            prop_assert_eq!(fold(sum_words(start) + sum_words(end)), fold(sum_words(&bytes)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }

        /// Valid requests with a few bytes changed never panic, and what
        /// still parses is answered and parses back.
        #[test]
        fn changed_frames_never_panic(
            which in 0..4usize,
            changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut frame = requests().swap_remove(which).0;
            frame.resize(70, 0);
            for (at, value) in changes {
                let at = at.index(frame.len());
                frame[at] = value;
            }
            let frame = &frame[..cut.index(frame.len() + 1)];
            if let Ok(request) = parse(frame) {
                let reply = answer(&request.headers, request.payload);
                let answered = parse(&reply).unwrap();
                prop_assert_eq!(answered.headers, request.headers.reversed());
                prop_assert_eq!(answered.payload, request.payload);
            }
        }
    }
}
