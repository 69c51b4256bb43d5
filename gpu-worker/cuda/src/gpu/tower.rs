//! How the engine runs a family's forward pass: a batch of [`Images`] in,
//! [`DeviceOutputs`] queued on the GPU out, read back once the GPU has
//! them ([`Tower`]).

use super::{Buf, Download, Gpu, GpuError, Norm3};

/// A batch as a model's forward pass takes it: `u8` NCHW images of
/// `side × side`, padded with zero images to `padded` rows (a fixed batch
/// shape: an image's result does not depend on how many came with it),
/// normalised by `norm` on the device.
#[derive(Debug, Clone, Copy)]
pub struct Images<'a> {
    /// The real images.
    pub pixels: &'a [u8],
    /// Rows run.
    pub padded: usize,
    /// Their side.
    pub side: usize,
    /// The model's normalisation.
    pub norm: Norm3,
}

impl Images<'_> {
    /// How many real images (at most `padded`).
    pub fn real(&self) -> usize {
        let real = self.pixels.len() / (3 * self.side * self.side);
        assert!(self.padded >= real, "padding cannot drop rows");
        real
    }
}

/// A family's weights on a GPU, as the engine runs them.
pub trait Tower: Send + Sync {
    /// A pass over `images` queued on the GPU, not waited for.
    fn launch(&self, gpu: &Gpu, images: Images<'_>) -> Result<DeviceOutputs, GpuError>;

    /// A pass over `images`, waited for: `padded` rows of features, and of
    /// logits where the model has a classifier, f32 on the host, as the
    /// plan's `reference` gives them.
    fn forward(
        &self,
        gpu: &Gpu,
        images: Images<'_>,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        self.launch(gpu, images)?.read(gpu)
    }
}

/// A pass's results still on the device, queued: the features (`rows ×
/// width`, L2-normalised on the host when `normalize`) and the logits
/// where the model has a classifier. [`DeviceOutputs::read`] waits for
/// them.
pub struct DeviceOutputs {
    /// `[rows, width]`.
    pub features: Buf,
    /// Rows (the padded batch).
    pub rows: usize,
    /// Feature width.
    pub width: usize,
    /// L2-normalise each feature row once read (the CLIP-like towers).
    pub normalize: bool,
    /// `[rows, classes]` and `classes`.
    pub logits: Option<(Buf, usize)>,
}

impl DeviceOutputs {
    /// The features and logits on the host, once the GPU has them.
    pub fn read(self, gpu: &Gpu) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        self.queue_read(gpu)?.wait(gpu)
    }

    /// Their copies to the host queued right behind the pass, so that
    /// [`PendingRead::wait`] waits for this pass only, not for one queued
    /// after it.
    pub fn queue_read(self, gpu: &Gpu) -> Result<PendingRead, GpuError> {
        let logits = match self.logits {
            Some((buf, classes)) => Some(gpu.queue_download(buf, self.rows * classes)?),
            None => None,
        };
        Ok(PendingRead {
            features: gpu.queue_download(self.features, self.rows * self.width)?,
            logits,
            rows: self.rows,
            width: self.width,
            normalize: self.normalize,
        })
    }
}

/// A pass's results on their way to the host ([`DeviceOutputs::queue_read`]).
pub struct PendingRead {
    features: Download,
    logits: Option<Download>,
    /// Rows (the padded batch).
    pub rows: usize,
    width: usize,
    normalize: bool,
}

impl PendingRead {
    /// The features and logits, f32 on the host, once copied.
    pub fn wait(self, gpu: &Gpu) -> Result<(Vec<f32>, Option<Vec<f32>>), GpuError> {
        let logits = self.logits.map(|l| gpu.wait_download(l)).transpose()?;
        let mut features = gpu.wait_download(self.features)?;
        if self.normalize {
            crate::plan::l2_normalize_rows(&mut features, self.width);
        }
        Ok((features, logits))
    }
}
