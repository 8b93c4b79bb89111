//! Per-worker counters: plain cells owned by one executor, never shared, so
//! counting costs an add and nothing else.
//!
//! Counter structs are declared with [`counters!`](crate::counters), which
//! names each counter's metric family and labels next to the field: a counter
//! added to a struct is exported by the metrics endpoint with no further step.

use std::cell::Cell;
use std::net::IpAddr;

/// A counter that only its own worker writes.
#[derive(Default, Debug)]
pub struct Counter(Cell<u64>);

impl Counter {
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        self.0.set(self.0.get().wrapping_add(n));
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A counter kept apart for IPv4 and IPv6 clients (exported with a `family`
/// label).
#[derive(Default, Debug)]
pub struct ByFamily {
    pub ipv4: Counter,
    pub ipv6: Counter,
}

impl ByFamily {
    /// The counter of `ip`'s family; an IPv4-mapped address counts as IPv4.
    #[inline]
    pub fn of(&self, ip: IpAddr) -> &Counter {
        match ip {
            IpAddr::V4(_) => &self.ipv4,
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => &self.ipv4,
            IpAddr::V6(_) => &self.ipv6,
        }
    }

    #[inline]
    pub fn inc(&self, ip: IpAddr) {
        self.of(ip).inc();
    }
}

/// Declares a struct of per-worker counters together with its metrics. Each
/// field is a [`Counter`] or a [`ByFamily`], followed by `=>`, the static
/// [`Family`](crate::metrics::Family) it is a sample of, and its labels:
///
/// ```
/// use tracker_runtime::counters;
/// use tracker_runtime::metrics::{REQUESTS, UDP_ERRORS};
///
/// counters! {
///     /// What a front end counts.
///     pub struct FrontStats {
///         /// Announces, by client address family.
///         pub announces: ByFamily => REQUESTS { action = "announce" },
///         pub malformed: Counter => UDP_ERRORS { kind = "malformed" },
///     }
/// }
///
/// let stats = FrontStats::default();
/// stats.malformed.inc();
/// let mut samples = Vec::new();
/// stats.samples(&[("protocol", "udp")], &mut samples);
/// assert_eq!(samples.len(), 3); // announces for ipv4 and ipv6, malformed
/// ```
///
/// `samples(scope, out)` appends one sample per counter (two for a
/// `ByFamily`), labelled with `scope` (the owner's labels, such as the
/// protocol) and then the field's own labels.
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident : $kind:ident => $family:path
                    { $($key:ident = $value:literal),* $(,)? }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Default, Debug)]
        $vis struct $name {
            $(
                $(#[$field_meta])*
                $field_vis $field: $crate::counters::$kind,
            )*
        }

        impl $name {
            /// Appends a sample of every counter, labelled `scope` and then
            /// with the counter's own labels.
            pub fn samples(
                &self,
                scope: &'static [$crate::metrics::Label],
                out: &mut ::std::vec::Vec<$crate::metrics::Sample>,
            ) {
                $(
                    $crate::counters!(
                        @sample $kind, self.$field, $family, scope, out,
                        [$((stringify!($key), $value),)*]
                    );
                )*
            }
        }
    };
    (@sample Counter, $counter:expr, $family:path, $scope:ident, $out:ident, [$($label:tt)*]) => {
        $out.push($crate::metrics::Sample {
            family: &$family,
            scope: $scope,
            labels: &[$($label)*],
            value: $counter.get(),
        });
    };
    (@sample ByFamily, $counter:expr, $family:path, $scope:ident, $out:ident, [$($label:tt)*]) => {
        $out.push($crate::metrics::Sample {
            family: &$family,
            scope: $scope,
            labels: &[$($label)* ("family", "ipv4")],
            value: $counter.ipv4.get(),
        });
        $out.push($crate::metrics::Sample {
            family: &$family,
            scope: $scope,
            labels: &[$($label)* ("family", "ipv6")],
            value: $counter.ipv6.get(),
        });
    };
}

counters! {
    /// What crosses between workers.
    pub struct MeshStats {
        /// Requests this worker sent to the owner of their torrent.
        pub forwarded: Counter => crate::metrics::MESH_FORWARDED {},
        /// Requests from other workers that this worker answered as owner.
        pub served_for_others: Counter => crate::metrics::MESH_SERVED {},
        /// Sends that found the channel full and had to wait.
        pub backpressure_waits: Counter => crate::metrics::MESH_BACKPRESSURE {},
        /// Requests dropped because too many were already awaiting answers.
        pub overloaded: Counter => crate::metrics::MESH_OVERLOADED {},
        /// Requests from other workers whose serving panicked (contained: the
        /// asker got a failure answer).
        pub panics: Counter => crate::metrics::PANICS { component = "mesh" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_family_counts_mapped_addresses_as_ipv4() {
        let c = ByFamily::default();
        c.inc("1.2.3.4".parse().unwrap());
        c.inc("::ffff:1.2.3.4".parse().unwrap());
        c.inc("2001:db8::1".parse().unwrap());
        assert_eq!((c.ipv4.get(), c.ipv6.get()), (2, 1));
    }

    #[test]
    fn declared_counters_become_samples_in_field_order() {
        let stats = MeshStats::default();
        stats.forwarded.add(3);
        stats.overloaded.inc();
        let mut out = Vec::new();
        stats.samples(&[("x", "y")], &mut out);
        let got: Vec<(&str, u64)> = out.iter().map(|s| (s.family.name, s.value)).collect();
        assert_eq!(
            got,
            [
                ("tracker_mesh_forwarded_total", 3),
                ("tracker_mesh_served_total", 0),
                ("tracker_mesh_backpressure_waits_total", 0),
                ("tracker_mesh_overloaded_total", 1),
                ("tracker_panics_total", 0),
            ]
        );
        assert!(out.iter().all(|s| s.scope == [("x", "y")]));
    }
}
