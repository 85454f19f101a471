//! Compile-time behavior of `#[participant]`: every `tests/ui/*.rs` must fail
//! to compile with the errors in its `.stderr` file, except `pass-*.rs`, which
//! must compile and run. Write the `.stderr` files anew with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    let mut files: Vec<_> = std::fs::read_dir("tests/ui")
        .expect("tests/ui exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("pass-") {
            t.pass(&path);
        } else {
            t.compile_fail(&path);
        }
    }
}
