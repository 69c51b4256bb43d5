//! `pipeline models [--json]`: every built-in model with its tasks, input,
//! preprocessing, embedding size, the checkpoint layouts it loads, where
//! its official weights are published and the engines that run it: the
//! registry's rows (`pipeline_core::ModelSpec`) as users read them.

use pipeline_core::{ModelKind, PreprocessSpec, ResizeFilter};
use serde_json::{Value, json};

use crate::exit::Outcome;

/// The tasks a model runs; CLIP's and SigLIP's `classify` is zero-shot,
/// with `--classes FILE` (`zero_shot` in the JSON says so).
fn tasks(model: ModelKind) -> Vec<&'static str> {
    if model.classifies() || model.zero_shot() {
        vec!["classify", "embed"]
    } else {
        vec!["embed"]
    }
}

fn filter_name(filter: ResizeFilter) -> &'static str {
    match filter {
        ResizeFilter::Nearest => "nearest",
        ResizeFilter::Bilinear => "bilinear",
        ResizeFilter::Bicubic => "bicubic",
        ResizeFilter::Lanczos3 => "lanczos",
        ResizeFilter::Box => "box",
    }
}

/// The preprocessing in one line: `resize shorter side to 256 (bilinear), centre crop 224`.
fn describe(spec: &PreprocessSpec) -> String {
    let resize = if spec.square {
        format!(
            "resize to {0}x{0} ({1})",
            spec.resize_shorter,
            filter_name(spec.filter)
        )
    } else {
        format!(
            "resize shorter side to {} ({}), centre crop {}",
            spec.resize_shorter,
            filter_name(spec.filter),
            spec.crop
        )
    };
    let scaled = |v: [f32; 3]| v.map(|x| (f64::from(x) / 255.0 * 1e6).round() / 1e6);
    format!(
        "{resize}, mean {:?}, std {:?}",
        scaled(spec.normalize.mean),
        scaled(spec.normalize.std)
    )
}

/// The text tower, if the model has one here: its context length and
/// tokenizer (`embed-text`, `--classes` labels).
fn text_tower(model: ModelKind) -> Value {
    use gpu_worker::text::TokenizerFamily;
    match gpu_worker::text::text_config(model) {
        Some(text) => json!({
            "context_length": text.context,
            "embedding_dim": text.projection,
            "tokenizer": match text.tokenizer {
                TokenizerFamily::Clip => "open_clip's BPE (built in) for OpenCLIP/OpenAI \
                                          checkpoints, or the tokenizer.json beside a Hugging \
                                          Face checkpoint",
                TokenizerFamily::Siglip => "SentencePiece: the spiece.model (or tokenizer.json) \
                                            beside the checkpoint",
            },
        }),
        None => Value::Null,
    }
}

fn entry(model: ModelKind) -> Value {
    let spec = model.default_preprocess();
    json!({
        "name": model.name(),
        "family": model.family(),
        "tasks": tasks(model),
        "zero_shot": model.zero_shot(),
        "input_size": spec.crop,
        "preprocess": describe(&spec),
        "preprocess_spec": spec,
        "embedding_dim": model.feature_dim(),
        "embedding": model.family().embedding(),
        "checkpoint_layouts": gpu_worker::checkpoint_layouts(model),
        "official_weights": model.spec().official_weights,
        "hub_id": model.hub_id(),
        "engines": model.spec().engines,
        "text_tower": text_tower(model),
    })
}

pub(crate) fn run(json_output: bool) -> Outcome {
    let models: Vec<Value> = ModelKind::ALL.into_iter().map(entry).collect();
    if json_output {
        match serde_json::to_string_pretty(&models) {
            Ok(text) => return crate::exit::print(&(text + "\n")),
            Err(e) => return Outcome::Failed(format!("cannot write JSON: {e}")),
        }
    }
    match table(&models) {
        Ok(text) => crate::exit::print(&text),
        Err(e) => Outcome::Failed(format!("cannot format the model list: {e}")),
    }
}

/// The listing for people: one block per model.
fn table(models: &[Value]) -> Result<String, std::fmt::Error> {
    use std::fmt::Write;
    let mut text = String::new();
    for (model, value) in ModelKind::ALL.into_iter().zip(models) {
        let tasks = if model.zero_shot() {
            "classify*,embed".to_owned()
        } else {
            tasks(model).join(",")
        };
        writeln!(
            text,
            "{:<24} {tasks:<16} input {:>3}  embed {:>4}",
            model.name(),
            value["input_size"],
            model.feature_dim()
        )?;
        let preprocess = value["preprocess"].as_str().unwrap_or("");
        writeln!(text, "    preprocess: {preprocess}")?;
        for layout in gpu_worker::checkpoint_layouts(model) {
            writeln!(text, "    loads:      {layout}")?;
        }
        writeln!(text, "    weights:    {}", model.spec().official_weights)?;
        if let Some(id) = model.hub_id() {
            writeln!(text, "    hub id:     {id} (--model {id})")?;
        }
        if let Some(context) = value["text_tower"]["context_length"].as_u64() {
            let tokenizer = value["text_tower"]["tokenizer"].as_str().unwrap_or("");
            writeln!(text, "    text:       {context} tokens; {tokenizer}")?;
        }
    }
    writeln!(
        text,
        "* zero-shot: --classes \"cat,dog\" (models with a text tower) or --classes FILE \
         (class text embeddings)"
    )?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siglip_resizes_to_a_square_and_clip_crops() {
        let siglip = describe(&ModelKind::SiglipBasePatch16_224.default_preprocess());
        assert!(
            siglip.starts_with("resize to 224x224 (bicubic)"),
            "{siglip}"
        );
        assert!(siglip.contains("mean [0.5, 0.5, 0.5]"), "{siglip}");
        let clip = describe(&ModelKind::ClipVitB32.default_preprocess());
        assert!(
            clip.starts_with("resize shorter side to 224 (bicubic), centre crop 224"),
            "{clip}"
        );
        assert!(clip.contains("0.481455"), "{clip}");
        assert_eq!(tasks(ModelKind::Dinov2Vits14), vec!["embed"]);
        assert_eq!(tasks(ModelKind::ConvnextTiny), vec!["classify", "embed"]);
        assert_eq!(tasks(ModelKind::ClipVitB32), vec!["classify", "embed"]);
    }

    #[test]
    fn clip_and_siglip_list_their_text_tower_and_the_others_none() {
        for (model, context) in [
            (ModelKind::ClipVitB32, 77),
            (ModelKind::ClipVitB16, 77),
            (ModelKind::ClipVitL14, 77),
            (ModelKind::SiglipBasePatch16_224, 64),
        ] {
            let entry = entry(model);
            assert_eq!(entry["text_tower"]["context_length"], context, "{model}");
            assert_eq!(
                entry["text_tower"]["embedding_dim"],
                model.feature_dim(),
                "{model}: text and image embeddings are comparable"
            );
        }
        let siglip = entry(ModelKind::SiglipBasePatch16_224);
        let tokenizer = siglip["text_tower"]["tokenizer"].as_str().unwrap_or("");
        assert!(tokenizer.contains("spiece.model"), "{tokenizer}");
        for model in [ModelKind::Resnet50, ModelKind::Dinov2Vitb14] {
            assert!(entry(model)["text_tower"].is_null(), "{model}");
        }
    }

    /// The models published on the Hugging Face hub list their repo ids,
    /// each one the registry names as their official weights (the ResNets
    /// timm's copies of torchvision's); the others none.
    #[test]
    fn hub_published_models_list_their_repo_ids() {
        let mut listed = 0;
        for model in ModelKind::ALL {
            let entry = entry(model);
            match model.hub_id() {
                Some(id) => {
                    assert_eq!(entry["hub_id"], id);
                    assert!(model.spec().official_weights.contains(id), "{model}");
                    listed += 1;
                }
                None => assert!(entry["hub_id"].is_null(), "{model}"),
            }
        }
        assert_eq!(listed, 12, "ResNet ×5, CLIP ×3, SigLIP, DINOv2 ×3");
    }
}
