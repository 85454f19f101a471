//! The `#[participant]` attribute of tandem. Use it through `tandem::participant`.
//!
//! The expansion is split as in serde_derive: `attr` parses the
//! `#[participant(...)]` options and the `#[serde(...)]` attributes that decide
//! how fields are stored, `model` builds from them a model that keeps the
//! input's spans, `check` checks the rules on the model (one function per
//! rule), and `expand` generates the code.
#![warn(missing_docs)]

use proc_macro::TokenStream;

mod attr;
mod check;
/// Copies of constants of the tandem crate (which a proc-macro crate cannot
/// depend on), pinned to tandem's by a test of tandem.
mod consts;
mod expand;
mod model;

#[cfg(test)]
mod snapshots;

/// Makes a serde document struct a participant document of tandem transactions.
///
/// Place it above `#[derive(Serialize, Deserialize)]`:
///
/// ```ignore
/// #[participant(collection = "accounts")]
/// #[derive(Serialize, Deserialize)]
/// struct Account {
///     #[serde(rename = "_id")]
///     id: String,
///     balance: i64,
/// }
///
/// let debit = Account::change("A").inc_balance(-100).require_balance_gte(100);
/// ```
///
/// It implements `ParticipantDocument` for the struct, and generates the typed
/// change builder `AccountChange` (one method per field change and guard, such
/// as `set_balance`, `inc_balance` and `require_balance_gte`, each recording the
/// field's stored path), the typed field paths `AccountFields`, and
/// `Account::change(id)`, `Account::delete(id)`, `account.insert()` and
/// `Account::fields()`; and reads and writes outside any transaction through
/// a coordinator: `Account::get`, `Account::find`, `Account::in_flight`,
/// `Account::insert_now` and `Account::put`.
///
/// Options of the struct: `collection = "..."` (required), `db = "..."`,
/// `marker = "..."` (default `pendingTransactions`), `crate = "..."` (default
/// `::tandem`), and `embedded` for a struct stored inside documents. Options
/// of a field: `id`, `nested` (an embedded struct, addressed by dotted paths)
/// and `skip`.
///
/// The id is the field stored as `_id`: give it `#[serde(rename = "_id")]`.
/// `#[participant(id)]` only marks it, and is an error on a field that is not
/// stored as `_id`.
///
/// The documentation of the module `tandem::typed` describes the generated
/// API, the options and the rules in full, with examples.
#[proc_macro_attribute]
pub fn participant(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}
