// Copies of constants of the tandem crate, which this proc-macro crate cannot
// depend on. `crates/tandem/tests/macro_constants.rs` includes this file and
// compares each with tandem's own: keep it to plain `const` items.

/// The default marker field name: `tandem::change::DEFAULT_MARKER`.
pub(crate) const DEFAULT_MARKER: &str = "pendingTransactions";

/// The sub-document tandem keeps on participant documents: `tandem::change::META_FIELD`.
pub(crate) const META_FIELD: &str = "_tandem";
