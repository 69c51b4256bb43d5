/*
 * exact_jpeg.h: libjpeg-turbo's arithmetic after entropy decoding, written
 * once for two compilers. NVRTC compiles it as CUDA C++ for the `--decode
 * gpu` kernels; the host C compiler compiles it for the tests, which hold it
 * to the loader's own libjpeg-turbo decode, byte for byte (CONVENTIONS.md
 * rule 14). What a JPEG becomes after `jpeg_read_coefficients`:
 *
 *   quantised DCT coefficients of one 8x8 block
 *     -> ej_idct_islow       dequantise + accurate integer IDCT
 *                            (jidctint.c jpeg_idct_islow, jddctmgr.c)
 *   samples of each component at its own resolution
 *     -> ej_upsample_at      the upsampler jinit_upsampler picks with
 *                            do_fancy_upsampling = TRUE, libjpeg's default
 *                            and Pillow's (jdsample.c)
 *   full-resolution Y, Cb, Cr (or gray, or RGB)
 *     -> ej_ycc_rgb          ycc_rgb_convert with its tables (jdcolor.c,
 *                            jdcolext.c); gray is replicated
 *                            (gray_rgb_convert), RGB passes (null_convert)
 *
 * Ported from libjpeg-turbo as vendored by mozjpeg-sys 2.2.3, the decoder
 * the loader links; the upstream names are kept in the comments. The merged
 * upsampler (jdmerge.c) is not here: jdmaster.c use_merged_upsample refuses
 * it whenever do_fancy_upsampling is set. libjpeg-turbo's SIMD versions of
 * the IDCT, the fancy upsamplers and the colour conversion give the same
 * bytes as this C for every file a JPEG encoder writes from 8-bit samples.
 *
 * Everything is a pure function over plain arrays, one block, one sample or
 * one pixel at a time, so a kernel calls it per thread and a test in loops.
 * No headers: the fixed-width types are defined here, and the only
 * difference between the two compilers is the qualifier EJ_FN.
 */
#ifndef EXACT_JPEG_H
#define EXACT_JPEG_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/* C++ inline (not static): NVRTC warns of an unused static function. */
#define EJ_FN __host__ __device__ __forceinline__
#else
#define EJ_FN static inline
#endif

typedef unsigned char ej_u8;
typedef short ej_i16;
typedef unsigned short ej_u16;
typedef int ej_i32;
typedef unsigned int ej_u32;
/* JLONG: libjpeg-turbo's `long`, 64 bits where Linux and macOS build it. */
typedef long long ej_i64;
typedef unsigned long long ej_u64;

/* A negative array size fails the build where a type is not its width. */
typedef char ej_i16_is_16_bits[sizeof(ej_i16) == 2 ? 1 : -1];
typedef char ej_i32_is_32_bits[sizeof(ej_i32) == 4 ? 1 : -1];
typedef char ej_i64_is_64_bits[sizeof(ej_i64) == 8 ? 1 : -1];

#define EJ_DCTSIZE 8
#define EJ_DCTSIZE2 64

/* ------------------------------------------------------------------------
 * Dequantisation and the accurate integer IDCT (jidctint.c, jddctmgr.c)
 * ------------------------------------------------------------------------ */

/* jddctmgr.c start_pass: `ismtbl[i] = (ISLOW_MULT_TYPE)qtbl->quantval[i]`.
 * ISLOW_MULT_TYPE is MULTIPLIER, which jmorecfg.h makes `short` when
 * libjpeg-turbo is built WITH_SIMD (as the loader's and Pillow's are), so a
 * 16-bit table entry over 32767 wraps negative, as it does there. Both
 * tables and coefficients are in natural (row-major) order. */
EJ_FN ej_i16 ej_islow_multiplier(ej_u16 quantval) { return (ej_i16)quantval; }

/* IDCT_range_limit(cinfo)[x & RANGE_MASK] (jdct.h, jdmaster.c
 * prepare_range_limit_table): the IDCT's output is centred on 0; the table
 * adds CENTERJSAMPLE (128) and clamps to 0..255, reading only the low ten
 * bits (RANGE_MASK = 1023), so values far outside wrap as the table does. */
EJ_FN ej_u8 ej_idct_range_limit(ej_i64 x)
{
  ej_i32 v = (ej_i32)((ej_u64)x & 1023u); /* (int)x & RANGE_MASK */
  ej_i32 s = v < 512 ? v : v - 1024;      /* the table's signed view */
  s += 128;                               /* + CENTERJSAMPLE */
  return (ej_u8)(s < 0 ? 0 : (s > 255 ? 255 : s));
}

/* CONST_BITS and PASS1_BITS for 8-bit samples, and the FIX() constants of
 * jidctint.c, precomputed there as here. */
#define EJ_CONST_BITS 13
#define EJ_PASS1_BITS 2
#define EJ_FIX_0_298631336 ((ej_i64)2446)
#define EJ_FIX_0_390180644 ((ej_i64)3196)
#define EJ_FIX_0_541196100 ((ej_i64)4433)
#define EJ_FIX_0_765366865 ((ej_i64)6270)
#define EJ_FIX_0_899976223 ((ej_i64)7373)
#define EJ_FIX_1_175875602 ((ej_i64)9633)
#define EJ_FIX_1_501321110 ((ej_i64)12299)
#define EJ_FIX_1_847759065 ((ej_i64)15137)
#define EJ_FIX_1_961570560 ((ej_i64)16069)
#define EJ_FIX_2_053119869 ((ej_i64)16819)
#define EJ_FIX_2_562915447 ((ej_i64)20995)
#define EJ_FIX_3_072711026 ((ej_i64)25172)

/* LEFT_SHIFT (jpegint.h) shifts as unsigned, so a negative value is never
 * undefined; RIGHT_SHIFT is an arithmetic shift; DESCALE (jdct.h) rounds
 * half up. */
EJ_FN ej_i64 ej_left_shift(ej_i64 a, int b) { return (ej_i64)((ej_u64)a << b); }
EJ_FN ej_i64 ej_descale(ej_i64 x, int n) { return (x + ((ej_i64)1 << (n - 1))) >> n; }

/* DEQUANTIZE(coef, quantval): ((ISLOW_MULT_TYPE)(coef)) * (quantval), two
 * shorts multiplied as int. */
EJ_FN ej_i32 ej_dequantize(ej_i16 coef, ej_i16 multiplier)
{
  return (ej_i32)coef * (ej_i32)multiplier;
}

/* jidctint.c jpeg_idct_islow: dequantises one block of coefficients with
 * `multipliers` (ej_islow_multiplier of the component's quantisation
 * table) and writes its 8x8 samples to `out`, row r at out + r * stride.
 * Both zero-AC shortcuts are kept as upstream has them; each gives exactly
 * what the full computation gives. */
EJ_FN void ej_idct_islow(const ej_i16 *coef, const ej_i16 *multipliers, ej_u8 *out,
                         ej_u32 stride)
{
  ej_i64 tmp0, tmp1, tmp2, tmp3;
  ej_i64 tmp10, tmp11, tmp12, tmp13;
  ej_i64 z1, z2, z3, z4, z5;
  ej_i32 workspace[EJ_DCTSIZE2]; /* buffers data between passes */
  int ctr;

  /* Pass 1: process columns from input, store into work array. Results are
   * scaled up by sqrt(8) compared to a true IDCT, and by 2**PASS1_BITS. */
  for (ctr = 0; ctr < EJ_DCTSIZE; ctr++) {
    const ej_i16 *inptr = coef + ctr;
    const ej_i16 *quantptr = multipliers + ctr;
    ej_i32 *wsptr = workspace + ctr;

    if (inptr[8 * 1] == 0 && inptr[8 * 2] == 0 && inptr[8 * 3] == 0 && inptr[8 * 4] == 0 &&
        inptr[8 * 5] == 0 && inptr[8 * 6] == 0 && inptr[8 * 7] == 0) {
      /* AC terms all zero: `int dcval = LEFT_SHIFT(DEQUANTIZE(..), PASS1_BITS)` */
      ej_i32 dcval =
          (ej_i32)ej_left_shift(ej_dequantize(inptr[0], quantptr[0]), EJ_PASS1_BITS);
      int r;
      for (r = 0; r < EJ_DCTSIZE; r++) wsptr[8 * r] = dcval;
      continue;
    }

    /* Even part: reverse the even part of the forward DCT. */
    z2 = ej_dequantize(inptr[8 * 2], quantptr[8 * 2]);
    z3 = ej_dequantize(inptr[8 * 6], quantptr[8 * 6]);

    z1 = (z2 + z3) * EJ_FIX_0_541196100;
    tmp2 = z1 + z3 * (-EJ_FIX_1_847759065);
    tmp3 = z1 + z2 * EJ_FIX_0_765366865;

    z2 = ej_dequantize(inptr[8 * 0], quantptr[8 * 0]);
    z3 = ej_dequantize(inptr[8 * 4], quantptr[8 * 4]);

    tmp0 = ej_left_shift(z2 + z3, EJ_CONST_BITS);
    tmp1 = ej_left_shift(z2 - z3, EJ_CONST_BITS);

    tmp10 = tmp0 + tmp3;
    tmp13 = tmp0 - tmp3;
    tmp11 = tmp1 + tmp2;
    tmp12 = tmp1 - tmp2;

    /* Odd part per figure 8; i0..i3 are y7,y5,y3,y1 respectively. */
    tmp0 = ej_dequantize(inptr[8 * 7], quantptr[8 * 7]);
    tmp1 = ej_dequantize(inptr[8 * 5], quantptr[8 * 5]);
    tmp2 = ej_dequantize(inptr[8 * 3], quantptr[8 * 3]);
    tmp3 = ej_dequantize(inptr[8 * 1], quantptr[8 * 1]);

    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    z4 = tmp1 + tmp3;
    z5 = (z3 + z4) * EJ_FIX_1_175875602; /* sqrt(2) * c3 */

    tmp0 = tmp0 * EJ_FIX_0_298631336; /* sqrt(2) * (-c1+c3+c5-c7) */
    tmp1 = tmp1 * EJ_FIX_2_053119869; /* sqrt(2) * ( c1+c3-c5+c7) */
    tmp2 = tmp2 * EJ_FIX_3_072711026; /* sqrt(2) * ( c1+c3+c5-c7) */
    tmp3 = tmp3 * EJ_FIX_1_501321110; /* sqrt(2) * ( c1+c3-c5-c7) */
    z1 = z1 * (-EJ_FIX_0_899976223);  /* sqrt(2) * ( c7-c3) */
    z2 = z2 * (-EJ_FIX_2_562915447);  /* sqrt(2) * (-c1-c3) */
    z3 = z3 * (-EJ_FIX_1_961570560);  /* sqrt(2) * (-c3-c5) */
    z4 = z4 * (-EJ_FIX_0_390180644);  /* sqrt(2) * ( c5-c3) */

    z3 += z5;
    z4 += z5;

    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;

    /* Final output stage: `(int)DESCALE(.., CONST_BITS - PASS1_BITS)` */
    wsptr[8 * 0] = (ej_i32)ej_descale(tmp10 + tmp3, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 7] = (ej_i32)ej_descale(tmp10 - tmp3, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 1] = (ej_i32)ej_descale(tmp11 + tmp2, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 6] = (ej_i32)ej_descale(tmp11 - tmp2, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 2] = (ej_i32)ej_descale(tmp12 + tmp1, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 5] = (ej_i32)ej_descale(tmp12 - tmp1, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 3] = (ej_i32)ej_descale(tmp13 + tmp0, EJ_CONST_BITS - EJ_PASS1_BITS);
    wsptr[8 * 4] = (ej_i32)ej_descale(tmp13 - tmp0, EJ_CONST_BITS - EJ_PASS1_BITS);
  }

  /* Pass 2: process rows from the work array into the output, descaling by
   * 8 == 2**3 and undoing the PASS1_BITS scaling. */
  for (ctr = 0; ctr < EJ_DCTSIZE; ctr++) {
    const ej_i32 *wsptr = workspace + 8 * ctr;
    ej_u8 *outptr = out + (ej_u64)ctr * stride;

    /* The zero-row test (on unless NO_ZERO_ROW_TEST). */
    if (wsptr[1] == 0 && wsptr[2] == 0 && wsptr[3] == 0 && wsptr[4] == 0 && wsptr[5] == 0 &&
        wsptr[6] == 0 && wsptr[7] == 0) {
      ej_u8 dcval = ej_idct_range_limit(ej_descale((ej_i64)wsptr[0], EJ_PASS1_BITS + 3));
      int c;
      for (c = 0; c < EJ_DCTSIZE; c++) outptr[c] = dcval;
      continue;
    }

    z2 = (ej_i64)wsptr[2];
    z3 = (ej_i64)wsptr[6];

    z1 = (z2 + z3) * EJ_FIX_0_541196100;
    tmp2 = z1 + z3 * (-EJ_FIX_1_847759065);
    tmp3 = z1 + z2 * EJ_FIX_0_765366865;

    tmp0 = ej_left_shift((ej_i64)wsptr[0] + (ej_i64)wsptr[4], EJ_CONST_BITS);
    tmp1 = ej_left_shift((ej_i64)wsptr[0] - (ej_i64)wsptr[4], EJ_CONST_BITS);

    tmp10 = tmp0 + tmp3;
    tmp13 = tmp0 - tmp3;
    tmp11 = tmp1 + tmp2;
    tmp12 = tmp1 - tmp2;

    tmp0 = (ej_i64)wsptr[7];
    tmp1 = (ej_i64)wsptr[5];
    tmp2 = (ej_i64)wsptr[3];
    tmp3 = (ej_i64)wsptr[1];

    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    z4 = tmp1 + tmp3;
    z5 = (z3 + z4) * EJ_FIX_1_175875602;

    tmp0 = tmp0 * EJ_FIX_0_298631336;
    tmp1 = tmp1 * EJ_FIX_2_053119869;
    tmp2 = tmp2 * EJ_FIX_3_072711026;
    tmp3 = tmp3 * EJ_FIX_1_501321110;
    z1 = z1 * (-EJ_FIX_0_899976223);
    z2 = z2 * (-EJ_FIX_2_562915447);
    z3 = z3 * (-EJ_FIX_1_961570560);
    z4 = z4 * (-EJ_FIX_0_390180644);

    z3 += z5;
    z4 += z5;

    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;

    /* `range_limit[(int)DESCALE(.., CONST_BITS + PASS1_BITS + 3) & RANGE_MASK]` */
    outptr[0] = ej_idct_range_limit(ej_descale(tmp10 + tmp3, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[7] = ej_idct_range_limit(ej_descale(tmp10 - tmp3, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[1] = ej_idct_range_limit(ej_descale(tmp11 + tmp2, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[6] = ej_idct_range_limit(ej_descale(tmp11 - tmp2, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[2] = ej_idct_range_limit(ej_descale(tmp12 + tmp1, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[5] = ej_idct_range_limit(ej_descale(tmp12 - tmp1, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[3] = ej_idct_range_limit(ej_descale(tmp13 + tmp0, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
    outptr[4] = ej_idct_range_limit(ej_descale(tmp13 - tmp0, EJ_CONST_BITS + EJ_PASS1_BITS + 3));
  }
}

/* ------------------------------------------------------------------------
 * The same IDCT as libjpeg-turbo's x86 SIMD computes it
 * (simd/x86_64/jidctint-avx2.asm jsimd_idct_islow_avx2; jidctint-sse2.asm
 * gives the same bytes)
 * ------------------------------------------------------------------------ */

/* The SIMD code keeps the algorithm and the constants of jidctint.c but
 * works in 16-bit lanes: dequantisation keeps the low 16 bits of each
 * product (vpmullw), the sums z3 = in7 + in3 and z4 = in5 + in1 and the
 * even part's in0 +- in4 wrap at 16 bits (vpaddw), each pass's outputs
 * saturate to 16 bits (vpackssdw), and the last step saturates to -128..127
 * before adding CENTERJSAMPLE (vpacksswb, vpaddb) where jidctint.c wraps
 * through RANGE_MASK. For every block an encoder makes from 8-bit samples
 * none of that is reached and both functions give the same bytes; for a
 * crafted block (coefficients near the format's limits, large quantisers)
 * they differ, and this one is what the loader's decoder, and Pillow's on
 * x86, computes. */

EJ_FN ej_i32 ej_wrap16(ej_i32 x) { return (ej_i32)(ej_i16)(ej_u16)(ej_u32)x; }
EJ_FN ej_i32 ej_sat16(ej_i32 x) { return x < -32768 ? -32768 : (x > 32767 ? 32767 : x); }

/* The pmaddwd constant pairs of jidctint-avx2.asm. */
#define EJ_F130_F054 (EJ_FIX_0_541196100 + EJ_FIX_0_765366865) /* PW_F130_F054 */
#define EJ_F054_MF130 (EJ_FIX_0_541196100 - EJ_FIX_1_847759065)
#define EJ_MF078_F117 (EJ_FIX_1_175875602 - EJ_FIX_1_961570560) /* PW_MF078_F117 */
#define EJ_F078_F117 (EJ_FIX_1_175875602 - EJ_FIX_0_390180644)
#define EJ_MF060_MF089 (EJ_FIX_0_298631336 - EJ_FIX_0_899976223) /* PW_MF060_MF089 */
#define EJ_MF050_MF256 (EJ_FIX_2_053119869 - EJ_FIX_2_562915447)
#define EJ_F060_MF089 (EJ_FIX_1_501321110 - EJ_FIX_0_899976223) /* PW_MF089_F060 */
#define EJ_F050_MF256 (EJ_FIX_3_072711026 - EJ_FIX_2_562915447)

/* The `dodct` macro on one column (pass 1) or row (pass 2): eight 16-bit
 * inputs, eight 16-bit outputs, `descale` DESCALE_P1 or DESCALE_P2. Every
 * 32-bit sum stays below 2^31 for any 16-bit inputs (the largest,
 * tmp11 + tmp2, is under 2.12e9), so the 32-bit lanes never wrap. */
EJ_FN void ej_simd_dodct(const ej_i32 *in, ej_i32 *out, int descale)
{
  ej_i32 in0 = in[0], in1 = in[1], in2 = in[2], in3 = in[3];
  ej_i32 in4 = in[4], in5 = in[5], in6 = in[6], in7 = in[7];
  ej_i32 round = (ej_i32)1 << (descale - 1); /* PD_DESCALE_P1, PD_DESCALE_P2 */
  ej_i32 tmp0, tmp1, tmp2, tmp3, tmp10, tmp11, tmp12, tmp13, z3, z4, z3s, z4s;

  /* Even part: tmp3 = z2 * (0.541196100 + 0.765366865) + z3 * 0.541196100,
   * tmp2 = z2 * 0.541196100 + z3 * (0.541196100 - 1.847759065). */
  tmp3 = in2 * (ej_i32)EJ_F130_F054 + in6 * (ej_i32)EJ_FIX_0_541196100;
  tmp2 = in2 * (ej_i32)EJ_FIX_0_541196100 + in6 * (ej_i32)EJ_F054_MF130;
  /* (in0 + in4) and (in0 - in4) in 16 bits, then << CONST_BITS */
  tmp0 = ej_wrap16(in0 + in4) * (1 << EJ_CONST_BITS);
  tmp1 = ej_wrap16(in0 - in4) * (1 << EJ_CONST_BITS);
  tmp10 = tmp0 + tmp3;
  tmp13 = tmp0 - tmp3;
  tmp11 = tmp1 + tmp2;
  tmp12 = tmp1 - tmp2;

  /* Odd part: z3 = in7 + in3 and z4 = in5 + in1 in 16 bits;
   * z3 = z3 * (1.175875602 - 1.961570560) + z4 * 1.175875602,
   * z4 = z3 * 1.175875602 + z4 * (1.175875602 - 0.390180644). */
  z3 = ej_wrap16(in7 + in3);
  z4 = ej_wrap16(in5 + in1);
  z3s = z3 * (ej_i32)EJ_MF078_F117 + z4 * (ej_i32)EJ_FIX_1_175875602;
  z4s = z3 * (ej_i32)EJ_FIX_1_175875602 + z4 * (ej_i32)EJ_F078_F117;
  /* tmp0 = tmp0 * (0.298631336 - 0.899976223) + tmp3 * -0.899976223, ... */
  tmp0 = in7 * (ej_i32)EJ_MF060_MF089 + in1 * (ej_i32)(-EJ_FIX_0_899976223) + z3s;
  tmp1 = in5 * (ej_i32)EJ_MF050_MF256 + in3 * (ej_i32)(-EJ_FIX_2_562915447) + z4s;
  tmp3 = in7 * (ej_i32)(-EJ_FIX_0_899976223) + in1 * (ej_i32)EJ_F060_MF089 + z4s;
  tmp2 = in5 * (ej_i32)(-EJ_FIX_2_562915447) + in3 * (ej_i32)EJ_F050_MF256 + z3s;

  /* Final output stage: vpaddd, vpsrad, vpackssdw. */
  out[0] = ej_sat16((tmp10 + tmp3 + round) >> descale);
  out[7] = ej_sat16((tmp10 - tmp3 + round) >> descale);
  out[1] = ej_sat16((tmp11 + tmp2 + round) >> descale);
  out[6] = ej_sat16((tmp11 - tmp2 + round) >> descale);
  out[3] = ej_sat16((tmp13 + tmp0 + round) >> descale);
  out[4] = ej_sat16((tmp13 - tmp0 + round) >> descale);
  out[2] = ej_sat16((tmp12 + tmp1 + round) >> descale);
  out[5] = ej_sat16((tmp12 - tmp1 + round) >> descale);
}

/* jsimd_idct_islow_avx2: the same arguments and layout as ej_idct_islow. */
EJ_FN void ej_idct_islow_simd(const ej_i16 *coef, const ej_i16 *multipliers, ej_u8 *out,
                              ej_u32 stride)
{
  ej_i32 workspace[EJ_DCTSIZE2]; /* pass 1's 16-bit outputs, row-major */
  ej_i32 vec[EJ_DCTSIZE], res[EJ_DCTSIZE];
  int r, c, ac_zero = 1;

  /* Pass 1. The zero test is on the whole block (rows 1..7 of every
   * column), and its shortcut shifts the 16-bit product left in 16 bits
   * (vpsllw), where the full column computation would saturate. */
  for (r = EJ_DCTSIZE; r < EJ_DCTSIZE2; r++)
    if (coef[r] != 0) ac_zero = 0;
  for (c = 0; c < EJ_DCTSIZE; c++) {
    if (ac_zero) {
      ej_i32 dcval = ej_wrap16(ej_wrap16(ej_dequantize(coef[c], multipliers[c])) * 4);
      for (r = 0; r < EJ_DCTSIZE; r++) workspace[r * 8 + c] = dcval;
      continue;
    }
    for (r = 0; r < EJ_DCTSIZE; r++)
      vec[r] = ej_wrap16(ej_dequantize(coef[r * 8 + c], multipliers[r * 8 + c])); /* vpmullw */
    ej_simd_dodct(vec, res, EJ_CONST_BITS - EJ_PASS1_BITS);
    for (r = 0; r < EJ_DCTSIZE; r++) workspace[r * 8 + c] = res[r];
  }

  /* Pass 2 (no zero-row test), then vpacksswb and + CENTERJSAMPLE. */
  for (r = 0; r < EJ_DCTSIZE; r++) {
    ej_u8 *outptr = out + (ej_u64)r * stride;
    ej_simd_dodct(workspace + r * 8, res, EJ_CONST_BITS + EJ_PASS1_BITS + 3);
    for (c = 0; c < EJ_DCTSIZE; c++) {
      ej_i32 v = res[c] < -128 ? -128 : (res[c] > 127 ? 127 : res[c]);
      outptr[c] = (ej_u8)(v + 128);
    }
  }
}

/* ------------------------------------------------------------------------
 * Upsampling (jdsample.c, with do_fancy_upsampling = TRUE)
 * ------------------------------------------------------------------------ */

/* The per-component methods jinit_upsampler chooses at full scale
 * (DCT_scaled_size == min_DCT_scaled_size == 8, so an "input group" is the
 * component's sampling factor and an "output group" the image's maximum). */
#define EJ_UPSAMPLE_FULLSIZE 0   /* fullsize_upsample */
#define EJ_UPSAMPLE_H2V1_FANCY 1 /* h2v1_fancy_upsample (4:2:2) */
#define EJ_UPSAMPLE_H1V2_FANCY 2 /* h1v2_fancy_upsample (4:4:0) */
#define EJ_UPSAMPLE_H2V2_FANCY 3 /* h2v2_fancy_upsample (4:2:0) */
/* h2v1_upsample, h2v2_upsample (box, chosen for 2:1 when the component is
 * at most 2 samples wide) and int_upsample (any other integral ratio, such
 * as 4:1:1): each sample replicated h_expand x v_expand times. */
#define EJ_UPSAMPLE_BOX 4
/* A fractional ratio: libjpeg refuses it (JERR_FRACT_SAMPLE_NOTIMPL). */
#define EJ_UPSAMPLE_UNSUPPORTED 5

/* jinit_upsampler's choice for a component sampled h_samp x v_samp in an
 * image whose largest factors are max_h x max_v, `downsampled_width`
 * samples wide. Sets the box expansions (1 x 1 for the others). */
EJ_FN int ej_upsample_method(int h_samp, int v_samp, int max_h, int max_v,
                             ej_u32 downsampled_width, int *h_expand, int *v_expand)
{
  *h_expand = 1;
  *v_expand = 1;
  if (h_samp == max_h && v_samp == max_v) return EJ_UPSAMPLE_FULLSIZE;
  if (h_samp * 2 == max_h && v_samp == max_v) {
    if (downsampled_width > 2) return EJ_UPSAMPLE_H2V1_FANCY;
    *h_expand = 2; /* h2v1_upsample */
    return EJ_UPSAMPLE_BOX;
  }
  if (h_samp == max_h && v_samp * 2 == max_v) return EJ_UPSAMPLE_H1V2_FANCY;
  if (h_samp * 2 == max_h && v_samp * 2 == max_v) {
    if (downsampled_width > 2) return EJ_UPSAMPLE_H2V2_FANCY;
    *h_expand = 2; /* h2v2_upsample */
    *v_expand = 2;
    return EJ_UPSAMPLE_BOX;
  }
  if (max_h % h_samp == 0 && max_v % v_samp == 0) {
    *h_expand = max_h / h_samp; /* int_upsample */
    *v_expand = max_v / v_samp;
    return EJ_UPSAMPLE_BOX;
  }
  return EJ_UPSAMPLE_UNSUPPORTED;
}

/* jdinput.c initial_setup: downsampled_width = jdiv_round_up(image_width *
 * h_samp_factor, max_h_samp_factor), and the same for the height. */
EJ_FN ej_u32 ej_downsampled_size(ej_u32 image_size, int samp, int max_samp)
{
  return (ej_u32)(((ej_u64)image_size * (ej_u64)samp + (ej_u64)max_samp - 1) / (ej_u64)max_samp);
}

/* One component's IDCT output: `width` x `height` real samples
 * (downsampled_width x downsampled_height), row r at samples + r * stride,
 * and how it is upsampled. */
typedef struct {
  const ej_u8 *samples;
  ej_u32 stride;
  ej_u32 width;
  ej_u32 height;
  int method;
  int h_expand;
  int v_expand;
} ej_component;

/* Sets up component c of an image_width x image_height image from its IDCT
 * output and sampling factors; returns its method, EJ_UPSAMPLE_UNSUPPORTED
 * for a ratio libjpeg refuses. */
EJ_FN int ej_init_component(ej_component *c, const ej_u8 *samples, ej_u32 stride,
                            ej_u32 image_width, ej_u32 image_height, int h_samp, int v_samp,
                            int max_h, int max_v)
{
  c->samples = samples;
  c->stride = stride;
  c->width = ej_downsampled_size(image_width, h_samp, max_h);
  c->height = ej_downsampled_size(image_height, v_samp, max_v);
  c->method = ej_upsample_method(h_samp, v_samp, max_h, max_v, c->width, &c->h_expand,
                                 &c->v_expand);
  return c->method;
}

EJ_FN ej_i32 ej_sample(const ej_component *c, ej_u32 x, ej_u32 y)
{
  return (ej_i32)c->samples[(ej_u64)y * c->stride + x];
}

/* The row above or below `row` in the upsampler's view: jdmainct.c gives
 * the first iMCU row a context row above that duplicates the first sample
 * row (make_funny_pointers), and the last a context row below that
 * duplicates the last real one (set_bottom_pointers). */
EJ_FN ej_u32 ej_context_row(const ej_component *c, ej_u32 row, int below)
{
  if (below) return row + 1 < c->height ? row + 1 : c->height - 1;
  return row > 0 ? row - 1 : 0;
}

/* The sample the upsampler writes at output pixel (x, y) of component c;
 * x < output_width, y < output_height. */
EJ_FN ej_i32 ej_upsample_at(const ej_component *c, ej_u32 x, ej_u32 y)
{
  switch (c->method) {
  case EJ_UPSAMPLE_H2V1_FANCY: {
    /* h2v1_fancy_upsample: 3/4 * nearer sample + 1/4 * further, with the
     * ordered-dither bias (+1 left output, +2 right); the first and last
     * columns are copied. */
    ej_u32 col = x >> 1;
    ej_i32 invalue = ej_sample(c, col, y);
    if ((x & 1) == 0) {
      if (col == 0) return invalue;
      return (invalue * 3 + ej_sample(c, col - 1, y) + 1) >> 2;
    }
    if (col == c->width - 1) return invalue;
    return (invalue * 3 + ej_sample(c, col + 1, y) + 2) >> 2;
  }
  case EJ_UPSAMPLE_H1V2_FANCY: {
    /* h1v2_fancy_upsample: the nearer row * 3 + the next nearer (above for
     * the upper output row, bias 1; below for the lower, bias 2). */
    ej_u32 row = y >> 1;
    int below = (int)(y & 1);
    ej_i32 thiscolsum = ej_sample(c, x, row) * 3 + ej_sample(c, x, ej_context_row(c, row, below));
    return (thiscolsum + (below ? 2 : 1)) >> 2;
  }
  case EJ_UPSAMPLE_H2V2_FANCY: {
    /* h2v2_fancy_upsample: column sums as in h1v2 (no bias), then 3/4 * the
     * nearer column sum + 1/4 * the further, bias 8 left and 7 right; the
     * first column's left output is thiscolsum * 4 + 8, the last column's
     * right output thiscolsum * 4 + 7. */
    ej_u32 row = y >> 1;
    ej_u32 other = ej_context_row(c, row, (int)(y & 1));
    ej_u32 col = x >> 1;
    ej_i32 thiscolsum = ej_sample(c, col, row) * 3 + ej_sample(c, col, other);
    if ((x & 1) == 0) {
      ej_i32 lastcolsum;
      if (col == 0) return (thiscolsum * 4 + 8) >> 4;
      lastcolsum = ej_sample(c, col - 1, row) * 3 + ej_sample(c, col - 1, other);
      return (thiscolsum * 3 + lastcolsum + 8) >> 4;
    } else {
      ej_i32 nextcolsum;
      if (col == c->width - 1) return (thiscolsum * 4 + 7) >> 4;
      nextcolsum = ej_sample(c, col + 1, row) * 3 + ej_sample(c, col + 1, other);
      return (thiscolsum * 3 + nextcolsum + 7) >> 4;
    }
  }
  case EJ_UPSAMPLE_BOX:
    return ej_sample(c, x / (ej_u32)c->h_expand, y / (ej_u32)c->v_expand);
  default: /* EJ_UPSAMPLE_FULLSIZE */
    return ej_sample(c, x, y);
  }
}

/* ------------------------------------------------------------------------
 * Colour conversion (jdcolor.c)
 * ------------------------------------------------------------------------ */

#define EJ_COLOR_YCBCR 0     /* ycc_rgb_convert */
#define EJ_COLOR_GRAYSCALE 1 /* gray_rgb_convert */
#define EJ_COLOR_RGB 2       /* null_convert: an RGB JPEG (Adobe transform 0) */

/* sample_range_limit[x]: x clamped to 0..MAXJSAMPLE. */
EJ_FN ej_u8 ej_range_limit(ej_i32 x) { return (ej_u8)(x < 0 ? 0 : (x > 255 ? 255 : x)); }

/* build_ycc_rgb_table: SCALEBITS = 16, ONE_HALF = 1 << 15, FIX(x) =
 * (JLONG)(x * 65536 + 0.5): FIX(1.40200) = 91881, FIX(1.77200) = 116130,
 * FIX(0.71414) = 46802, FIX(0.34414) = 22554. Entry i is for x = i - 128.
 * Every product fits 32 bits (|x| <= 128). */
#define EJ_SCALEBITS 16
#define EJ_ONE_HALF ((ej_i32)1 << (EJ_SCALEBITS - 1))
EJ_FN ej_i32 ej_cr_r_tab(ej_i32 cr) { return (91881 * (cr - 128) + EJ_ONE_HALF) >> EJ_SCALEBITS; }
EJ_FN ej_i32 ej_cb_b_tab(ej_i32 cb) { return (116130 * (cb - 128) + EJ_ONE_HALF) >> EJ_SCALEBITS; }
EJ_FN ej_i32 ej_cr_g_tab(ej_i32 cr) { return -46802 * (cr - 128); }
/* ONE_HALF is added here so that the inner loop need not add it. */
EJ_FN ej_i32 ej_cb_g_tab(ej_i32 cb) { return -22554 * (cb - 128) + EJ_ONE_HALF; }

/* ycc_rgb_convert_internal (jdcolext.c), one pixel. */
EJ_FN void ej_ycc_rgb(ej_i32 y, ej_i32 cb, ej_i32 cr, ej_u8 *rgb)
{
  rgb[0] = ej_range_limit(y + ej_cr_r_tab(cr));
  rgb[1] = ej_range_limit(y + ((ej_cb_g_tab(cb) + ej_cr_g_tab(cr)) >> EJ_SCALEBITS));
  rgb[2] = ej_range_limit(y + ej_cb_b_tab(cb));
}

/* One output pixel (x, y) from the components' IDCT output: upsampled,
 * then converted to RGB by `color` (EJ_COLOR_*). Gray reads comps[0] only. */
EJ_FN void ej_output_pixel(const ej_component *comps, int color, ej_u32 x, ej_u32 y, ej_u8 *rgb)
{
  ej_i32 c0 = ej_upsample_at(&comps[0], x, y);
  if (color == EJ_COLOR_GRAYSCALE) {
    rgb[0] = rgb[1] = rgb[2] = (ej_u8)c0;
    return;
  }
  {
    ej_i32 c1 = ej_upsample_at(&comps[1], x, y);
    ej_i32 c2 = ej_upsample_at(&comps[2], x, y);
    if (color == EJ_COLOR_RGB) {
      rgb[0] = (ej_u8)c0;
      rgb[1] = (ej_u8)c1;
      rgb[2] = (ej_u8)c2;
    } else {
      ej_ycc_rgb(c0, c1, c2, rgb);
    }
  }
}

/* One output row: `width` RGB pixels of row y. */
EJ_FN void ej_output_row(const ej_component *comps, int color, ej_u32 width, ej_u32 y, ej_u8 *rgb)
{
  ej_u32 x;
  for (x = 0; x < width; x++) ej_output_pixel(comps, color, x, y, rgb + (ej_u64)x * 3);
}

/* ---- Packed coefficients: what the loader threads upload ----
 * A block travels as its nonzero coefficients only: bit k of `mask` says
 * coefficient k (natural order) is not zero, and `values` holds those
 * coefficients in increasing k. The host packs (loader::exact_jpeg::pack);
 * one kernel thread unpacks one block into the 64 coefficients the IDCT
 * reads. */
EJ_FN void ej_unpack_block(ej_u64 mask, const ej_i16 *values, ej_i16 *coef)
{
  int k, n = 0;
  for (k = 0; k < EJ_DCTSIZE2; k++) {
    if ((mask >> k) & 1u) {
      coef[k] = values[n];
      n++;
    } else {
      coef[k] = 0;
    }
  }
}

#endif /* EXACT_JPEG_H */
