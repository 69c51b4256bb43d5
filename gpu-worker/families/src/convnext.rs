//! torchvision's ConvNeXt (tiny, small, base): its stages' channels and
//! blocks ([`ConvNextConfig`]) and the canonical tensors it takes.

/// LayerNorm eps of every ConvNeXt norm.
pub const EPS: f64 = 1e-6;

/// Channels and blocks per stage.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvNextConfig {
    /// Channels of each stage.
    pub dims: Vec<usize>,
    /// Blocks of each stage.
    pub depths: Vec<usize>,
    /// Classes of the classifier; 0 for a checkpoint without its head.
    pub classes: usize,
    /// The head's LayerNorm eps: torchvision's 1e-6, a Hugging Face
    /// checkpoint's `layer_norm_eps` (1e-12 unless said; its other norms
    /// are 1e-6 as torchvision's).
    pub head_eps: f64,
}

// head_eps is never NaN: a constant, or a config's checked positive.
impl Eq for ConvNextConfig {}

impl ConvNextConfig {
    /// `convnext_tiny`.
    pub fn tiny() -> Self {
        Self {
            dims: vec![96, 192, 384, 768],
            depths: vec![3, 3, 9, 3],
            classes: 1000,
            head_eps: EPS,
        }
    }

    /// `convnext_small`.
    pub fn small() -> Self {
        Self {
            depths: vec![3, 3, 27, 3],
            ..Self::tiny()
        }
    }

    /// `convnext_base`.
    pub fn base() -> Self {
        Self {
            dims: vec![128, 256, 512, 1024],
            depths: vec![3, 3, 27, 3],
            classes: 1000,
            head_eps: EPS,
        }
    }

    /// Length of the pre-logits features.
    pub fn feature_dim(&self) -> usize {
        *self.dims.last().expect("a ConvNeXt has stages")
    }

    /// Every tensor, torchvision's name and shape.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        let mut t = Vec::new();
        let c0 = self.dims[0];
        t.push(("features.0.0.weight".into(), vec![c0, 3, 4, 4]));
        t.push(("features.0.0.bias".into(), vec![c0]));
        t.push(("features.0.1.weight".into(), vec![c0]));
        t.push(("features.0.1.bias".into(), vec![c0]));
        for (s, (&c, &depth)) in self.dims.iter().zip(&self.depths).enumerate() {
            if s > 0 {
                let prev = self.dims[s - 1];
                let f = 2 * s;
                t.push((format!("features.{f}.0.weight"), vec![prev]));
                t.push((format!("features.{f}.0.bias"), vec![prev]));
                t.push((format!("features.{f}.1.weight"), vec![c, prev, 2, 2]));
                t.push((format!("features.{f}.1.bias"), vec![c]));
            }
            for j in 0..depth {
                let b = format!("features.{}.{j}", 2 * s + 1);
                t.push((format!("{b}.layer_scale"), vec![c, 1, 1]));
                t.push((format!("{b}.block.0.weight"), vec![c, 1, 7, 7]));
                t.push((format!("{b}.block.0.bias"), vec![c]));
                t.push((format!("{b}.block.2.weight"), vec![c]));
                t.push((format!("{b}.block.2.bias"), vec![c]));
                t.push((format!("{b}.block.3.weight"), vec![4 * c, c]));
                t.push((format!("{b}.block.3.bias"), vec![4 * c]));
                t.push((format!("{b}.block.5.weight"), vec![c, 4 * c]));
                t.push((format!("{b}.block.5.bias"), vec![c]));
            }
        }
        let last = self.feature_dim();
        t.push(("classifier.0.weight".into(), vec![last]));
        t.push(("classifier.0.bias".into(), vec![last]));
        if self.classes > 0 {
            t.push(("classifier.2.weight".into(), vec![self.classes, last]));
            t.push(("classifier.2.bias".into(), vec![self.classes]));
        }
        t
    }
}
