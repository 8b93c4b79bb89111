//! Cache-line prefetches: what a batch of announces will read is started
//! loading before the first of them is served (see `SwarmStore::prefetch`).

/// Asks the CPU to load the cache line at `p` and returns at once: a hint,
/// which reads nothing and never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is not a memory access; any address is sound.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading every cache line of the `n` values from `p` (a value may
/// straddle two lines).
#[inline(always)]
pub(crate) fn prefetch_all<T>(p: *const T, n: usize) {
    const LINE: usize = 64;
    let bytes = n * std::mem::size_of::<T>();
    if bytes == 0 {
        return;
    }
    let first = p as usize & !(LINE - 1);
    let last = (p as usize + bytes - 1) & !(LINE - 1);
    let mut line = p.cast::<u8>().wrapping_sub(p as usize - first);
    for _ in 0..=(last - first) / LINE {
        prefetch(line);
        line = line.wrapping_add(LINE);
    }
}
