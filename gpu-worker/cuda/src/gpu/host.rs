//! Page-locked host memory between the host and the GPU (#40 part 3: the
//! H100 profile showed the device idle 30% of a ViT-B/16 pass and 60% of a
//! ResNet-50 one, waiting on the host).
//!
//! **Not yet run on a GPU, so off unless `PIPELINE_CUDA_PINNED=1`**: it
//! was written after the last device call of its session (two reviews, no
//! run). Off, pixels go up with a copy from pageable memory and results
//! come back when the host asks for them, as on the H100 runs of
//! 2026-11-26/27 (`BENCHMARKS.md`). The kit's command to verify it:
//! `PIPELINE_CUDA_PINNED=1 KIT_PACK=1 PARTS=2,3 bash scripts/cuda-kit.sh
//! verify OUT`, parity and speed against the rows without it.
//!
//! - **Pixels in** through two page-locked staging buffers, used in turn. A
//!   copy from pageable memory may first wait for everything already on
//!   the stream (CUDA stages it through its own pinned buffer), so the
//!   next batch's upload waited for the last batch's pass and the device
//!   then waited for the upload. From page-locked memory the copy is
//!   queued and the host goes on to queue the pass. A buffer is written
//!   again only once its last copy is done.
//! - **Results out** queued right behind the pass that makes them, into
//!   page-locked buffers, so that waiting for a pass's results does not
//!   wait for the next pass queued behind it (a copy into pageable memory
//!   is made, in stream order, when the host asks for it).
#![allow(unsafe_code)]

use std::sync::Mutex;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr, DevicePtrMut, PinnedHostSlice, result};
use half::f16;

use super::{Buf, Gpu, GpuError, check_len, driver};

/// At most this many read-back buffers are kept for reuse.
const KEPT_READBACKS: usize = 8;

/// The page-locked buffers a [`Gpu`] keeps.
#[derive(Default)]
pub(super) struct HostBuffers {
    staging: Mutex<Staging>,
    readback: Mutex<Vec<Pinned<f16>>>,
}

#[derive(Default)]
struct Staging {
    slots: [Option<Pinned<u8>>; 2],
    next: usize,
}

/// A page-locked buffer and the event recorded after its last copy.
/// cudarc's own event in [`PinnedHostSlice`] is recorded only under its
/// event tracking, which [`Gpu::open`] turns off; this one is recorded
/// here, after every copy, and waited for before the host touches the
/// buffer and before it is freed.
struct Pinned<T> {
    memory: PinnedHostSlice<T>,
    copied: CudaEvent,
}

impl<T> Pinned<T> {
    fn wait(&self) -> Result<(), GpuError> {
        self.copied
            .synchronize()
            .map_err(driver("waiting for a copy"))
    }
}

impl<T> Drop for Pinned<T> {
    fn drop(&mut self) {
        // The DMA must be done before `memory` is freed (dropped after
        // this). An error here means the context is gone, and with it the
        // copy.
        let _ = self.copied.synchronize();
    }
}

/// A buffer's first values on their way to the host ([`Gpu::queue_download`]).
pub struct Download(Pending);

enum Pending {
    /// Copied into page-locked memory right behind the pass.
    Pinned { pinned: Pinned<f16>, len: usize },
    /// Still on the device: copied when waited for.
    Later { buf: Buf, len: usize },
}

/// Whether pixels and results go through page-locked buffers
/// (`PIPELINE_CUDA_PINNED=1`; see the module's head).
pub(super) fn pinned_transfers() -> bool {
    static PINNED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PINNED.get_or_init(|| std::env::var("PIPELINE_CUDA_PINNED").is_ok_and(|v| v == "1"))
}

impl Gpu {
    fn pinned<T: cudarc::driver::DeviceRepr>(
        &self,
        len: usize,
        flags: u32,
    ) -> Result<Pinned<T>, GpuError> {
        // SAFETY: uninitialised page-locked memory; every caller writes
        // (the host, or a copy it waits for) what it later reads.
        let memory = unsafe { self.ctx.alloc_pinned_with_flags::<T>(len.max(1), flags) }
            .map_err(driver("allocating page-locked memory"))?;
        let copied = self
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC))
            .map_err(driver("creating an event"))?;
        Ok(Pinned { memory, copied })
    }

    /// `bytes` (a batch's pixels) on the device, copied in stream order
    /// from a page-locked staging buffer without waiting for the work
    /// before it.
    pub fn upload_pixels(&self, bytes: &[u8]) -> Result<CudaSlice<u8>, GpuError> {
        if !pinned_transfers() {
            return self
                .stream
                .clone_htod(bytes)
                .map_err(driver("uploading pixels"));
        }
        let mut staging = self
            .host
            .staging
            .lock()
            .map_err(|_| GpuError("the staging buffers' lock was poisoned".into()))?;
        let i = staging.next;
        staging.next = 1 - i;
        let slot = &mut staging.slots[i];
        if slot.as_ref().is_none_or(|s| s.memory.len() < bytes.len()) {
            // The smaller buffer goes first (its drop waits for its copy).
            *slot = None;
            // Write-combined: the host only writes it.
            *slot = Some(self.pinned(
                bytes.len(),
                cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            )?);
        }
        let pinned = slot.as_mut().expect("set above");
        // This buffer's last copy, two batches ago.
        pinned.wait()?;
        let host = &mut pinned
            .memory
            .as_mut_slice()
            .map_err(driver("a staging buffer"))?[..bytes.len()];
        host.copy_from_slice(bytes);
        // SAFETY: the copy below writes every element before a kernel
        // reads any.
        let mut on_device = unsafe { self.stream.alloc::<u8>(bytes.len().max(1)) }
            .map_err(driver("allocating pixels"))?;
        self.ctx
            .bind_to_thread()
            .map_err(driver("the GPU's context"))?;
        {
            let (to, _sync) = on_device.device_ptr_mut(&self.stream);
            // SAFETY: `bytes.len()` bytes from page-locked memory that
            // stays alive and unwritten until `copied` (recorded next) has
            // passed, into a device buffer at least as long.
            unsafe { result::memcpy_htod_async(to, &*host, self.stream.cu_stream()) }
                .map_err(driver("uploading pixels"))?;
        }
        pinned
            .copied
            .record(&self.stream)
            .map_err(driver("recording an upload"))?;
        Ok(on_device)
    }

    /// The first `len` values of `buf` queued for the host, into a
    /// page-locked buffer, behind the work already on the stream;
    /// [`Gpu::wait_download`] waits for that copy only.
    pub fn queue_download(&self, buf: Buf, len: usize) -> Result<Download, GpuError> {
        check_len(&buf, len, "download");
        if !pinned_transfers() {
            return Ok(Download(Pending::Later { buf, len }));
        }
        let kept = {
            let mut kept = self
                .host
                .readback
                .lock()
                .map_err(|_| GpuError("the read-back buffers' lock was poisoned".into()))?;
            kept.iter()
                .position(|p| p.memory.len() >= len)
                .map(|i| kept.swap_remove(i))
        };
        // Cached, not write-combined: the host reads it.
        let mut pinned = match kept {
            Some(pinned) => pinned,
            None => self.pinned(len, 0)?,
        };
        let host = &mut pinned
            .memory
            .as_mut_slice()
            .map_err(driver("a read-back buffer"))?[..len];
        self.ctx
            .bind_to_thread()
            .map_err(driver("the GPU's context"))?;
        {
            let (from, _sync) = buf.device_ptr(&self.stream);
            // SAFETY: `len` values of `buf` (checked above), into the
            // first `len` of a page-locked buffer the host reads only
            // after `copied` (recorded next) has passed, and frees only
            // after it (`Pinned`'s drop).
            unsafe { result::memcpy_dtoh_async(host, from, self.stream.cu_stream()) }
                .map_err(driver("reading results back"))?;
        }
        pinned
            .copied
            .record(&self.stream)
            .map_err(driver("recording a read-back"))?;
        // `buf` is freed in stream order, after the copy.
        Ok(Download(Pending::Pinned { pinned, len }))
    }

    /// A queued download's values as f32, once its copy is done.
    pub fn wait_download(&self, download: Download) -> Result<Vec<f32>, GpuError> {
        let (pinned, len) = match download.0 {
            Pending::Later { buf, len } => return self.download(&buf, len),
            Pending::Pinned { pinned, len } => (pinned, len),
        };
        pinned.wait()?;
        let values = pinned
            .memory
            .as_slice()
            .map_err(driver("reading results back"))?[..len]
            .iter()
            .map(|v| v.to_f32())
            .collect();
        if let Ok(mut kept) = self.host.readback.lock()
            && kept.len() < KEPT_READBACKS
        {
            kept.push(pinned);
        }
        Ok(values)
    }
}
