//! Prompt templates for zero-shot classification from labels (`--prompt`).

/// open_clip's `OPENAI_IMAGENET_TEMPLATES` (`--prompt imagenet`), in its order,
/// with `{}` for the label.
pub const IMAGENET_TEMPLATES: [&str; 80] = [
    "a bad photo of a {}.",
    "a photo of many {}.",
    "a sculpture of a {}.",
    "a photo of the hard to see {}.",
    "a low resolution photo of the {}.",
    "a rendering of a {}.",
    "graffiti of a {}.",
    "a bad photo of the {}.",
    "a cropped photo of the {}.",
    "a tattoo of a {}.",
    "the embroidered {}.",
    "a photo of a hard to see {}.",
    "a bright photo of a {}.",
    "a photo of a clean {}.",
    "a photo of a dirty {}.",
    "a dark photo of the {}.",
    "a drawing of a {}.",
    "a photo of my {}.",
    "the plastic {}.",
    "a photo of the cool {}.",
    "a close-up photo of a {}.",
    "a black and white photo of the {}.",
    "a painting of the {}.",
    "a painting of a {}.",
    "a pixelated photo of the {}.",
    "a sculpture of the {}.",
    "a bright photo of the {}.",
    "a cropped photo of a {}.",
    "a plastic {}.",
    "a photo of the dirty {}.",
    "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.",
    "a photo of the {}.",
    "a good photo of the {}.",
    "a rendering of the {}.",
    "a {} in a video game.",
    "a photo of one {}.",
    "a doodle of a {}.",
    "a close-up photo of the {}.",
    "a photo of a {}.",
    "the origami {}.",
    "the {} in a video game.",
    "a sketch of a {}.",
    "a doodle of the {}.",
    "a origami {}.",
    "a low resolution photo of a {}.",
    "the toy {}.",
    "a rendition of the {}.",
    "a photo of the clean {}.",
    "a photo of a large {}.",
    "a rendition of a {}.",
    "a photo of a nice {}.",
    "a photo of a weird {}.",
    "a blurry photo of a {}.",
    "a cartoon {}.",
    "art of a {}.",
    "a sketch of the {}.",
    "a embroidered {}.",
    "a pixelated photo of a {}.",
    "itap of the {}.",
    "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.",
    "a plushie {}.",
    "a photo of the nice {}.",
    "a photo of the small {}.",
    "a photo of the weird {}.",
    "the cartoon {}.",
    "art of the {}.",
    "a drawing of the {}.",
    "a photo of the large {}.",
    "a black and white photo of a {}.",
    "the plushie {}.",
    "a dark photo of a {}.",
    "itap of a {}.",
    "graffiti of the {}.",
    "a toy {}.",
    "itap of my {}.",
    "a photo of a cool {}.",
    "a photo of a small {}.",
    "a tattoo of the {}.",
];

/// The template when none is given: open_clip's and CLIP's simplest.
pub const DEFAULT_TEMPLATE: &str = "a photo of a {}.";

/// `template` with every `{}` replaced by `label` (Python's
/// `template.format(label)` for templates with one `{}`).
pub fn fill(template: &str, label: &str) -> String {
    template.replace("{}", label)
}

/// The templates `--prompt` names: `imagenet` for open_clip's 80, else each
/// value as a template, which must hold `{}`. Empty means the default.
pub fn templates(prompts: &[String]) -> Result<Vec<String>, String> {
    if prompts.is_empty() {
        return Ok(vec![DEFAULT_TEMPLATE.to_owned()]);
    }
    let mut out = Vec::new();
    for prompt in prompts {
        if prompt == "imagenet" {
            out.extend(IMAGENET_TEMPLATES.iter().map(|t| (*t).to_owned()));
        } else if prompt.contains("{}") {
            out.push(prompt.clone());
        } else {
            return Err(format!(
                "--prompt {prompt:?} has no {{}} where the label goes (e.g. \"a photo of a {{}}.\"), \
                 and is not \"imagenet\""
            ));
        }
    }
    Ok(out)
}

/// Class embeddings as open_clip's `build_zero_shot_classifier` makes
/// them: each label through every template, the normalised prompt
/// embeddings averaged per label, the mean normalised again. `embed` gives
/// the normalised embeddings of a batch of texts, `dim` floats each.
/// Rows in label order.
pub fn class_embeddings<E>(
    labels: &[String],
    templates: &[String],
    dim: usize,
    mut embed: impl FnMut(&[String]) -> Result<Vec<f32>, E>,
) -> Result<Vec<f32>, E> {
    let mut rows = Vec::with_capacity(labels.len() * dim);
    for label in labels {
        let prompts: Vec<String> = templates.iter().map(|t| fill(t, label)).collect();
        let embeddings = embed(&prompts)?;
        let mut mean = vec![0.0f64; dim];
        for e in embeddings.chunks_exact(dim) {
            for (m, &v) in mean.iter_mut().zip(e) {
                *m += f64::from(v);
            }
        }
        let n = templates.len() as f64;
        let norm = mean.iter().map(|m| (m / n) * (m / n)).sum::<f64>().sqrt();
        rows.extend(mean.iter().map(|m| (m / n / norm) as f32));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_need_a_slot_and_imagenet_is_eighty() {
        assert_eq!(
            templates(&[]).expect("the default"),
            vec![DEFAULT_TEMPLATE.to_owned()]
        );
        assert_eq!(templates(&["imagenet".into()]).expect("imagenet").len(), 80);
        let error = templates(&["a photo".into()]).expect_err("no slot");
        assert!(error.contains("has no {} where the label goes"), "{error}");
        assert_eq!(fill("a {} and a {}", "cat"), "a cat and a cat");
    }

    #[test]
    fn class_rows_are_the_normalised_mean_of_their_prompts() {
        // Two templates whose embeddings are orthogonal unit vectors: the
        // class row is their normalised mean, (1, 1)/√2.
        let rows = class_embeddings(&["x".into()], &["a {}".into(), "b {}".into()], 2, |texts| {
            let rows = texts
                .iter()
                .flat_map(|t| {
                    if t.starts_with('a') {
                        [1.0, 0.0]
                    } else {
                        [0.0, 1.0]
                    }
                })
                .collect::<Vec<f32>>();
            Ok::<_, ()>(rows)
        })
        .expect("infallible");
        let half = std::f32::consts::FRAC_1_SQRT_2;
        assert!(
            (rows[0] - half).abs() < 1e-7 && (rows[1] - half).abs() < 1e-7,
            "{rows:?}"
        );
    }
}
