use super::*;
use std::collections::HashSet;

fn config() -> TrafficConfig {
    TrafficConfig::default()
}

#[test]
fn zipf_follows_the_power_law() {
    let zipf = Zipf::new(1000, 1.0).unwrap();
    let mut rng = Rng::new(1);
    let mut counts = vec![0u64; 1001];
    let samples = 400_000;
    for _ in 0..samples {
        let k = zipf.sample(&mut rng);
        assert!((1..=1000).contains(&k));
        counts[k as usize] += 1;
    }
    for k in [1u64, 2, 3, 10, 100] {
        let expected = zipf.probability(k) * samples as f64;
        let got = counts[k as usize] as f64;
        // Well within 5 standard deviations of the binomial.
        let tolerance = 5.0 * expected.sqrt() + 1.0;
        assert!(
            (got - expected).abs() < tolerance,
            "rank {k}: {got} vs {expected}"
        );
    }
    // Rank 1 about twice rank 2, ten times rank 10.
    let r12 = counts[1] as f64 / counts[2] as f64;
    assert!((1.9..2.1).contains(&r12), "{r12}");
}

#[test]
fn zipf_exponent_zero_is_uniform() {
    let zipf = Zipf::new(10, 0.0).unwrap();
    let mut rng = Rng::new(2);
    let mut counts = [0u64; 11];
    for _ in 0..100_000 {
        counts[zipf.sample(&mut rng) as usize] += 1;
    }
    for &c in &counts[1..] {
        assert!((9_000..11_000).contains(&c), "{counts:?}");
    }
}

#[test]
fn zipf_handles_large_n_and_other_exponents() {
    for s in [0.5, 0.99, 1.0, 1.01, 1.5, 3.0] {
        let zipf = Zipf::new(1_000_000, s).unwrap();
        let mut rng = Rng::new(3);
        let mut ones = 0u64;
        let n = 200_000;
        for _ in 0..n {
            let k = zipf.sample(&mut rng);
            assert!((1..=1_000_000).contains(&k));
            ones += u64::from(k == 1);
        }
        let expected = zipf.probability(1) * n as f64;
        let tolerance = 5.0 * expected.sqrt() + 5.0;
        assert!(
            (ones as f64 - expected).abs() < tolerance,
            "s={s}: {ones} vs {expected}"
        );
    }
    assert!(Zipf::new(0, 1.0).is_err());
    assert!(Zipf::new(10, -1.0).is_err());
    assert!(Zipf::new(10, f64::NAN).is_err());
}

#[test]
fn weights_give_their_shares() {
    let w = Weighted::new([50, 50, 1]).unwrap();
    let mut rng = Rng::new(4);
    let mut counts = [0u64; 3];
    let n = 1_010_000;
    for _ in 0..n {
        counts[w.sample(&mut rng)] += 1;
    }
    for (i, &c) in counts.iter().enumerate() {
        let expected = w.share(i) * n as f64;
        assert!(
            (c as f64 - expected).abs() < 5.0 * expected.sqrt(),
            "{counts:?}"
        );
    }
    // A zero weight is never chosen.
    let w = Weighted::new([0, 3, 0]).unwrap();
    assert!((0..1000).all(|_| w.sample(&mut rng) == 1));
    assert!(Weighted::new([0, 0]).is_err());
}

#[test]
fn rng_is_uniform_enough() {
    let mut rng = Rng::new(5);
    let mut buckets = [0u32; 10];
    for _ in 0..100_000 {
        let x = rng.f64();
        assert!((0.0..1.0).contains(&x));
        buckets[(x * 10.0) as usize] += 1;
        assert!(rng.below(7) < 7);
    }
    assert!(buckets.iter().all(|&b| (9_000..11_000).contains(&b)));
}

#[test]
fn peers_have_unique_addresses_on_their_source() {
    let mut cfg = config();
    cfg.peers = 200_000;
    let sources = min_sources(cfg.peers);
    assert_eq!(sources, 4);
    let model = TrafficModel::new(&cfg, sources, 9).unwrap();
    let mut seen = HashSet::new();
    let mut ids = HashSet::new();
    let mut total = 0;
    for s in 0..sources {
        total += model.peers_on_source(s);
    }
    assert_eq!(total, cfg.peers);
    for p in 0..cfg.peers {
        let peer = model.peer(p);
        assert_eq!(peer.source, p % sources);
        assert!(u32::from(peer.port) >= PORT_BASE);
        assert!(seen.insert((peer.source, peer.port)), "peer {p}");
        assert!(ids.insert(peer.peer_id));
    }
    // A peer drawn for a source sends from it.
    let mut rng = Rng::new(1);
    for s in 0..sources {
        for _ in 0..100 {
            let peer = model.peer_on_source(&mut rng, s);
            assert_eq!(peer.source, s);
            assert!(peer.index < cfg.peers);
        }
    }
    assert!(TrafficModel::new(&cfg, sources - 1, 9).is_err());
}

#[test]
fn more_sources_than_peers_leave_some_empty() {
    let mut cfg = config();
    cfg.peers = 3;
    let model = TrafficModel::new(&cfg, 8, 1).unwrap();
    let counts: Vec<_> = (0..8).map(|s| model.peers_on_source(s)).collect();
    assert_eq!(counts, [1, 1, 1, 0, 0, 0, 0, 0]);
}

#[test]
fn seeders_and_events_come_in_their_proportions() {
    let mut cfg = config();
    cfg.seeder_probability = 0.25;
    cfg.events = EventWeights {
        none: 70,
        started: 10,
        completed: 5,
        stopped: 15,
    };
    let model = TrafficModel::new(&cfg, min_sources(cfg.peers), 3).unwrap();
    let mut rng = Rng::new(8);
    let n = 200_000;
    let mut seeders = 0;
    let mut events = [0u32; 4];
    for i in 0..n {
        let plan = model.announce(&mut rng, i % model.sources());
        seeders += u32::from(plan.peer.seeder);
        events[plan.event as usize] += 1;
        if plan.peer.seeder || plan.event == AnnounceEvent::Completed {
            assert_eq!(plan.left, 0);
        } else {
            assert!(plan.left > 0);
        }
        assert_eq!(plan.info_hash, model.info_hash(plan.torrent));
        assert_eq!(plan.numwant, cfg.numwant);
    }
    let share = f64::from(seeders) / f64::from(n);
    assert!((0.24..0.26).contains(&share), "{share}");
    // Wire values: none 0, completed 1, started 2, stopped 3.
    let share = |e: AnnounceEvent| f64::from(events[e as usize]) / f64::from(n);
    assert!((0.69..0.71).contains(&share(AnnounceEvent::None)));
    assert!((0.09..0.11).contains(&share(AnnounceEvent::Started)));
    assert!((0.045..0.055).contains(&share(AnnounceEvent::Completed)));
    assert!((0.14..0.16).contains(&share(AnnounceEvent::Stopped)));
}

#[test]
fn scrapes_ask_for_one_to_max_hashes() {
    let mut cfg = config();
    cfg.scrape_hashes = 5;
    let model = TrafficModel::new(&cfg, min_sources(cfg.peers), 3).unwrap();
    let mut rng = Rng::new(8);
    let mut out = [InfoHash::default(); MAX_SCRAPE];
    let mut sizes = [0u32; 6];
    for _ in 0..10_000 {
        let n = model.scrape(&mut rng, &mut out);
        sizes[n] += 1;
    }
    assert_eq!(sizes[0], 0);
    assert!(sizes[1..].iter().all(|&c| c > 1_500), "{sizes:?}");
}

#[test]
fn info_hashes_are_distinct_and_stable() {
    let model = TrafficModel::new(&config(), 32, 7).unwrap();
    let hashes: HashSet<_> = (0..100_000).map(|t| model.info_hash(t)).collect();
    assert_eq!(hashes.len(), 100_000);
    assert_eq!(model.info_hash(5), model.info_hash(5));
    let other = TrafficModel::new(&config(), 32, 8).unwrap();
    assert_ne!(model.info_hash(5), other.info_hash(5));
}

#[test]
fn bad_configs_are_refused() {
    let sources = min_sources(config().peers);
    let mut cfg = config();
    cfg.torrents = 0;
    assert!(TrafficModel::new(&cfg, sources, 1).is_err());
    let mut cfg = config();
    cfg.seeder_probability = 1.5;
    assert!(TrafficModel::new(&cfg, sources, 1).is_err());
    let mut cfg = config();
    cfg.scrape_hashes = 75;
    assert!(TrafficModel::new(&cfg, sources, 1).is_err());
    let mut cfg = config();
    cfg.events = EventWeights {
        none: 0,
        started: 0,
        completed: 0,
        stopped: 0,
    };
    assert!(TrafficModel::new(&cfg, sources, 1).is_err());
}

#[test]
fn all_seeders_when_probability_is_one() {
    let mut cfg = config();
    cfg.seeder_probability = 1.0;
    cfg.peers = 1000;
    let model = TrafficModel::new(&cfg, 1, 1).unwrap();
    assert!((0..1000).all(|p| model.peer(p).seeder));
    cfg.seeder_probability = 0.0;
    let model = TrafficModel::new(&cfg, 1, 1).unwrap();
    assert!((0..1000).all(|p| !model.peer(p).seeder));
}

#[test]
fn each_source_speaks_for_a_torrent_with_one_peer() {
    let c = TrafficConfig {
        peers: 10_000,
        torrents: 100,
        ..config()
    };
    let model = TrafficModel::new(&c, 8, 3).unwrap();
    let mut rng = Rng::new(4);
    let mut used = HashSet::new();
    for _ in 0..2000 {
        let plan = model.announce_per_torrent(&mut rng, 5);
        assert_eq!(plan.peer.source, 5);
        assert_eq!(plan.peer, model.peer_for_torrent(5, plan.torrent));
        used.insert(plan.peer.index);
    }
    // Torrents spread over the source's peers, not all on one.
    assert!(used.len() > 20, "{}", used.len());
}

#[test]
fn peer_ids_lead_back_to_their_peer() {
    let c = TrafficConfig {
        peers: 5000,
        ..config()
    };
    let model = TrafficModel::new(&c, 4, 3).unwrap();
    for p in [0, 1, 77, 4999] {
        assert_eq!(model.peer_index(&model.peer(p).peer_id), Some(p));
    }
    let mut forged = model.peer(77).peer_id;
    forged.0[19] ^= 1;
    assert_eq!(model.peer_index(&forged), None);
    assert_eq!(model.peer_index(&PeerId(*b"-qB4500-000000000000")), None);
    // A peer id of a peer beyond the model's.
    let other = TrafficModel::new(&TrafficConfig { peers: 10_000, ..c }, 4, 3).unwrap();
    assert_eq!(model.peer_index(&other.peer(9000).peer_id), None);
}
