//! A new user's path: a separate project outside the workspace, with path
//! dependencies on this checkout as the guide's Getting started shows, using
//! only the public API (`tests-integration/tests/fixtures/new-user`). It is built with its own
//! target directory and run on the embedded store, and on the MongoDB server
//! at `MONGODB_URI` when that is set.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `[package]` name in `manifest` (its first `name = "…"` line).
fn package_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    text.lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
            Some(rest.trim().trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| panic!("no package name in {}", manifest.display()))
}

/// `<package> = { path = "…" }` for the crate in `crates/<dir>`, as the guide
/// writes it: keyed by the package name (`tandem-2pc`), whose library keeps
/// the name the code uses (`tandem`).
fn dependency(root: &Path, dir: &str) -> String {
    let path = root.join("crates").join(dir);
    let package = package_name(&path.join("Cargo.toml"));
    format!("{package} = {{ path = {:?} }}", path.display().to_string())
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Writes the project out and builds it; returns its binary.
fn build_project(root: &Path) -> PathBuf {
    let fixture = root.join("tests-integration/tests/fixtures/new-user");
    let work = target_dir(root).join("new-user");
    let project = work.join("shop");
    std::fs::create_dir_all(project.join("src")).unwrap();
    let deps = [
        dependency(root, "tandem"),
        dependency(root, "tandem-mongodb"),
    ]
    .join("\n");
    let manifest = std::fs::read_to_string(fixture.join("Cargo.toml.in"))
        .unwrap()
        .replace("@DEPENDENCIES@", &deps);
    std::fs::write(project.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(fixture.join("src/main.rs"), project.join("src/main.rs")).unwrap();
    // The workspace's lock file: the same versions as the workspace was tested with.
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let target = work.join("target");
    let out = Command::new(cargo)
        .arg("build")
        .arg("--quiet")
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the new project does not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug").join("shop")
}

fn run(binary: &Path, uri: Option<&str>) -> String {
    let mut cmd = Command::new(binary);
    cmd.env_remove("MONGODB_URI");
    if let Some(uri) = uri {
        cmd.env("MONGODB_URI", uri)
            .env("TANDEM_DB", format!("new_user_{}", std::process::id()));
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the new project failed on the {} store:\n{stdout}\n{}",
        if uri.is_some() { "MongoDB" } else { "embedded" },
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_new_project_builds_on_the_public_api_and_runs_on_both_stores() {
    // The workspace root, one above this package.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let binary = build_project(&root);

    let embedded = run(&binary, None);
    assert!(embedded.contains("ann: paid 270"), "{embedded}");
    assert!(
        embedded.contains("bob: out of stock, coupon already used, insufficient funds"),
        "{embedded}"
    );
    assert!(embedded.contains("checkout: all or nothing"), "{embedded}");

    if let Some(uri) = tandem::testing::server::mongodb_uri() {
        let server = run(&binary, Some(&uri));
        assert_eq!(server, embedded.replace("memory", "mongodb"));
        // A second run on the same data: `put` resets the shop.
        assert_eq!(run(&binary, Some(&uri)), server);
    }
}
