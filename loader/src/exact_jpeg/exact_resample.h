/*
 * exact_resample.h: Pillow 13's fixed-point resize (libImaging/Resample.c),
 * the step after the JPEG decode of exact_jpeg.h, written once for NVRTC
 * and the host compiler as that header is. It uses exact_jpeg.h's types
 * and qualifier: NVRTC compiles the two concatenated, and host_resample.c
 * includes exact_jpeg.h before it.
 */
#ifndef EXACT_RESAMPLE_H
#define EXACT_RESAMPLE_H

#ifndef EXACT_JPEG_H
#error "exact_resample.h needs exact_jpeg.h before it"
#endif

/* Pillow resamples separably, one pass per axis that changes size, each
 * output pixel a fixed-point sum over its taps rounded to 8 bits. The
 * weights (precompute_coeffs + normalize_coeffs_8bpc: doubles, and sin()
 * for LANCZOS) are computed on the host, once per size, and handed to the
 * kernels; these are the integer passes. PRECISION_BITS = 32 - 8 - 2. */
#define EJ_PRECISION_BITS (32 - 8 - 2)

/* clip8: the sum's 8-bit value, clipped to 0..255. */
EJ_FN ej_u8 ej_clip8(ej_i32 in)
{
  if (in >= (1 << EJ_PRECISION_BITS << 8)) return 255;
  if (in <= 0) return 0;
  return (ej_u8)(in >> EJ_PRECISION_BITS);
}

/* One output pixel of either pass (ImagingResampleHorizontal_8bpc,
 * ImagingResampleVertical_8bpc): `ss = 1 << (PRECISION_BITS - 1)` plus each
 * tap's channel times its weight, for R, G and B. The taps are `count`
 * pixels from `first`, `tap_stride` bytes apart (3 along a row, a row's
 * bytes down a column). */
EJ_FN void ej_resample_rgb(const ej_u8 *first, ej_u64 tap_stride, const ej_i32 *weights,
                           ej_u32 count, ej_u8 *rgb)
{
  ej_i32 ss0 = 1 << (EJ_PRECISION_BITS - 1), ss1 = ss0, ss2 = ss0;
  ej_u32 x;
  for (x = 0; x < count; x++) {
    const ej_u8 *p = first + x * tap_stride;
    ss0 += (ej_i32)p[0] * weights[x];
    ss1 += (ej_i32)p[1] * weights[x];
    ss2 += (ej_i32)p[2] * weights[x];
  }
  rgb[0] = ej_clip8(ss0);
  rgb[1] = ej_clip8(ss1);
  rgb[2] = ej_clip8(ss2);
}

/* Pillow 13's pass order (ImagingResampleInner): the vertical pass first
 * when the height shrinks by more than twice as many pixels as the width
 * does, the horizontal first otherwise. The 8-bit rounding between the
 * passes makes the order visible. */
EJ_FN int ej_resample_vertical_first(ej_u32 width, ej_u32 height, ej_u32 out_width,
                                     ej_u32 out_height)
{
  ej_i64 shrink_h = (ej_i64)height - (ej_i64)out_height;
  ej_i64 shrink_w = (ej_i64)width - (ej_i64)out_width;
  return shrink_h > 0 && shrink_h > shrink_w * 2;
}

#endif /* EXACT_RESAMPLE_H */
