//! What is wrong with a weight file, for every way of loading one (the
//! CNNs through `burn::store`, the other families by tensor name), and how
//! a list of mismatched tensors is put on one line.

use std::path::PathBuf;

/// A weight file that cannot be used with the chosen model.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file does not exist.
    #[error(
        "weight file {0} does not exist (scripts/fetch-weights.sh fetches real weights; omit --weights for seeded random ones)"
    )]
    NotFound(PathBuf),
    /// Neither `.pth`/`.pt` nor `.safetensors`.
    #[error("weight file {0} has an unknown extension; expected .pth, .pt or .safetensors")]
    UnknownFormat(PathBuf),
    /// The file could not be parsed.
    #[error("cannot read weight file {path}: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        message: String,
    },
    /// The file does not fit the model.
    #[error("weight file {path} does not fit model {model}: {problem}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The model's name.
        model: String,
        /// Which tensors are missing, extra or mis-shaped.
        problem: String,
    },
}

/// `context: first; second; third; and N more`, on one line.
pub fn summarise(context: &str, problems: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut line = format!(
        "{context}; {}",
        problems[..problems.len().min(SHOWN)].join("; ")
    );
    if problems.len() > SHOWN {
        line.push_str(&format!(
            "; and {} more mismatched tensors",
            problems.len() - SHOWN
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_stay_short() {
        let problems: Vec<String> = (0..200).map(|i| format!("t{i} is missing")).collect();
        let line = summarise("ctx", &problems);
        assert_eq!(
            line,
            "ctx; t0 is missing; t1 is missing; t2 is missing; and 197 more mismatched tensors"
        );
    }
}
