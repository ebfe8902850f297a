//! The random stream of llama.cpp's samplers: the 32-bit Mersenne Twister (`std::mt19937`) and
//! the uniform numbers libstdc++'s `uniform_real_distribution` makes of it, so that a seed
//! gives the draws llama.cpp gives for it.

/// Words of state.
const N: usize = 624;
/// Offset of the word mixed in when the state is regenerated.
const M: usize = 397;

/// `std::mt19937`: MT19937 with the standard's parameters and seeding.
#[derive(Clone)]
pub(crate) struct Mt19937 {
    state: [u32; N],
    /// The next word of `state` to temper; `N` when the state must be regenerated.
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mt19937 {{ index: {} }}", self.index)
    }
}

impl Mt19937 {
    /// The generator `std::mt19937(seed)` makes.
    pub(crate) fn new(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Self { state, index: N }
    }

    /// The next 32-bit output.
    pub(crate) fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.regenerate();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn regenerate(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7fff_ffff);
            let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
            self.state[i] = self.state[(i + M) % N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// A double in `[0, 1)` as `std::uniform_real_distribution<double>(0, 1)` draws it with
    /// libstdc++ (`generate_canonical<double, 53>`: two outputs, the first the low word).
    pub(crate) fn uniform_f64(&mut self) -> f64 {
        const R: f64 = 4_294_967_296.0; // 2^32
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let v = (lo + hi * R) / (R * R);
        if v >= 1.0 { 1.0 - f64::EPSILON / 2.0 } else { v }
    }

    /// A float in `[0, 1)` as `std::uniform_real_distribution<float>(0, 1)` draws it with
    /// libstdc++ (`generate_canonical<float, 24>`: one output, rounded to a float first).
    pub(crate) fn uniform_f32(&mut self) -> f32 {
        let v = self.next_u32() as f32 / 4_294_967_296.0f32;
        if v >= 1.0 { 1.0 - f32::EPSILON / 2.0 } else { v }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_known_answer_and_first_outputs() {
        // C++ [rand.predef]: the 10000th output of a default-constructed mt19937 (seed 5489).
        let mut g = Mt19937::new(5489);
        let first = g.next_u32();
        assert_eq!(first, 3_499_211_612);
        let last = (1..10_000).map(|_| g.next_u32()).last();
        assert_eq!(last, Some(4_123_659_995));
    }

    #[test]
    fn uniform_numbers_stay_below_one() {
        let mut g = Mt19937::new(42);
        for _ in 0..10_000 {
            let (d, f) = (g.uniform_f64(), g.uniform_f32());
            assert!((0.0..1.0).contains(&d) && (0.0..1.0).contains(&f), "{d} {f}");
        }
        // The double is made of two outputs, low word first.
        let (mut a, mut b) = (Mt19937::new(7), Mt19937::new(7));
        let (lo, hi) = (f64::from(b.next_u32()), f64::from(b.next_u32()));
        assert_eq!(a.uniform_f64(), (lo + hi * 4_294_967_296.0) / 18_446_744_073_709_551_616.0);
    }
}
