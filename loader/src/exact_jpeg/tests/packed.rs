//! The coefficients packed for the bus: every block comes back from the
//! kernels' unpacking (its host build) as it went in, whether packed after
//! a dense read or row by row as libjpeg gives them.

use super::{block, encode, env_number};
use crate::exact_jpeg::{ComponentCoefficients, PackedComponent, read_coefficients, read_packed};

/// Packing keeps every coefficient: blocks from the crafted space (zero,
/// sparse, dense, at the limits, DC alone) and every component of encoded
/// JPEGs come back from the kernels' unpacking (its host build) as they
/// went in, and a packed block costs what `bytes` says.
#[test]
fn packed_coefficients_unpack_to_the_same_blocks() {
    let seed = env_number("PIPELINE_EXACT_JPEG_SEED", 14);
    let mut rng = fastrand::Rng::with_seed(seed);
    for round in 0..200 {
        let count = rng.usize(0..300);
        let blocks: Vec<[i16; 64]> = (0..count).map(|_| block(&mut rng)).collect();
        let mut component = ComponentCoefficients {
            h_samp: 1,
            v_samp: 1,
            width_in_blocks: u32::try_from(count).expect("small"),
            height_in_blocks: 1,
            quantval: [1; 64],
            blocks,
        };
        if round == 0 {
            component.blocks = vec![[0; 64], [i16::MIN; 64], [-1; 64], [32767; 64]];
        }
        let packed = PackedComponent::pack(&component).expect("packs");
        let nonzero: usize = component
            .blocks
            .iter()
            .map(|b| b.iter().filter(|&&v| v != 0).count())
            .sum();
        assert_eq!(packed.values.len(), nonzero, "round {round}");
        assert_eq!(packed.bytes(), component.blocks.len() * 12 + nonzero * 2);
        assert_eq!(
            packed.unpack(),
            component.blocks,
            "round {round} (seed {seed})"
        );
    }
    let (mut files, mut dense, mut sent) = (0, 0, 0);
    while files < 200 {
        let Some(encoded) = encode(&mut rng) else {
            continue;
        };
        let Ok(coefficients) = read_coefficients(&encoded.bytes) else {
            continue;
        };
        files += 1;
        let streamed = read_packed(&encoded.bytes).expect("reads as the dense read did");
        assert_eq!(
            (streamed.width, streamed.height, streamed.color),
            (coefficients.width, coefficients.height, coefficients.color)
        );
        assert_eq!(streamed.components.len(), coefficients.components.len());
        for (component, plane) in coefficients.components.iter().zip(&streamed.components) {
            let packed = PackedComponent::pack(component).expect("packs");
            assert_eq!(packed.unpack(), component.blocks, "{}", encoded.what);
            assert_eq!(
                plane.packed, packed,
                "{}: packed from libjpeg's rows",
                encoded.what
            );
            assert_eq!(
                (plane.h_samp, plane.v_samp, plane.quantval),
                (component.h_samp, component.v_samp, component.quantval)
            );
            dense += component.blocks.len() * 128;
            sent += packed.bytes();
        }
    }
    assert!(sent < dense, "packing saves bytes: {sent} of {dense}");
}
