//! The convolutional families' kernels on a [`Gpu`] around cuDNN's
//! convolutions (`kernels/cnn.cu`, `kernels/preprocess.cu`): the NHWC
//! input, explicit padding, the stem's max pool, the unfused convolution
//! epilogue, ConvNeXt's NHWC patches and depthwise 7×7. Each checks its
//! buffers' sizes before it launches.
#![allow(unsafe_code)]

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{Buf, Gpu, GpuError, Norm3, check_len, driver, elementwise, int};

impl Gpu {
    /// The first layer's input from `rows` u8 NCHW images: normalised,
    /// NHWC, `padded` images (the rest the normalised zero pixel).
    pub fn normalize_nhwc(
        &self,
        pixels: &CudaSlice<u8>,
        out: &mut Buf,
        (rows, padded, side): (usize, usize, usize),
        norm: Norm3,
    ) -> Result<(), GpuError> {
        check_len(pixels, rows * 3 * side * side, "normalize input");
        check_len(out, padded * 3 * side * side, "normalize output");
        let (r, pd, s) = (int(rows), int(padded), int(side));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("normalize_nhwc_f16"));
        launch
            .arg(pixels)
            .arg(out)
            .arg(&r)
            .arg(&pd)
            .arg(&s)
            .arg(&norm);
        // SAFETY: `normalize_nhwc_f16(src, dst, rows, padded, side, norm)`,
        // a thread per pixel; sizes checked above.
        unsafe { launch.launch(elementwise(padded * side * side)) }
            .map_err(driver("normalize_nhwc_f16"))?;
        Ok(())
    }

    /// NHWC `src` (`n` images of `side × side × c`) into `dst` with zero
    /// padding `[top, left, bottom, right]`; the padded side.
    pub fn pad_nhwc(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c): (usize, usize, usize),
        [top, left, bottom, right]: [usize; 4],
    ) -> Result<usize, GpuError> {
        assert_eq!(top + bottom, left + right, "square padding");
        let out = side + top + bottom;
        check_len(src, n * side * side * c, "pad input");
        check_len(dst, n * out * out * c, "pad output");
        let (ni, s, ci, t, l, o) = (int(n), int(side), int(c), int(top), int(left), int(out));
        let mut launch = self.stream.launch_builder(self.kernel("pad_nhwc_f16"));
        launch
            .arg(src)
            .arg(dst)
            .arg(&ni)
            .arg(&s)
            .arg(&ci)
            .arg(&t)
            .arg(&l)
            .arg(&o);
        // SAFETY: `pad_nhwc_f16(src, dst, n, side, c, top, left, out)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * out * out * c)) }.map_err(driver("pad_nhwc_f16"))?;
        Ok(out)
    }

    /// The 3×3 stride-2 padding-1 max pool of NHWC `src`; the output side.
    pub fn max_pool_3x3_s2(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c): (usize, usize, usize),
    ) -> Result<usize, GpuError> {
        let out = (side - 1) / 2 + 1;
        check_len(src, n * side * side * c, "max pool input");
        check_len(dst, n * out * out * c, "max pool output");
        let (ni, s, ci, o) = (int(n), int(side), int(c), int(out));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("max_pool_3x3_s2_nhwc_f16"));
        launch.arg(src).arg(dst).arg(&ni).arg(&s).arg(&ci).arg(&o);
        // SAFETY: `max_pool_3x3_s2_nhwc_f16(src, dst, n, side, c, out)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(n * out * out * c)) }
            .map_err(driver("max_pool_3x3_s2_nhwc_f16"))?;
        Ok(out)
    }

    /// `y = act(y + bias + residual)` over the first `total` values of `c`
    /// channels (act 0 none, 1 ReLU, 2 ReLU6).
    pub fn conv_epilogue(
        &self,
        y: &mut Buf,
        bias: &Buf,
        residual: Option<&Buf>,
        total: usize,
        c: usize,
        act: i32,
    ) -> Result<(), GpuError> {
        check_len(y, total, "epilogue");
        check_len(bias, c, "epilogue bias");
        if let Some(r) = residual {
            check_len(r, total, "epilogue residual");
        }
        let (t, ci) = (total as i64, int(c));
        // A null pointer where there is no residual.
        let none: u64 = 0;
        let mut launch = self.stream.launch_builder(self.kernel("conv_epilogue_f16"));
        launch.arg(y).arg(bias);
        match residual {
            Some(r) => launch.arg(r),
            None => launch.arg(&none),
        };
        launch.arg(&t).arg(&ci).arg(&act);
        // SAFETY: `conv_epilogue_f16(y, bias, residual, total, c, act)`;
        // sizes checked above, the residual null or `total` long.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("conv_epilogue_f16"))?;
        Ok(())
    }

    /// Non-overlapping `p × p` patches of NHWC `src` as GEMM rows in
    /// (row, column, channel) order.
    pub fn patches_nhwc(
        &self,
        src: &Buf,
        dst: &mut Buf,
        (n, side, c, p): (usize, usize, usize, usize),
    ) -> Result<(), GpuError> {
        check_len(src, n * side * side * c, "patches input");
        check_len(dst, n * side * side * c, "patches output");
        let (ni, s, ci, pi) = (int(n), int(side), int(c), int(p));
        let mut launch = self.stream.launch_builder(self.kernel("patches_nhwc_f16"));
        launch.arg(src).arg(dst).arg(&ni).arg(&s).arg(&ci).arg(&pi);
        // SAFETY: `patches_nhwc_f16(src, dst, n, side, c, p)`: as many
        // values out as in; sizes checked above.
        unsafe { launch.launch(elementwise(n * side * side * c)) }
            .map_err(driver("patches_nhwc_f16"))?;
        Ok(())
    }

    /// ConvNeXt's depthwise 7×7 (padding 3) of NHWC `x` into `y`, taps
    /// `[7, 7, c]`.
    pub fn depthwise7(
        &self,
        x: &Buf,
        (taps, bias): (&Buf, &Buf),
        y: &mut Buf,
        (n, side, c): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        let total = n * side * side * c;
        check_len(x, total, "depthwise input");
        check_len(y, total, "depthwise output");
        check_len(taps, 49 * c, "depthwise taps");
        check_len(bias, c, "depthwise bias");
        let (ni, s, ci) = (int(n), int(side), int(c));
        let mut launch = self
            .stream
            .launch_builder(self.kernel("depthwise7_nhwc_f16"));
        launch
            .arg(x)
            .arg(taps)
            .arg(bias)
            .arg(y)
            .arg(&ni)
            .arg(&s)
            .arg(&ci);
        // SAFETY: `depthwise7_nhwc_f16(x, taps, bias, y, n, side, c)`;
        // sizes checked above.
        unsafe { launch.launch(elementwise(total)) }.map_err(driver("depthwise7_nhwc_f16"))?;
        Ok(())
    }
}
