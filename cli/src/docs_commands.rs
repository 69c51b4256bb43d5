//! The user's guide (README.md and `docs/`) against the real command line:
//! every `pipeline …` command its code blocks show is one this parser
//! takes, so a flag renamed or removed fails here and not in a user's
//! shell, and every page of the guide is reachable from README.
//!
//! What a command then does is each test file's business (`cli/tests/`);
//! this holds the guide to the flags. Synopses (`[--flag]`, `A|B`, `…`)
//! are not commands and are left out.

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::args::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every page under `docs/`, in name order.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ is the user's guide")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(page: &Path) -> String {
    std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

fn file_name(page: &Path) -> String {
    page.file_name()
        .expect("a page has a name")
        .to_string_lossy()
        .into_owned()
}

/// A command the guide shows: its page, its first line there, its words.
struct Shown {
    at: String,
    words: Vec<String>,
}

/// The `pipeline …` commands of a page's code blocks: lines joined at a
/// trailing `\`, a `# comment` cut, `cargo run … --` read as `pipeline`.
fn commands(page: &Path) -> Vec<Shown> {
    let text = read(page);
    let name = file_name(page);
    let mut shown = Vec::new();
    let mut in_block = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let (first, joined) = match pending.take() {
            Some((first, before)) => (first, format!("{before} {trimmed}")),
            None => (i + 1, trimmed.to_string()),
        };
        if let Some(cut) = joined.strip_suffix('\\') {
            pending = Some((first, cut.trim_end().to_string()));
            continue;
        }
        let Some(mut words) = shlex::split(&joined) else {
            panic!("{name}:{first}: unbalanced quotes in {joined:?}");
        };
        if let Some(comment) = words.iter().position(|w| w.starts_with('#')) {
            words.truncate(comment);
        }
        let words = match words.first().map(String::as_str) {
            Some("pipeline") => words,
            Some("cargo") => match words.iter().position(|w| w == "--") {
                Some(dash) => std::iter::once("pipeline".to_string())
                    .chain(words[dash + 1..].iter().cloned())
                    .collect(),
                None => continue,
            },
            _ => continue,
        };
        let synopsis = words
            .iter()
            .any(|w| w.contains('…') || w.starts_with('[') || w.contains('|'));
        if !synopsis {
            shown.push(Shown {
                at: format!("{name}:{first}"),
                words,
            });
        }
    }
    shown
}

#[test]
fn every_command_the_guide_shows_parses() {
    let mut count = 0;
    let mut failures = Vec::new();
    for page in pages() {
        for shown in commands(&page) {
            count += 1;
            if let Err(e) = Cli::try_parse_from(&shown.words) {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or_default().to_string();
                failures.push(format!("{}: {}: {first}", shown.at, shown.words.join(" ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "commands the guide shows that do not parse:\n{}",
        failures.join("\n")
    );
    // README's commands alone are more than this: a guide whose blocks
    // stopped being read would pass with none.
    assert!(count >= 20, "only {count} commands found in the guide");
}

#[test]
fn every_page_of_the_guide_is_linked_and_every_link_is_there() {
    let readme = read(&repo().join("README.md"));
    for page in pages().iter().skip(1) {
        let name = file_name(page);
        assert!(
            readme.contains(&format!("(docs/{name})")),
            "README does not link docs/{name}"
        );
    }
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().expect("a page is in a folder");
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')').unwrap_or(rest.len())];
            let file = target.split('#').next().unwrap_or_default();
            if file.is_empty() || file.contains("://") {
                continue;
            }
            assert!(
                dir.join(file).exists(),
                "{}: link to {target}, which is not there",
                page.display()
            );
        }
    }
}
