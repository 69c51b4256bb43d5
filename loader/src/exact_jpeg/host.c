/*
 * host.c: exact_jpeg.h compiled for the host, for the loader's tests and
 * as the CPU reference of the `--decode gpu` kernels. Whole-image loops
 * over the header's per-block and per-pixel functions; the Rust side
 * (exact_jpeg/ffi.rs) passes plain arrays.
 */
#include "exact_jpeg.h"

/* The IDCT of every block of one component. `blocks` holds
 * width_in_blocks x height_in_blocks blocks of 64 coefficients, row-major,
 * each in natural order; `quantval` the component's quantisation table in
 * natural order. Writes width_in_blocks * 8 x height_in_blocks * 8 samples
 * to `samples`, rows width_in_blocks * 8 apart. `simd` chooses
 * ej_idct_islow_simd (libjpeg-turbo's x86 SIMD) over ej_idct_islow
 * (jidctint.c). */
void ej_host_idct_component(const ej_i16 *blocks, ej_u32 width_in_blocks,
                            ej_u32 height_in_blocks, const ej_u16 *quantval, int simd,
                            ej_u8 *samples)
{
  ej_i16 multipliers[EJ_DCTSIZE2];
  ej_u32 stride = width_in_blocks * EJ_DCTSIZE, bx, by;
  int i;
  for (i = 0; i < EJ_DCTSIZE2; i++) multipliers[i] = ej_islow_multiplier(quantval[i]);
  for (by = 0; by < height_in_blocks; by++) {
    for (bx = 0; bx < width_in_blocks; bx++) {
      const ej_i16 *coef = blocks + ((ej_u64)by * width_in_blocks + bx) * EJ_DCTSIZE2;
      ej_u8 *out = samples + (ej_u64)by * EJ_DCTSIZE * stride + (ej_u64)bx * EJ_DCTSIZE;
      if (simd)
        ej_idct_islow_simd(coef, multipliers, out, stride);
      else
        ej_idct_islow(coef, multipliers, out, stride);
    }
  }
}

/* Unpacks `blocks` packed blocks (mask and the offset of its first value
 * in `values` each) into 64 coefficients each, natural order, at `out`. */
void ej_host_unpack_component(const ej_u64 *masks, const ej_u32 *offsets,
                              const ej_i16 *values, ej_u32 blocks, ej_i16 *out)
{
  ej_u32 b;
  for (b = 0; b < blocks; b++)
    ej_unpack_block(masks[b], values + offsets[b], out + (ej_u64)b * EJ_DCTSIZE2);
}

/* Upsamples and colour-converts `num_components` (1 or 3) components'
 * samples to width x height RGB. Component c's samples start at
 * samples[c], rows strides[c] apart, sampled h_samp[c] x v_samp[c];
 * `color` is EJ_COLOR_*. Returns 0, or -1 where a sampling ratio is one
 * libjpeg refuses (nothing is written then). */
int ej_host_to_rgb(int num_components, const ej_u8 *const *samples, const ej_u32 *strides,
                   const int *h_samp, const int *v_samp, int color, ej_u32 width,
                   ej_u32 height, ej_u8 *rgb)
{
  ej_component comps[3];
  int max_h = 1, max_v = 1, c;
  ej_u32 y;
  if (num_components != 1 && num_components != 3) return -1;
  if ((num_components == 1) != (color == EJ_COLOR_GRAYSCALE)) return -1;
  for (c = 0; c < num_components; c++) {
    if (h_samp[c] < 1 || v_samp[c] < 1) return -1;
    if (h_samp[c] > max_h) max_h = h_samp[c];
    if (v_samp[c] > max_v) max_v = v_samp[c];
  }
  for (c = 0; c < num_components; c++) {
    if (ej_init_component(&comps[c], samples[c], strides[c], width, height, h_samp[c],
                          v_samp[c], max_h, max_v) == EJ_UPSAMPLE_UNSUPPORTED)
      return -1;
  }
  for (y = 0; y < height; y++) ej_output_row(comps, color, width, y, rgb + (ej_u64)y * width * 3);
  return 0;
}
