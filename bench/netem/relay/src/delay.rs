//! The delay each chunk of bytes gets: a draw from a normal distribution (netem's
//! `delay MEAN JITTER distribution normal`), cut at zero, and never earlier than the chunk before
//! it in the same direction (TCP hands bytes to the reader in order, so a packet that netem lets
//! out early waits for the one before it anyway).

/// Normal(mean, sd) draws in nanoseconds from a small xorshift generator (no dependency; the bench
/// needs the shape, not cryptographic randomness).
pub struct Delay {
    mean_ns: f64,
    sd_ns: f64,
    state: u64,
    spare: Option<f64>,
}

impl Delay {
    pub fn new(mean_ns: u64, sd_ns: u64, seed: u64) -> Self {
        Delay {
            mean_ns: mean_ns as f64,
            sd_ns: sd_ns as f64,
            state: seed | 1,
            spare: None,
        }
    }

    /// A uniform draw in (0, 1].
    fn uniform(&mut self) -> f64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let x = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box-Muller, both halves used).
    fn standard_normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let (u1, u2) = (self.uniform(), self.uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let t = std::f64::consts::TAU * u2;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }

    /// The delay of the next chunk, in nanoseconds (>= 0).
    pub fn draw_ns(&mut self) -> u64 {
        if self.sd_ns == 0.0 {
            return self.mean_ns as u64;
        }
        (self.mean_ns + self.sd_ns * self.standard_normal()).max(0.0) as u64
    }

    /// When a chunk read at `now` leaves: now + a draw, but not before `previous` (the release
    /// time of the chunk before it in the same direction).
    pub fn release_at(&mut self, now: u64, previous: u64) -> u64 {
        (now + self.draw_ns()).max(previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_have_the_asked_mean_and_deviation() {
        let mut d = Delay::new(1_000_000, 100_000, 42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| d.draw_ns() as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean - 1_000_000.0).abs() < 2_000.0, "mean {mean}");
        assert!((sd - 100_000.0).abs() < 2_000.0, "sd {sd}");
    }

    #[test]
    fn release_keeps_order_and_zero_jitter_is_exact() {
        let mut d = Delay::new(1_000_000, 100_000, 7);
        let mut prev = 0;
        for i in 0..10_000u64 {
            let at = d.release_at(i * 1_000, prev);
            assert!(at >= prev);
            prev = at;
        }
        let mut exact = Delay::new(500, 0, 1);
        assert_eq!(exact.release_at(10, 0), 510);
        assert_eq!(exact.release_at(10, 900), 900);
    }
}
