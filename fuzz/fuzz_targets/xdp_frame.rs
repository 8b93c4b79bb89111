//! An Ethernet frame as an AF_XDP socket receives it: `frame::parse` must
//! never panic, and what it accepts must be answerable in a 2048-byte frame
//! (when the payload fits) whose answer parses back to the swapped headers
//! and the same payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_net::xdp::frame::{answer_header_len, parse, write_answer};

/// An AF_XDP frame's size, as UMEMs are usually laid out.
const FRAME_SIZE: usize = 2048;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = parse(data) else {
        return;
    };
    let mut frame = [0u8; FRAME_SIZE];
    let start = answer_header_len(&request.headers);
    let end = start + request.payload.len();
    if end > FRAME_SIZE {
        assert_eq!(
            write_answer(&mut frame, &request.headers, request.payload.len()),
            None
        );
        return;
    }
    frame[start..end].copy_from_slice(request.payload);
    let len = write_answer(&mut frame, &request.headers, request.payload.len())
        .expect("an answer that fits is written");
    assert_eq!(len, end);
    let answer = parse(&frame[..len]).expect("the answer parses");
    assert_eq!(answer.headers, request.headers.reversed());
    assert_eq!(answer.payload, request.payload);
});
