//! The cuDNN functions the engine calls, bound from the `libcudnn.so.9`
//! that `libs.rs` found, whose sub-libraries it preloaded from the same
//! folder (#40: cudarc's load by `libcudnn.so` took a system cuDNN 9.14
//! over the wheel's 9.19 on the first GPU machine).

use std::ffi::{c_int, c_void};

use cudarc::cudnn::sys::{
    cudaStream_t, cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnConvolutionDescriptor_t,
    cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionMode_t,
    cudnnDataType_t, cudnnFilterDescriptor_t, cudnnHandle_t, cudnnMathType_t,
    cudnnNanPropagation_t, cudnnStatus_t, cudnnTensorDescriptor_t, cudnnTensorFormat_t,
};

use crate::bind::c_functions;
use crate::libs::CudaLib;

c_functions! {
    /// cuDNN's legacy convolution API, as the engine calls it.
    pub(super) struct Cudnn from CudaLib::Cudnn;
    fn cudnnCreate(handle: *mut cudnnHandle_t) -> cudnnStatus_t;
    fn cudnnDestroy(handle: cudnnHandle_t) -> cudnnStatus_t;
    fn cudnnSetStream(handle: cudnnHandle_t, stream: cudaStream_t) -> cudnnStatus_t;
    fn cudnnCreateTensorDescriptor(desc: *mut cudnnTensorDescriptor_t) -> cudnnStatus_t;
    fn cudnnSetTensor4dDescriptor(
        desc: cudnnTensorDescriptor_t,
        format: cudnnTensorFormat_t,
        data_type: cudnnDataType_t,
        n: c_int,
        c: c_int,
        h: c_int,
        w: c_int,
    ) -> cudnnStatus_t;
    fn cudnnDestroyTensorDescriptor(desc: cudnnTensorDescriptor_t) -> cudnnStatus_t;
    fn cudnnCreateFilterDescriptor(desc: *mut cudnnFilterDescriptor_t) -> cudnnStatus_t;
    fn cudnnSetFilter4dDescriptor(
        desc: cudnnFilterDescriptor_t,
        data_type: cudnnDataType_t,
        format: cudnnTensorFormat_t,
        k: c_int,
        c: c_int,
        h: c_int,
        w: c_int,
    ) -> cudnnStatus_t;
    fn cudnnDestroyFilterDescriptor(desc: cudnnFilterDescriptor_t) -> cudnnStatus_t;
    fn cudnnCreateConvolutionDescriptor(desc: *mut cudnnConvolutionDescriptor_t) -> cudnnStatus_t;
    fn cudnnSetConvolution2dDescriptor(
        desc: cudnnConvolutionDescriptor_t,
        pad_h: c_int,
        pad_w: c_int,
        u: c_int,
        v: c_int,
        dilation_h: c_int,
        dilation_w: c_int,
        mode: cudnnConvolutionMode_t,
        compute_type: cudnnDataType_t,
    ) -> cudnnStatus_t;
    fn cudnnSetConvolutionMathType(
        desc: cudnnConvolutionDescriptor_t,
        math: cudnnMathType_t,
    ) -> cudnnStatus_t;
    fn cudnnSetConvolutionGroupCount(
        desc: cudnnConvolutionDescriptor_t,
        groups: c_int,
    ) -> cudnnStatus_t;
    fn cudnnDestroyConvolutionDescriptor(desc: cudnnConvolutionDescriptor_t) -> cudnnStatus_t;
    fn cudnnCreateActivationDescriptor(desc: *mut cudnnActivationDescriptor_t) -> cudnnStatus_t;
    fn cudnnSetActivationDescriptor(
        desc: cudnnActivationDescriptor_t,
        mode: cudnnActivationMode_t,
        nan: cudnnNanPropagation_t,
        coef: f64,
    ) -> cudnnStatus_t;
    fn cudnnDestroyActivationDescriptor(desc: cudnnActivationDescriptor_t) -> cudnnStatus_t;
    fn cudnnGetConvolutionForwardAlgorithmMaxCount(
        handle: cudnnHandle_t,
        count: *mut c_int,
    ) -> cudnnStatus_t;
    fn cudnnGetConvolutionForwardAlgorithm_v7(
        handle: cudnnHandle_t,
        x: cudnnTensorDescriptor_t,
        w: cudnnFilterDescriptor_t,
        conv: cudnnConvolutionDescriptor_t,
        y: cudnnTensorDescriptor_t,
        requested: c_int,
        returned: *mut c_int,
        perf: *mut cudnnConvolutionFwdAlgoPerf_t,
    ) -> cudnnStatus_t;
    fn cudnnGetConvolutionForwardWorkspaceSize(
        handle: cudnnHandle_t,
        x: cudnnTensorDescriptor_t,
        w: cudnnFilterDescriptor_t,
        conv: cudnnConvolutionDescriptor_t,
        y: cudnnTensorDescriptor_t,
        algo: cudnnConvolutionFwdAlgo_t,
        bytes: *mut usize,
    ) -> cudnnStatus_t;
    fn cudnnConvolutionForward(
        handle: cudnnHandle_t,
        alpha: *const c_void,
        x_desc: cudnnTensorDescriptor_t,
        x: *const c_void,
        w_desc: cudnnFilterDescriptor_t,
        w: *const c_void,
        conv: cudnnConvolutionDescriptor_t,
        algo: cudnnConvolutionFwdAlgo_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        beta: *const c_void,
        y_desc: cudnnTensorDescriptor_t,
        y: *mut c_void,
    ) -> cudnnStatus_t;
    fn cudnnConvolutionBiasActivationForward(
        handle: cudnnHandle_t,
        alpha1: *const c_void,
        x_desc: cudnnTensorDescriptor_t,
        x: *const c_void,
        w_desc: cudnnFilterDescriptor_t,
        w: *const c_void,
        conv: cudnnConvolutionDescriptor_t,
        algo: cudnnConvolutionFwdAlgo_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        alpha2: *const c_void,
        z_desc: cudnnTensorDescriptor_t,
        z: *const c_void,
        bias_desc: cudnnTensorDescriptor_t,
        bias: *const c_void,
        act: cudnnActivationDescriptor_t,
        y_desc: cudnnTensorDescriptor_t,
        y: *mut c_void,
    ) -> cudnnStatus_t;
}
