//! A Gazelle site's call to its tracker, as the network delivers it: the
//! query of an `update` or a `report` (Ocelot's raw values). Neither parser
//! may panic, and any sequence of updates, split from the input at its NUL
//! bytes, must apply to a Gazelle view without panicking, whatever the
//! view holds already.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracker_private::gazelle::{parse_report, parse_update, GazelleRecords, GazelleSite};

fuzz_target!(|input: &[u8]| {
    let _ = parse_report(input);
    let mut site = GazelleSite::from_records(GazelleRecords::default(), 1800, 240);
    for (now, query) in input.split(|&b| b == 0).enumerate() {
        let update = parse_update(query);
        // Twice: the second meets what the first left.
        site.apply(&update, now as u64);
        site.apply(&update, now as u64);
        site.forget_deletions(now as u64, 2);
    }
});
