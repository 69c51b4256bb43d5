//! A JPEG writer for any quantised coefficients: sequential Huffman
//! (SOF0, or SOF1 with 16-bit quantisation tables) or progressive (SOF2,
//! spectral selection, any scan script), any sampling factors, restart
//! intervals. libjpeg's encoders refuse coefficients beyond what
//! 8-bit samples give (AC magnitudes over 1023); libjpeg's decoder takes
//! them up to 15 bits, and so must the kernels. Flat Huffman tables (every
//! DC category 5 bits, every AC symbol 8 bits) hold every symbol.

/// `jpeg_natural_order`: the natural index of the k-th zigzag coefficient.
pub(super) const NATURAL_ORDER: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// One component to write: its id (1, 2, 3 read as YCbCr; 'R', 'G', 'B'
/// as RGB), sampling, quantisation table (natural order) and the blocks of
/// its MCU-padded grid, row-major, `blocks_wide` to a row.
pub(super) struct CraftedComponent {
    pub(super) id: u8,
    pub(super) h_samp: u8,
    pub(super) v_samp: u8,
    pub(super) quantval: [u16; 64],
    pub(super) blocks_wide: usize,
    pub(super) blocks: Vec<[i16; 64]>,
}

/// The MCU-padded block grid of each component: `(wide, high)`. A lone
/// component is not interleaved: its grid is its own blocks.
pub(super) fn padded_grid(width: u32, height: u32, samp: &[(u8, u8)]) -> Vec<(usize, usize)> {
    let max_h = samp.iter().map(|s| s.0).max().unwrap_or(1) as usize;
    let max_v = samp.iter().map(|s| s.1).max().unwrap_or(1) as usize;
    if samp.len() == 1 {
        return vec![((width as usize).div_ceil(8), (height as usize).div_ceil(8))];
    }
    let mcus_x = (width as usize).div_ceil(8 * max_h);
    let mcus_y = (height as usize).div_ceil(8 * max_v);
    samp.iter()
        .map(|&(h, v)| (mcus_x * h as usize, mcus_y * v as usize))
        .collect()
}

struct BitWriter {
    out: Vec<u8>,
    acc: u32,
    bits: u32,
}

impl BitWriter {
    fn put(&mut self, value: u32, len: u32) {
        for i in (0..len).rev() {
            self.acc = (self.acc << 1) | ((value >> i) & 1);
            self.bits += 1;
            if self.bits == 8 {
                let byte = self.acc as u8;
                self.out.push(byte);
                if byte == 0xFF {
                    self.out.push(0x00); // byte stuffing
                }
                self.acc = 0;
                self.bits = 0;
            }
        }
    }

    /// Pads the last byte with 1-bits, as encoders do before a marker.
    fn flush(&mut self) {
        while self.bits != 0 {
            self.put(1, 1);
        }
    }
}

/// The magnitude category of a value and its bits (JPEG's EXTEND inverse).
fn category(value: i32) -> (u32, u32) {
    let magnitude = value.unsigned_abs();
    let size = 32 - magnitude.leading_zeros();
    let bits = if value < 0 {
        (value - 1) as u32 & ((1 << size) - 1)
    } else {
        value as u32
    };
    (size, bits)
}

/// The AC symbols, in code order: EOB, ZRL, then run/size for sizes 1..=15.
fn ac_symbols() -> Vec<u8> {
    let mut symbols = vec![0x00, 0xF0];
    for run in 0..16u8 {
        for size in 1..16u8 {
            symbols.push((run << 4) | size);
        }
    }
    symbols
}

fn segment(out: &mut Vec<u8>, marker: u8, body: &[u8]) {
    out.extend_from_slice(&[0xFF, marker]);
    out.extend_from_slice(&((body.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(body);
}

/// One scan of a progressive file: its components and spectral band
/// (zigzag positions `start..=end`), all bits at once (no successive
/// approximation). The DC band (0..=0) comes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Scan {
    pub(super) components: Vec<usize>,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Writes the file: sequential (one interleaved scan) without `scans`, or
/// progressive (SOF2) with them. DC coefficients must lie within ±16383 (so
/// a difference fits 15 bits), AC within ±32767.
pub(super) fn write(
    width: u32,
    height: u32,
    components: &[CraftedComponent],
    restart_interval: u16,
    scans: Option<&[Scan]>,
) -> Vec<u8> {
    let mut out = vec![0xFF, 0xD8];
    let wide = components
        .iter()
        .any(|c| c.quantval.iter().any(|&q| q > 255));
    for (index, c) in components.iter().enumerate() {
        let mut body = vec![(u8::from(wide) << 4) | index as u8];
        for &natural in &NATURAL_ORDER {
            let q = c.quantval[natural];
            if wide {
                body.extend_from_slice(&q.to_be_bytes());
            } else {
                body.push(q as u8);
            }
        }
        segment(&mut out, 0xDB, &body);
    }
    let mut sof = vec![8];
    sof.extend_from_slice(&(height as u16).to_be_bytes());
    sof.extend_from_slice(&(width as u16).to_be_bytes());
    sof.push(components.len() as u8);
    for (index, c) in components.iter().enumerate() {
        sof.extend_from_slice(&[c.id, (c.h_samp << 4) | c.v_samp, index as u8]);
    }
    let marker = match (scans.is_some(), wide) {
        (true, _) => 0xC2,
        (false, true) => 0xC1,
        (false, false) => 0xC0,
    };
    segment(&mut out, marker, &sof);
    // Table class and id, the count of codes of each length 1..=16, the
    // symbols: DC categories 0..=15 in 5 bits, AC symbols in 8.
    let mut dc = vec![0x00];
    let mut lengths = [0u8; 16];
    lengths[4] = 16;
    dc.extend_from_slice(&lengths);
    dc.extend(0..16u8);
    segment(&mut out, 0xC4, &dc);
    let symbols = ac_symbols();
    let mut ac = vec![0x10];
    let mut lengths = [0u8; 16];
    lengths[7] = symbols.len() as u8;
    ac.extend_from_slice(&lengths);
    ac.extend_from_slice(&symbols);
    segment(&mut out, 0xC4, &ac);
    if restart_interval > 0 {
        segment(&mut out, 0xDD, &restart_interval.to_be_bytes());
    }
    let sequential = [Scan {
        components: (0..components.len()).collect(),
        start: 0,
        end: 63,
    }];
    for scan in scans.unwrap_or(&sequential) {
        out = write_scan(out, width, height, components, restart_interval, scan);
    }
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// One scan's SOS segment and entropy-coded data, appended to `out`.
fn write_scan(
    out: Vec<u8>,
    width: u32,
    height: u32,
    components: &[CraftedComponent],
    restart_interval: u16,
    scan: &Scan,
) -> Vec<u8> {
    let symbols = ac_symbols();
    let mut ac_code = [0u32; 256];
    for (code, &symbol) in symbols.iter().enumerate() {
        ac_code[symbol as usize] = code as u32;
    }
    let mut out = out;
    let mut sos = vec![scan.components.len() as u8];
    for &ci in &scan.components {
        sos.extend_from_slice(&[components[ci].id, 0x00]);
    }
    sos.extend_from_slice(&[scan.start as u8, scan.end as u8, 0]);
    segment(&mut out, 0xDA, &sos);

    let samp: Vec<(u8, u8)> = components.iter().map(|c| (c.h_samp, c.v_samp)).collect();
    let max_h = samp.iter().map(|s| s.0).max().unwrap_or(1) as usize;
    let max_v = samp.iter().map(|s| s.1).max().unwrap_or(1) as usize;
    // The MCUs: each a list of (component, block index). A scan of one
    // component is not interleaved: its MCUs are its own blocks, those
    // that cover its samples.
    let mcus: Vec<Vec<(usize, usize)>> = if scan.components.len() == 1 {
        let ci = scan.components[0];
        let c = &components[ci];
        let (own_h, own_v) = if components.len() == 1 {
            (max_h, max_v)
        } else {
            (c.h_samp as usize, c.v_samp as usize)
        };
        let wide = (width as usize * own_h).div_ceil(max_h * 8);
        let high = (height as usize * own_v).div_ceil(max_v * 8);
        (0..high)
            .flat_map(|y| (0..wide).map(move |x| vec![(ci, y * c.blocks_wide + x)]))
            .collect()
    } else {
        let grid = padded_grid(width, height, &samp);
        let (h0, v0) = (components[0].h_samp as usize, components[0].v_samp as usize);
        let (mcus_x, mcus_y) = (grid[0].0 / h0, grid[0].1 / v0);
        let mut mcus = Vec::new();
        for my in 0..mcus_y {
            for mx in 0..mcus_x {
                let mut mcu = Vec::new();
                for &ci in &scan.components {
                    let c = &components[ci];
                    let (h, v) = (c.h_samp as usize, c.v_samp as usize);
                    for by in 0..v {
                        for bx in 0..h {
                            mcu.push((ci, (my * v + by) * c.blocks_wide + mx * h + bx));
                        }
                    }
                }
                mcus.push(mcu);
            }
        }
        mcus
    };
    let mut bits = BitWriter {
        out,
        acc: 0,
        bits: 0,
    };
    let mut predictors = vec![0i32; components.len()];
    for (number, mcu) in mcus.iter().enumerate() {
        if restart_interval > 0 && number > 0 && number % restart_interval as usize == 0 {
            bits.flush();
            let marker = 0xD0 + ((number / restart_interval as usize - 1) % 8) as u8;
            bits.out.extend_from_slice(&[0xFF, marker]);
            predictors.iter_mut().for_each(|p| *p = 0);
        }
        for &(ci, block) in mcu {
            let coef = &components[ci].blocks[block];
            if scan.start == 0 {
                let dc = i32::from(coef[0]);
                let (size, value) = category(dc - predictors[ci]);
                predictors[ci] = dc;
                bits.put(size, 5);
                bits.put(value, size);
            }
            if scan.end == 0 {
                continue;
            }
            // AC: run/size symbols over the band, EOB (a run of one block
            // in a progressive scan) after its last nonzero coefficient.
            let mut run = 0;
            for &natural in &NATURAL_ORDER[scan.start.max(1)..=scan.end] {
                let v = i32::from(coef[natural]);
                if v == 0 {
                    run += 1;
                    continue;
                }
                while run > 15 {
                    bits.put(ac_code[0xF0], 8);
                    run -= 16;
                }
                let (size, value) = category(v);
                bits.put(ac_code[((run << 4) | size) as usize], 8);
                bits.put(value, size);
                run = 0;
            }
            if run > 0 {
                bits.put(ac_code[0x00], 8);
            }
        }
    }
    bits.flush();
    bits.out
}
