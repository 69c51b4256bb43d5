//! A body cut short by the network, where no length was declared, must
//! never become a picture (#26): JPEG decoders happily fill the missing
//! rows with grey. Every cut of a JPEG, PNG and WebP fails to decode (a
//! `decode` record), or, where only bytes after the last pixel were lost
//! (a PNG's checksums and end chunk, which Pillow ignores too), decodes to
//! exactly the whole picture: never to part of one.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, RgbImage};
use pipeline_core::{DecodeLimits, ItemErrorKind, PreprocessSpec};

/// A photo-like picture: smooth gradients with some texture, so each
/// format's body is spread over many bytes.
fn picture() -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_fn(96, 64, |x, y| {
        let t = ((x * 7 + y * 13) % 17) as u8;
        image::Rgb([
            (x * 2) as u8 ^ t,
            (y * 3) as u8,
            ((x + y) as u8).wrapping_mul(5),
        ])
    }))
}

fn encoded(format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    picture().write_to(&mut out, format).expect("encoded");
    out.into_inner()
}

#[test]
fn every_cut_of_a_jpeg_png_or_webp_fails_to_decode() {
    let dir = tempfile::tempdir().expect("temp dir");
    for format in [ImageFormat::Jpeg, ImageFormat::Png, ImageFormat::WebP] {
        let whole = encoded(format);
        let path = dir.path().join("image");
        std::fs::write(&path, &whole).expect("written");
        let spec = PreprocessSpec::default();
        let limits = DecodeLimits::default();
        let reference = loader::decode_rgb(&path, &spec, &limits).expect("the whole file decodes");
        // Cuts everywhere in the first 64 bytes (the headers), then 200
        // spread over the body, and the last bytes.
        let len = whole.len();
        let mut cuts: Vec<usize> = (1..64.min(len)).collect();
        cuts.extend((1..200).map(|i| i * len / 200));
        cuts.extend(len.saturating_sub(4)..len);
        cuts.dedup();
        let mut failed = 0;
        for &cut in &cuts {
            std::fs::write(&path, &whole[..cut]).expect("written");
            match loader::decode_rgb(&path, &spec, &limits) {
                Ok(image) => assert!(
                    image.pixels == reference.pixels,
                    "{format:?} cut at {cut} of {len} bytes decoded to part of a picture"
                ),
                Err(e) => {
                    assert!(
                        matches!(e.kind, ItemErrorKind::Decode | ItemErrorKind::Unsupported),
                        "{format:?} at {cut}: {e:?}"
                    );
                    failed += 1;
                }
            }
        }
        // Only a PNG's last few bytes (Adler-32, CRC, IEND) may go.
        assert!(
            failed + 20 >= cuts.len(),
            "{format:?}: {failed} of {}",
            cuts.len()
        );
    }
}
