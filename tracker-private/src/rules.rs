//! The crediting rules of UNIT3D-Announce: which percent of an announce's
//! uploaded and downloaded bytes the user is credited, from the tracker's
//! configuration, the user's group, the torrent, donor status, freeleech
//! tokens, personal freeleech and featured torrents. Integer percent math,
//! as UNIT3D-Announce does it, so both trackers credit the same bytes.

pub use crate::site::{FactorOverrides, GlobalFactors};
use crate::site::{Group, Site, Torrent, User};

/// The percents one user is credited on one torrent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factors {
    /// Percent of uploaded bytes credited (100 normal, 200 double).
    pub upload: u16,
    /// Percent of downloaded bytes counted (0 freeleech).
    pub download: u8,
}

/// What a group's flags mean as factors: freeleech counts no download,
/// double upload credits 200 percent.
pub fn group_factors(group: &Group) -> Factors {
    Factors {
        upload: if group.is_double_upload { 200 } else { 100 },
        download: if group.is_freeleech { 0 } else { 100 },
    }
}

impl Factors {
    /// UNIT3D-Announce's combination: the highest upload percent and the
    /// lowest download percent of the configuration, the group and the
    /// torrent; then the (lifetime) donor overrides; then personal
    /// freeleech, a freeleech token on this torrent or a featured torrent
    /// count no download, and a featured torrent credits exactly 200
    /// percent of upload (assigned, even over a higher factor).
    pub fn of(site: &Site, user: &User, group: &Group, torrent: &Torrent) -> Factors {
        let global = site.factors();
        let by_group = group_factors(group);
        let mut upload = u16::from(global.upload)
            .max(by_group.upload)
            .max(u16::from(torrent.upload_factor));
        let mut download = global
            .download
            .min(by_group.download)
            .min(torrent.download_factor);
        if let Some(overrides) = global.overrides_for(user) {
            if let Some(up) = overrides.upload {
                upload = upload.max(u16::from(up));
            }
            if let Some(down) = overrides.download {
                download = download.min(down);
            }
        }
        let featured = site.is_featured(torrent.id);
        if featured || site.has_personal_freeleech(user.id) || site.has_token(user.id, torrent.id) {
            download = 0;
        }
        if featured {
            upload = 200;
        }
        Factors { upload, download }
    }
}

/// Whether the user's history rows are immune to hit-and-run: the group's
/// immunity, replaced by the (lifetime) donor override where one is set.
pub fn immune(site: &Site, user: &User, group: &Group) -> bool {
    site.factors()
        .overrides_for(user)
        .and_then(|o| o.immune)
        .unwrap_or(group.is_immune)
}

/// `percent` of `delta` bytes, truncated (`percent * delta / 100`), in
/// 128-bit math so no factor overflows; saturates at `u64::MAX`.
pub fn credit(delta: u64, percent: u16) -> u64 {
    let bytes = u128::from(delta) * u128::from(percent) / 100;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::SiteRecords;
    use crate::testing::{group, torrent, user};

    /// One case: what differs from a plain user in a plain group on a
    /// plain torrent, and the factors expected.
    struct Case {
        name: &'static str,
        global: (u8, u8),
        group: (bool, bool),
        torrent: (u8, u8),
        donor: bool,
        lifetime: bool,
        personal: bool,
        token: bool,
        featured: bool,
        expected: (u16, u8),
    }

    const PLAIN: Case = Case {
        name: "plain",
        global: (100, 100),
        group: (false, false),
        torrent: (100, 100),
        donor: false,
        lifetime: false,
        personal: false,
        token: false,
        featured: false,
        expected: (100, 100),
    };

    fn overrides(upload: u8, download: u8) -> FactorOverrides {
        FactorOverrides {
            upload: Some(upload),
            download: Some(download),
            immune: None,
        }
    }

    fn factors_of(case: &Case) -> Factors {
        let mut g = group(1, "user");
        (g.is_freeleech, g.is_double_upload) = case.group;
        let mut u = user(1, 1);
        u.is_donor = case.donor;
        u.is_lifetime = case.lifetime;
        let mut t = torrent(1);
        (t.upload_factor, t.download_factor) = case.torrent;
        let records = SiteRecords {
            users: vec![u.clone()],
            groups: vec![g.clone()],
            torrents: vec![t.clone()],
            featured: if case.featured { vec![1] } else { vec![] },
            tokens: if case.token { vec![(1, 1)] } else { vec![] },
            personal_freeleech: if case.personal { vec![1] } else { vec![] },
            blacklist: vec![],
        };
        let global = GlobalFactors {
            upload: case.global.0,
            download: case.global.1,
            donor: overrides(150, 50),
            lifetime: overrides(250, 25),
        };
        Factors::of(&Site::from_records(records, global), &u, &g, &t)
    }

    #[test]
    fn each_rule() {
        let cases = [
            PLAIN,
            Case {
                name: "global double upload",
                global: (200, 100),
                expected: (200, 100),
                ..PLAIN
            },
            Case {
                name: "global freeleech",
                global: (100, 0),
                expected: (100, 0),
                ..PLAIN
            },
            Case {
                name: "group freeleech",
                group: (true, false),
                expected: (100, 0),
                ..PLAIN
            },
            Case {
                name: "group double upload",
                group: (false, true),
                expected: (200, 100),
                ..PLAIN
            },
            Case {
                name: "torrent 25% free",
                torrent: (100, 75),
                expected: (100, 75),
                ..PLAIN
            },
            Case {
                name: "torrent double upload",
                torrent: (200, 100),
                expected: (200, 100),
                ..PLAIN
            },
            Case {
                name: "lowest download wins",
                global: (100, 50),
                torrent: (100, 75),
                expected: (100, 50),
                ..PLAIN
            },
            Case {
                name: "highest upload wins",
                global: (150, 100),
                torrent: (200, 100),
                expected: (200, 100),
                ..PLAIN
            },
            Case {
                name: "donor override",
                donor: true,
                expected: (150, 50),
                ..PLAIN
            },
            Case {
                name: "donor override never lowers upload",
                donor: true,
                torrent: (200, 100),
                expected: (200, 50),
                ..PLAIN
            },
            Case {
                name: "donor override never raises download",
                donor: true,
                torrent: (100, 10),
                expected: (150, 10),
                ..PLAIN
            },
            Case {
                name: "lifetime over donor",
                donor: true,
                lifetime: true,
                expected: (250, 25),
                ..PLAIN
            },
            Case {
                name: "personal freeleech",
                personal: true,
                expected: (100, 0),
                ..PLAIN
            },
            Case {
                name: "freeleech token",
                token: true,
                expected: (100, 0),
                ..PLAIN
            },
            Case {
                name: "featured",
                featured: true,
                expected: (200, 0),
                ..PLAIN
            },
            Case {
                name: "featured assigns 200 upload",
                featured: true,
                lifetime: true,
                expected: (200, 0),
                ..PLAIN
            },
            Case {
                name: "featured lowers a global 255",
                featured: true,
                global: (255, 100),
                expected: (200, 0),
                ..PLAIN
            },
        ];
        for case in &cases {
            let f = factors_of(case);
            assert_eq!((f.upload, f.download), case.expected, "{}", case.name);
        }
    }

    #[test]
    fn overrides_without_values_change_nothing() {
        let mut u = user(1, 1);
        u.is_donor = true;
        let site = Site::default();
        let f = Factors::of(&site, &u, &group(1, "user"), &torrent(1));
        assert_eq!((f.upload, f.download), (100, 100));
    }

    #[test]
    fn immunity() {
        let mut g = group(1, "user");
        let mut u = user(1, 1);
        let mut site = Site::default();
        let mut factors = GlobalFactors::default();
        assert!(!immune(&site, &u, &g));
        g.is_immune = true;
        assert!(immune(&site, &u, &g));
        u.is_donor = true;
        factors.donor.immune = Some(false);
        site.set_factors(factors);
        assert!(!immune(&site, &u, &g), "donor override");
        u.is_lifetime = true;
        assert!(
            immune(&site, &u, &g),
            "lifetime without override: the group's"
        );
        factors.lifetime.immune = Some(false);
        g.is_immune = false;
        factors.lifetime.immune = Some(true);
        site.set_factors(factors);
        assert!(immune(&site, &u, &g), "lifetime override");
    }

    #[test]
    fn credit_truncates_and_never_overflows() {
        let cases: [(u64, u16, u64); 8] = [
            (1000, 100, 1000),
            (1000, 0, 0),
            (1000, 200, 2000),
            (999, 50, 499),
            (1, 99, 0),
            (u64::MAX, 100, u64::MAX),
            (u64::MAX, 50, u64::MAX / 2),
            (u64::MAX, 200, u64::MAX),
        ];
        for (delta, percent, expected) in cases {
            assert_eq!(credit(delta, percent), expected, "{delta} at {percent}%");
        }
    }
}
