//! The 1000 ImageNet class names, in class-index order, as torchvision
//! lists them (`torchvision.models._meta._IMAGENET_CATEGORIES`).

use std::sync::OnceLock;

const RAW: &str = include_str!("imagenet_labels.txt");

static LABELS: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Number of ImageNet classes.
pub const IMAGENET_CLASSES: usize = 1000;

/// The name of ImageNet class `class`, or `None` past the end.
pub fn imagenet_label(class: u32) -> Option<&'static str> {
    imagenet_labels().get(class as usize).copied()
}

/// All labels, in class order (split once, on first use).
pub fn imagenet_labels() -> &'static [&'static str] {
    LABELS.get_or_init(|| RAW.lines().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_complete_and_in_order() {
        assert_eq!(imagenet_labels().len(), IMAGENET_CLASSES);
        assert_eq!(imagenet_label(0), Some("tench"));
        assert_eq!(imagenet_label(281), Some("tabby"));
        assert_eq!(imagenet_label(999), Some("toilet tissue"));
        assert_eq!(imagenet_label(1000), None);
    }
}
