//! The README's program is `examples/quickstart.rs`, shown as it is: the code
//! between the example's `readme` anchors must be the README's first `rust`
//! block, so that the front page shows a program that compiles and runs (the
//! examples test runs it).

use std::path::Path;

fn read(relative: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The lines between `// ANCHOR: name` and `// ANCHOR_END: name`, without the
/// anchor lines of any other anchor (as mdBook's `{{#include}}` shows them).
fn anchored(source: &str, name: &str) -> String {
    let (start, end) = (format!("ANCHOR: {name}"), format!("ANCHOR_END: {name}"));
    let mut lines = source.lines().skip_while(|l| !l.trim().ends_with(&start));
    assert!(lines.next().is_some(), "no `{start}`");
    let inside: Vec<&str> = lines
        .take_while(|l| !l.trim().ends_with(&end))
        .filter(|l| !l.contains("ANCHOR: ") && !l.contains("ANCHOR_END: "))
        .collect();
    inside.join("\n")
}

/// The first fenced block of the given language.
fn first_block(markdown: &str, language: &str) -> String {
    let fence = format!("```{language}");
    let mut lines = markdown.lines().skip_while(|l| l.trim_end() != fence);
    assert!(lines.next().is_some(), "no {fence} block");
    let inside: Vec<&str> = lines.take_while(|l| l.trim_end() != "```").collect();
    inside.join("\n")
}

#[test]
fn the_readme_shows_the_quickstart_example_as_it_is() {
    let example = anchored(&read("examples/quickstart.rs"), "readme");
    let readme = first_block(&read("README.md"), "rust");
    assert!(
        readme == example,
        "README.md's first rust block differs from examples/quickstart.rs \
         (between its `readme` anchors, anchor lines left out); copy the example \
         into the README.\n--- README.md\n{readme}\n--- examples/quickstart.rs\n{example}"
    );
}
