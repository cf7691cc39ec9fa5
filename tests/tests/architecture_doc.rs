//! docs/architecture.md's module tables against the files: each crate under crates/ has a section
//! titled with its source folder (`crates/<name>/src`) whose table names every top-level file and
//! module folder in its first column; a folder's row names each file inside it (a `mod.rs` aside,
//! and a `tests/` folder counts for the files in it); and every path the tables name (`x.rs`,
//! `x/`) exists. No PostgreSQL, no binary: this reads files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Paths under `dir`, relative to it: files as `a/b.rs`, folders as `a/`.
fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            let rel = format!("{prefix}{name}/");
            out.insert(rel.clone());
            walk(&e.path(), &rel, out);
        } else if name.ends_with(".rs") {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

/// The backticked words of a text.
fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A word that names a path: `x.rs` or `x/` (letters, digits, `_`, `-`, `/`).
fn is_path(word: &str) -> bool {
    (word.ends_with(".rs") || word.ends_with('/'))
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-/.".contains(c))
}

/// The rows of the table in the section of `doc` whose title names `src`: (first-column entry, row).
fn rows<'a>(doc: &'a str, src: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let title = format!("(`{src}`)");
    let section = doc
        .split("\n## ")
        .find(|s| s.lines().next().is_some_and(|t| t.contains(&title)))?;
    Some(
        section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                let first = l.split(" | ").next().unwrap();
                ticked(first).into_iter().map(move |e| (e, l))
            })
            .collect(),
    )
}

#[test]
fn the_module_tables_name_every_file_and_nothing_else() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut problems = Vec::new();
    let mut crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    assert!(crates.len() >= 3, "{crates:?}");
    for krate in &crates {
        let src = format!("crates/{krate}/src");
        let Some(rows) = rows(&doc, &src) else {
            problems.push(format!("no section titled with (`{src}`)"));
            continue;
        };
        let mut files = BTreeSet::new();
        walk(&root.join(&src), "", &mut files);
        let named: BTreeSet<&str> = rows.iter().map(|(e, _)| *e).collect();
        // Every top-level file and folder has a row.
        for f in files.iter().filter(|f| {
            let inner = f.trim_end_matches('/');
            !inner.contains('/')
        }) {
            if !named.contains(f.as_str()) {
                problems.push(format!("{src}: `{f}` has no row"));
            }
        }
        for (entry, row) in &rows {
            if !files.contains(*entry) {
                problems.push(format!("{src}: the row `{entry}` names no file"));
                continue;
            }
            // A folder's row names what is inside it.
            if entry.ends_with('/') {
                let words: BTreeSet<&str> = ticked(row).into_iter().collect();
                for inner in files.iter().filter_map(|f| f.strip_prefix(entry)) {
                    let base = inner.trim_end_matches('/').rsplit('/').next().unwrap();
                    let base = if inner.ends_with('/') {
                        format!("{base}/")
                    } else {
                        base.to_string()
                    };
                    let in_tests = inner.starts_with("tests/") && inner != "tests/";
                    if inner.is_empty() || base == "mod.rs" || in_tests {
                        continue;
                    }
                    if !words.contains(inner) && !words.contains(base.as_str()) {
                        problems.push(format!("{src}: `{entry}{inner}` is not named in its row"));
                    }
                }
            }
            // Every path a row names exists: in the row's folder, the crate's src, the crate, or
            // anywhere under src by its last part.
            for word in ticked(row).into_iter().filter(|w| is_path(w)) {
                let folder = if entry.ends_with('/') { *entry } else { "" };
                let exists = files.contains(&format!("{folder}{word}"))
                    || files.contains(word)
                    || root.join("crates").join(krate).join(word).exists()
                    || files
                        .iter()
                        .any(|f| f.ends_with(&format!("/{word}")) || f == word);
                if !exists {
                    problems.push(format!(
                        "{src}: the row `{entry}` names `{word}`, which does not exist"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md is out of step with the files:\n{}",
        problems.join("\n")
    );
}
