//! The cuBLASLt functions the engine calls, bound from the
//! `libcublasLt.so` that `libs.rs` found (`bind.rs`: cudarc's own load by
//! `libcublasLt.so` may take another copy, e.g. a toolkit's).

use std::ffi::{c_int, c_void};

use cudarc::cublaslt::sys::{
    cublasComputeType_t, cublasLtHandle_t, cublasLtMatmulAlgo_t, cublasLtMatmulDesc_t,
    cublasLtMatmulDescAttributes_t, cublasLtMatmulHeuristicResult_t, cublasLtMatmulPreference_t,
    cublasLtMatmulPreferenceAttributes_t, cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t,
    cublasStatus_t, cudaDataType_t, cudaStream_t,
};

use crate::bind::c_functions;
use crate::libs::CudaLib;

c_functions! {
    /// cuBLASLt, as the engine calls it.
    pub(super) struct Lt from CudaLib::CublasLt;
    fn cublasLtCreate(handle: *mut cublasLtHandle_t) -> cublasStatus_t;
    fn cublasLtDestroy(handle: cublasLtHandle_t) -> cublasStatus_t;
    fn cublasLtMatmulDescCreate(
        desc: *mut cublasLtMatmulDesc_t,
        compute: cublasComputeType_t,
        scale: cudaDataType_t,
    ) -> cublasStatus_t;
    fn cublasLtMatmulDescDestroy(desc: cublasLtMatmulDesc_t) -> cublasStatus_t;
    fn cublasLtMatmulDescSetAttribute(
        desc: cublasLtMatmulDesc_t,
        attr: cublasLtMatmulDescAttributes_t,
        buf: *const c_void,
        size: usize,
    ) -> cublasStatus_t;
    fn cublasLtMatrixLayoutCreate(
        layout: *mut cublasLtMatrixLayout_t,
        data_type: cudaDataType_t,
        rows: u64,
        cols: u64,
        ld: i64,
    ) -> cublasStatus_t;
    fn cublasLtMatrixLayoutDestroy(layout: cublasLtMatrixLayout_t) -> cublasStatus_t;
    fn cublasLtMatrixLayoutSetAttribute(
        layout: cublasLtMatrixLayout_t,
        attr: cublasLtMatrixLayoutAttribute_t,
        buf: *const c_void,
        size: usize,
    ) -> cublasStatus_t;
    fn cublasLtMatmulPreferenceCreate(pref: *mut cublasLtMatmulPreference_t) -> cublasStatus_t;
    fn cublasLtMatmulPreferenceDestroy(pref: cublasLtMatmulPreference_t) -> cublasStatus_t;
    fn cublasLtMatmulPreferenceSetAttribute(
        pref: cublasLtMatmulPreference_t,
        attr: cublasLtMatmulPreferenceAttributes_t,
        buf: *const c_void,
        size: usize,
    ) -> cublasStatus_t;
    fn cublasLtMatmulAlgoGetHeuristic(
        handle: cublasLtHandle_t,
        desc: cublasLtMatmulDesc_t,
        a: cublasLtMatrixLayout_t,
        b: cublasLtMatrixLayout_t,
        c: cublasLtMatrixLayout_t,
        d: cublasLtMatrixLayout_t,
        pref: cublasLtMatmulPreference_t,
        requested: c_int,
        results: *mut cublasLtMatmulHeuristicResult_t,
        returned: *mut c_int,
    ) -> cublasStatus_t;
    fn cublasLtMatmul(
        handle: cublasLtHandle_t,
        desc: cublasLtMatmulDesc_t,
        alpha: *const c_void,
        a: *const c_void,
        a_layout: cublasLtMatrixLayout_t,
        b: *const c_void,
        b_layout: cublasLtMatrixLayout_t,
        beta: *const c_void,
        c: *const c_void,
        c_layout: cublasLtMatrixLayout_t,
        d: *mut c_void,
        d_layout: cublasLtMatrixLayout_t,
        algo: *const cublasLtMatmulAlgo_t,
        workspace: *mut c_void,
        workspace_size: usize,
        stream: cudaStream_t,
    ) -> cublasStatus_t;
}
