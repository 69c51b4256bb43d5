/*
 * host_resample.c: exact_resample.h compiled for the host, for the loader's
 * tests and as the CPU reference of the resize kernels: Pillow's weights
 * (doubles and sin(), computed once per size on the host, as the kernels
 * will be given them) and the whole two-pass resize of a window over the
 * header's per-pixel function.
 */
#include <math.h>
#include <stdlib.h>

#include "exact_jpeg.h"
#include "exact_resample.h"

/* Pillow's filters (BOX, BILINEAR, BICUBIC, LANCZOS) and supports. */
static double filter_weight(int filter, double x)
{
  switch (filter) {
  case 0: /* box_filter */
    return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0;
  case 1: /* bilinear_filter */
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
  case 2: { /* bicubic_filter, a = -0.5 */
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
  }
  default: { /* lanczos_filter: sinc_filter(x) * sinc_filter(x / 3) */
    double s1, s3, y;
    if (!(-3.0 <= x && x < 3.0)) return 0.0;
    if (x == 0.0) {
      s1 = 1.0;
    } else {
      y = x * 3.14159265358979323846;
      s1 = sin(y) / y;
    }
    if (x / 3 == 0.0) {
      s3 = 1.0;
    } else {
      y = x / 3 * 3.14159265358979323846;
      s3 = sin(y) / y;
    }
    return s1 * s3;
  }
  }
}

static const double filter_support[4] = {0.5, 1.0, 2.0, 3.0};

/* precompute_coeffs + normalize_coeffs_8bpc for a full-size box: per
 * output pixel its first input pixel, tap count and `*ksize` weights.
 * Returns 0, or -1 where memory runs out. The caller frees the arrays. */
int ej_host_coefficients(ej_u32 in_size, ej_u32 out_size, int filter, ej_u32 **bounds,
                         ej_i32 **weights, ej_u32 *ksize)
{
  double scale = (double)in_size / (double)out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = filter_support[filter] * filterscale;
  double ss = 1.0 / filterscale;
  ej_u32 k = (ej_u32)ceil(support) * 2 + 1, xx, x;
  double *kk = (double *)calloc(k, sizeof(double));
  *ksize = k;
  *bounds = (ej_u32 *)calloc((size_t)out_size * 2, sizeof(ej_u32));
  *weights = (ej_i32 *)calloc((size_t)out_size * k, sizeof(ej_i32));
  if (!kk || !*bounds || !*weights) {
    free(kk);
    return -1;
  }
  for (xx = 0; xx < out_size; xx++) {
    double center = (xx + 0.5) * scale, total = 0.0;
    long long xmin = (long long)(center - support + 0.5), xmax;
    ej_u32 count;
    if (xmin < 0) xmin = 0;
    xmax = (long long)(center + support + 0.5);
    if (xmax > (long long)in_size) xmax = in_size;
    count = xmax > xmin ? (ej_u32)(xmax - xmin) : 0;
    for (x = 0; x < count; x++) {
      kk[x] = filter_weight(filter, ((double)x + (double)xmin - center + 0.5) * ss);
      total += kk[x];
    }
    for (x = 0; x < count; x++) {
      double w = total != 0.0 ? kk[x] / total : kk[x];
      double fixed = w * (double)(1u << EJ_PRECISION_BITS);
      (*weights)[(size_t)xx * k + x] = w < 0.0 ? (ej_i32)(-0.5 + fixed) : (ej_i32)(0.5 + fixed);
    }
    (*bounds)[2 * xx] = (ej_u32)xmin;
    (*bounds)[2 * xx + 1] = count;
  }
  free(kk);
  return 0;
}

/* Interleaved RGB: `width` pixels a row, its pixel (0, 0) standing for
 * (first_column, first_row) of the image it was cut from. */
typedef struct {
  const ej_u8 *bytes;
  ej_u32 width, first_column, first_row;
} plane;

static const ej_u8 *at(const plane *p, ej_u32 x, ej_u32 y)
{
  return p->bytes + ((ej_u64)(y - p->first_row) * p->width + (x - p->first_column)) * 3;
}

/* Output columns [x0, x1) of rows [y0, y1) of the horizontal pass. */
static void horizontal(const plane *src, const ej_u32 *bounds, const ej_i32 *weights,
                       ej_u32 ksize, ej_u32 x0, ej_u32 x1, ej_u32 y0, ej_u32 y1, ej_u8 *out)
{
  ej_u32 x, y;
  for (y = y0; y < y1; y++)
    for (x = x0; x < x1; x++)
      ej_resample_rgb(at(src, bounds[2 * x], y), 3, weights + (ej_u64)x * ksize,
                      bounds[2 * x + 1], out + ((ej_u64)(y - y0) * (x1 - x0) + (x - x0)) * 3);
}

/* Output rows [y0, y1) over columns [x0, x1) of the vertical pass. */
static void vertical(const plane *src, const ej_u32 *bounds, const ej_i32 *weights,
                     ej_u32 ksize, ej_u32 x0, ej_u32 x1, ej_u32 y0, ej_u32 y1, ej_u8 *out)
{
  ej_u32 x, y;
  for (y = y0; y < y1; y++)
    for (x = x0; x < x1; x++)
      ej_resample_rgb(at(src, x, bounds[2 * y]), (ej_u64)src->width * 3,
                      weights + (ej_u64)y * ksize, bounds[2 * y + 1],
                      out + ((ej_u64)(y - y0) * (x1 - x0) + (x - x0)) * 3);
}

/* Pillow's Image.resize((out_width, out_height), filter) of width x height
 * RGB `src`, computing only the window (wx, wy, ww, wh) into `dst`
 * (ww pixels a row), as the loader's resize does: the first pass over the
 * rows or columns the second pass's taps read, the second over the window.
 * Returns 0, or -1 where memory runs out. */
int ej_host_resize_rgb(const ej_u8 *src, ej_u32 width, ej_u32 height, ej_u32 out_width,
                       ej_u32 out_height, int filter, ej_u32 wx, ej_u32 wy, ej_u32 ww,
                       ej_u32 wh, ej_u8 *dst)
{
  ej_u32 *cb = NULL, *rb = NULL, ck = 0, rk = 0, x, y;
  ej_i32 *cw = NULL, *rw = NULL;
  ej_u8 *middle = NULL;
  plane source = {src, width, 0, 0};
  int status = 0;
  if (out_width != width && ej_host_coefficients(width, out_width, filter, &cb, &cw, &ck))
    status = -1;
  if (out_height != height && ej_host_coefficients(height, out_height, filter, &rb, &rw, &rk))
    status = -1;
  if (status) {
    /* nothing */
  } else if (!cb && !rb) {
    for (y = 0; y < wh; y++)
      for (x = 0; x < ww * 3; x++) dst[((ej_u64)y * ww) * 3 + x] = at(&source, wx, wy + y)[x];
  } else if (!rb) {
    horizontal(&source, cb, cw, ck, wx, wx + ww, wy, wy + wh, dst);
  } else if (!cb) {
    vertical(&source, rb, rw, rk, wx, wx + ww, wy, wy + wh, dst);
  } else if (ej_resample_vertical_first(width, height, out_width, out_height)) {
    /* The window's rows over the columns its horizontal taps read. */
    ej_u32 r0 = cb[2 * wx], r1 = cb[2 * (wx + ww - 1)] + cb[2 * (wx + ww - 1) + 1];
    plane mid;
    middle = (ej_u8 *)malloc((size_t)(r1 - r0) * wh * 3 + 1);
    if (!middle) {
      status = -1;
    } else {
      vertical(&source, rb, rw, rk, r0, r1, wy, wy + wh, middle);
      mid.bytes = middle;
      mid.width = r1 - r0;
      mid.first_column = r0;
      mid.first_row = wy;
      horizontal(&mid, cb, cw, ck, wx, wx + ww, wy, wy + wh, dst);
    }
  } else {
    /* The window's columns over the rows its vertical taps read. */
    ej_u32 r0 = rb[2 * wy], r1 = rb[2 * (wy + wh - 1)] + rb[2 * (wy + wh - 1) + 1];
    plane mid;
    middle = (ej_u8 *)malloc((size_t)ww * (r1 - r0) * 3 + 1);
    if (!middle) {
      status = -1;
    } else {
      horizontal(&source, cb, cw, ck, wx, wx + ww, r0, r1, middle);
      mid.bytes = middle;
      mid.width = ww;
      mid.first_column = wx;
      mid.first_row = r0;
      vertical(&mid, rb, rw, rk, wx, wx + ww, wy, wy + wh, dst);
    }
  }
  free(middle);
  free(cb);
  free(cw);
  free(rb);
  free(rw);
  return status;
}
