//! Compiles `src/exact_jpeg/host.c`: the host build of the JPEG arithmetic
//! that the `--decode gpu` kernels compile with NVRTC, so the loader's tests
//! hold it to the loader's own decode (`src/exact_jpeg/mod.rs`).

fn main() {
    println!("cargo::rerun-if-changed=src/exact_jpeg/host.c");
    println!("cargo::rerun-if-changed=src/exact_jpeg/exact_jpeg.h");
    cc::Build::new()
        .file("src/exact_jpeg/host.c")
        .std("c99")
        // The same source must stay clean for NVRTC: a warning here is a
        // build error, not a line cargo hides.
        .warnings_into_errors(true)
        .compile("exact_jpeg_host");
}
