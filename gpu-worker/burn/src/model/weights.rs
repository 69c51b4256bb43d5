//! Loading weight files into a model through `burn::store`, strictly: a
//! tensor the model needs but the file lacks, a tensor the file has but the
//! model does not use, or a wrong shape is an error that names it. Integer
//! bookkeeping tensors (`num_batches_tracked`) are the one tolerated extra.

use std::path::Path;

use burn::store::{ApplyResult, KeyRemapper, ModuleSnapshot, PytorchStore, SafetensorsStore};

use model_families::weights_error::{WeightsError, summarise};

/// Loads `path` into `module`, renaming checkpoint keys by `remap`
/// (regex → replacement) first.
pub(crate) fn load<M: ModuleSnapshot>(
    module: &mut M,
    path: &Path,
    model: &str,
    remap: &[(&str, &str)],
) -> Result<(), WeightsError> {
    if !path.is_file() {
        return Err(WeightsError::NotFound(path.to_path_buf()));
    }
    let remapper =
        KeyRemapper::from_patterns(remap.to_vec()).map_err(|e| WeightsError::Unreadable {
            path: path.to_path_buf(),
            message: format!("bad key pattern: {e}"),
        })?;
    let unreadable = |message: String| WeightsError::Unreadable {
        path: path.to_path_buf(),
        message,
    };
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let result = match extension {
        // `.bin`: a hub repo's `pytorch_model.bin`, the same zip archive.
        "pth" | "pt" | "bin" => {
            let mut store = PytorchStore::from_file(path)
                .remap(remapper)
                .allow_partial(true)
                // Problems come back in the `ApplyResult`, where `check` names them
                // all, rather than as one debug-printed error.
                .validate(false);
            module
                .load_from(&mut store)
                .map_err(|e| unreadable(e.to_string()))?
        }
        "safetensors" => {
            let mut store = SafetensorsStore::from_file(path)
                .with_from_adapter(burn::store::PyTorchToBurnAdapter)
                .remap(remapper)
                .allow_partial(true)
                // Problems come back in the `ApplyResult`, where `check` names them
                // all, rather than as one debug-printed error.
                .validate(false);
            module
                .load_from(&mut store)
                .map_err(|e| unreadable(e.to_string()))?
        }
        _ => return Err(WeightsError::UnknownFormat(path.to_path_buf())),
    };
    check(&result).map_err(|problem| WeightsError::Mismatch {
        path: path.to_path_buf(),
        model: model.to_owned(),
        problem,
    })
}

/// What is wrong with a load, or nothing: the count, the first few
/// problems and a count of the rest, on one line (a file of another model
/// has hundreds).
fn check(result: &ApplyResult) -> Result<(), String> {
    let mut problems: Vec<String> = result.errors.iter().map(ToString::to_string).collect();
    problems.extend(
        result
            .missing
            .iter()
            .map(|(path, _)| format!("{path} is missing")),
    );
    problems.extend(
        result
            .unused
            .iter()
            .filter(|name| !name.ends_with("num_batches_tracked"))
            .map(|name| format!("{name} is not in the model")),
    );
    if problems.is_empty() {
        Ok(())
    } else {
        let context = format!("{} tensors do not match", problems.len());
        Err(summarise(&context, &problems))
    }
}
