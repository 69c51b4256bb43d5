//! Which code path the resampler runs: every path gives the same bytes
//! (integer arithmetic, the same sums), and each can be forced, so tests
//! and users can check that a CPU without AVX2 (or without SSSE3) would
//! give what this one gives.
//!
//! The path is the fastest the CPU has, lowered by
//! `PIPELINE_RESAMPLE_PATH=scalar|ssse3|avx2` (read once) or by
//! [`force_resample_path`] (for tests that run every path in one process).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// A resampler code path, slowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResamplePath {
    /// Plain loops (what the compiler makes of them for baseline x86-64
    /// or the target CPU): the reference.
    Scalar,
    /// The horizontal pass four taps an instruction with SSSE3's
    /// `pmaddwd`/`pshufb`.
    Ssse3,
    /// The SSSE3 kernel VEX-encoded, and the vertical pass eight lanes an
    /// instruction with AVX2.
    Avx2,
}

impl ResamplePath {
    /// Every path, slowest first.
    pub const ALL: [ResamplePath; 3] = [Self::Scalar, Self::Ssse3, Self::Avx2];

    /// The path's name, as `PIPELINE_RESAMPLE_PATH` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Ssse3 => "ssse3",
            Self::Avx2 => "avx2",
        }
    }

    /// The fastest path this CPU runs.
    pub fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // The AVX2 path runs the SSSE3 kernel VEX-encoded: it needs
            // both (a VM may mask one and not the other).
            let ssse3 = std::arch::is_x86_feature_detected!("ssse3");
            if ssse3 && std::arch::is_x86_feature_detected!("avx2") {
                return Self::Avx2;
            }
            if ssse3 {
                return Self::Ssse3;
            }
        }
        Self::Scalar
    }
}

impl std::str::FromStr for ResamplePath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown resampler path '{s}' (scalar, ssse3 or avx2)"))
    }
}

/// No forced path: the environment's, else the best.
const UNFORCED: u8 = u8::MAX;
static FORCED: AtomicU8 = AtomicU8::new(UNFORCED);

/// Runs every later resize on `path` (`None`: back to the default). A
/// path the CPU lacks is an error naming it; nothing changes then.
pub fn force_resample_path(path: Option<ResamplePath>) -> Result<(), String> {
    match path {
        Some(p) if p > ResamplePath::best() => Err(format!(
            "this CPU cannot run the {} resampler path (the best it runs is {})",
            p.name(),
            ResamplePath::best().name()
        )),
        Some(p) => {
            FORCED.store(p as u8, Ordering::Relaxed);
            Ok(())
        }
        None => {
            FORCED.store(UNFORCED, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// The path resizes run on now.
pub fn resample_path() -> ResamplePath {
    match FORCED.load(Ordering::Relaxed) {
        UNFORCED => default_path(),
        forced => ResamplePath::ALL[usize::from(forced)],
    }
}

/// `PIPELINE_RESAMPLE_PATH` capped by the CPU, else the best; an unknown
/// value is said once on stderr and ignored (the bytes are the same on
/// every path, so a typo costs speed, never results).
fn default_path() -> ResamplePath {
    static DEFAULT: OnceLock<ResamplePath> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let best = ResamplePath::best();
        match std::env::var("PIPELINE_RESAMPLE_PATH") {
            Ok(v) => match v.parse::<ResamplePath>() {
                Ok(p) => p.min(best),
                Err(e) => {
                    eprintln!(
                        "pipeline: PIPELINE_RESAMPLE_PATH: {e}; using {}",
                        best.name()
                    );
                    best
                }
            },
            Err(_) => best,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_forcing_past_the_cpu_is_refused() {
        for p in ResamplePath::ALL {
            assert_eq!(p.name().parse::<ResamplePath>(), Ok(p));
        }
        assert!("sse2".parse::<ResamplePath>().is_err());
        for p in ResamplePath::ALL {
            assert_eq!(
                force_resample_path(Some(p)).is_ok(),
                p <= ResamplePath::best()
            );
        }
        force_resample_path(None).expect("unforcing always works");
    }
}
