//! Compiles `src/exact_jpeg/host.c` and `host_resample.c`: the host build of
//! the JPEG and resize arithmetic that the `--decode gpu` kernels compile
//! with NVRTC, so the loader's tests hold it to the loader's own decode and
//! resize (`src/exact_jpeg/mod.rs`).

fn main() {
    println!("cargo::rerun-if-changed=src/exact_jpeg/host.c");
    println!("cargo::rerun-if-changed=src/exact_jpeg/exact_jpeg.h");
    println!("cargo::rerun-if-changed=src/exact_jpeg/host_resample.c");
    println!("cargo::rerun-if-changed=src/exact_jpeg/exact_resample.h");
    cc::Build::new()
        .file("src/exact_jpeg/host.c")
        .file("src/exact_jpeg/host_resample.c")
        .std("c99")
        // The same source must stay clean for NVRTC: a warning here is a
        // build error, not a line cargo hides.
        .warnings_into_errors(true)
        .compile("exact_jpeg_host");
}
