//! The budgets of new torrents: how many torrents the clients of one block
//! of addresses may create per minute on one worker, at every width of
//! block (`tracker_proto::BlockLevel`: an address, a subnet, a network),
//! each width in a fixed table of its own (see `ratelimit`).
//!
//! A budget per address alone let a network create as many torrents as it
//! has addresses: an IPv6 /56 holds 256 /64s, a /48 65,536, and eight /64s
//! of one /56 filled a store of 3,000 torrents in 1.8 s (issue 28). With a
//! budget for each wider block too, a network creates no more than its own
//! budget however many addresses it spreads its announces over.

use std::net::IpAddr;

use tracker_proto::{block_key, BlockLevel};

use crate::ratelimit::RateLimit;

/// Slots of each width's table (8 bytes each, 512 KiB): far more than the
/// blocks that create torrents within one minute, so that few share a budget.
/// The tables' keys are random, so no client can aim at another's slot.
const SLOTS: usize = 1 << 16;

pub(crate) struct NewTorrentBudgets {
    /// By `BlockLevel`; None where a width has no budget.
    levels: [Option<RateLimit>; 3],
}

/// Where a new torrent allowed by `NewTorrentBudgets::check` is counted.
pub(crate) struct Spend([Option<usize>; 3]);

impl NewTorrentBudgets {
    /// `per_minute`: the budget of each width, by `BlockLevel`; 0 for none.
    pub fn new(per_minute: [u32; 3]) -> Self {
        NewTorrentBudgets {
            levels: per_minute.map(|budget| RateLimit::new(budget, 60, SLOTS)),
        }
    }

    /// Whether the client at `ip` may create a torrent at second `now`:
    /// where to count it (`spend`), or the narrowest width whose budget its
    /// block has spent this minute. Counts nothing, so that a torrent refused
    /// at one width (or by the store's own limits) costs no budget at the
    /// others.
    pub fn check(&self, ip: IpAddr, now: u32) -> Result<Spend, BlockLevel> {
        let mut slots = [None; 3];
        for (level, budget) in BlockLevel::ALL.into_iter().zip(&self.levels) {
            let Some(budget) = budget else {
                continue;
            };
            let slot = budget.slot_of_block(block_key(ip, level));
            if !budget.room_at(slot, now) {
                return Err(level);
            }
            slots[level as usize] = Some(slot);
        }
        Ok(Spend(slots))
    }

    /// How much of its budget the address `ip` has spent this minute, in
    /// quarters (0 to 4), at the narrowest width that has a budget (0 when
    /// none has): what eviction takes for a creator's weight. One table
    /// read.
    pub fn spent(&self, ip: IpAddr, now: u32) -> u32 {
        let mut levels = BlockLevel::ALL.into_iter().zip(&self.levels);
        let Some((level, Some(budget))) = levels.find(|(_, b)| b.is_some()) else {
            return 0;
        };
        let used = budget.used_at(budget.slot_of_block(block_key(ip, level)), now);
        (u64::from(used) * 4 / u64::from(budget.per_window().max(1))).min(4) as u32
    }

    /// Counts a new torrent that `check` allowed.
    pub fn spend(&mut self, spend: Spend, now: u32) {
        for (slot, budget) in spend.0.into_iter().zip(&mut self.levels) {
            if let (Some(slot), Some(budget)) = (slot, budget) {
                budget.count_at(slot, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(budgets: &mut NewTorrentBudgets, ip: &str, now: u32) -> Result<(), BlockLevel> {
        let spend = budgets.check(ip.parse().unwrap(), now)?;
        budgets.spend(spend, now);
        Ok(())
    }

    /// Creates from `ip` until refused; how many it created and why it stopped.
    fn fill(budgets: &mut NewTorrentBudgets, ip: &str, now: u32) -> (u32, BlockLevel) {
        let mut created = 0;
        loop {
            match take(budgets, ip, now) {
                Ok(()) => created += 1,
                Err(level) => return (created, level),
            }
        }
    }

    #[test]
    fn every_width_of_block_has_its_own_budget_in_either_family() {
        for (a, same_subnet, same_network, elsewhere) in [
            ("10.1.1.1", "10.1.1.2", "10.1.2.1", "10.2.0.1"),
            (
                "2001:db8:1:100::1",
                "2001:db8:1:1ff::1",
                "2001:db8:1:200::1",
                "2001:db8:2::1",
            ),
        ] {
            let mut budgets = NewTorrentBudgets::new([3, 5, 7]);
            assert_eq!(fill(&mut budgets, a, 60), (3, BlockLevel::Address));
            // The refusals spent nothing of the subnet's budget.
            assert_eq!(fill(&mut budgets, same_subnet, 60), (2, BlockLevel::Subnet));
            assert_eq!(
                fill(&mut budgets, same_network, 60),
                (2, BlockLevel::Network)
            );
            assert_eq!(fill(&mut budgets, elsewhere, 60), (3, BlockLevel::Address));
            // A minute later every budget is whole again.
            assert_eq!(fill(&mut budgets, a, 120), (3, BlockLevel::Address));
        }
    }

    #[test]
    fn an_ipv6_address_is_its_64_and_the_families_never_share() {
        let mut budgets = NewTorrentBudgets::new([2, 0, 0]);
        assert_eq!(
            fill(&mut budgets, "2001:db8::1", 0),
            (2, BlockLevel::Address)
        );
        assert!(take(&mut budgets, "2001:db8::ffff", 0).is_err());
        // An IPv4-mapped address is its IPv4 address.
        assert_eq!(fill(&mut budgets, "10.0.0.1", 0), (2, BlockLevel::Address));
        assert!(take(&mut budgets, "::ffff:10.0.0.1", 0).is_err());
    }

    #[test]
    fn what_an_address_spent_is_told_in_quarters_of_its_narrowest_budget() {
        let mut budgets = NewTorrentBudgets::new([0, 8, 100]);
        let ip = "10.0.0.1".parse().unwrap();
        assert_eq!(budgets.spent(ip, 0), 0);
        for _ in 0..6 {
            take(&mut budgets, "10.0.0.1", 0).unwrap();
        }
        assert_eq!(budgets.spent(ip, 0), 3);
        // The subnet's: another address of it has spent as much.
        assert_eq!(budgets.spent("10.0.0.2".parse().unwrap(), 0), 3);
        assert_eq!(budgets.spent(ip, 60), 0, "a new minute");
        assert_eq!(NewTorrentBudgets::new([0; 3]).spent(ip, 0), 0);
    }

    #[test]
    fn a_width_without_a_budget_counts_nothing() {
        let mut budgets = NewTorrentBudgets::new([0, 0, 0]);
        for _ in 0..10_000 {
            take(&mut budgets, "10.0.0.1", 0).unwrap();
        }
        let mut budgets = NewTorrentBudgets::new([0, 0, 4]);
        assert_eq!(fill(&mut budgets, "10.0.0.1", 0), (4, BlockLevel::Network));
        assert!(take(&mut budgets, "10.0.200.1", 0).is_err());
    }
}
