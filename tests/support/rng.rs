//! SplitMix64 with a printed seed: enough randomness for the randomized tests
//! without another dependency (`support::rng`). `FENCEGATE_SEED=<n>` replays
//! a run.

#![allow(dead_code)]

pub struct Rng(pub u64);

impl Rng {
    /// Seeded from `FENCEGATE_SEED`, or the clock; the seed is printed so a
    /// failure can be replayed.
    pub fn from_env_or_clock() -> Self {
        let seed = std::env::var("FENCEGATE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
        eprintln!("seed {seed} (rerun with FENCEGATE_SEED={seed})");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` for tests.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
