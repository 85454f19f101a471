//! The rules a `#[participant]` input must follow, one function per rule,
//! checked on the built [`Model`] (as serde_derive's `check` module does).
//!
//! Every rule is checked, and every error reported, so that one compilation
//! shows all the mistakes of the input. A rule never changes the model: the
//! generator emits stubs when there is any error.

use proc_macro2::Span;

use crate::attr::Errors;
use crate::consts::META_FIELD;
use crate::model::{self, InputField, Item, Kind, Model, Role};

/// Checks every rule, in the order their errors are shown.
pub(crate) fn check(m: &Model, errors: &mut Errors) {
    check_collection_name(m, errors);
    check_db_name(m, errors);
    check_marker_name(m, errors);
    check_embedded_takes_no_document_options(m, errors);
    check_serde_derives(m, errors);
    check_no_attributes_in_cfg_attr(m, errors);
    check_no_cfg_on_fields(m, errors);
    check_flattened_is_no_map(m, errors);
    check_no_alias(m, errors);
    check_reads_what_it_writes(m, errors);
    check_serde_as_expanded(m, errors);
    check_stored_by_fields(m, errors);
    check_no_deny_unknown_fields(m, errors);
    check_named_struct(m, errors);
    check_no_generics(m, errors);
    check_embedded_has_no_id(m, errors);
    check_id_not_skipped(m, errors);
    check_id_not_nested(m, errors);
    check_marker_field_is_array(m, errors);
    check_marker_field_default(m, errors);
    check_meta_field_reserved(m, errors);
    check_stored_names_addressable(m, errors);
    check_id_stored_as_id(m, errors);
    check_single_id(m, errors);
    check_nested_is_embedded(m, errors);
    check_collection_given(m, errors);
    check_has_id(m, errors);
}

/// The input's fields that the model gave `role`.
fn with_role(m: &Model, role: Role) -> impl Iterator<Item = &InputField> {
    m.input_fields.iter().filter(move |f| f.role == role)
}

/// `collection = "..."` must be a collection name MongoDB accepts (non-empty,
/// no `$` or NUL, not starting with `.`), so that the mistake shows at compile
/// time rather than as a refused transaction.
fn check_collection_name(m: &Model, errors: &mut Errors) {
    let Some(lit) = &m.options.collection else {
        return;
    };
    let name = lit.value();
    let reason = if name.is_empty() {
        Some("is empty")
    } else if name.contains('$') {
        Some("contains `$`")
    } else if name.contains('\0') {
        Some("contains NUL")
    } else if name.starts_with('.') {
        Some("starts with `.`")
    } else {
        None
    };
    if let Some(reason) = reason {
        errors.at(
            lit.span(),
            format_args!("invalid collection name: it {reason}"),
        );
    }
}

/// `db = "..."` must be a database name MongoDB accepts: non-empty (leaving
/// `db` out is how to ask for the default one), without `$ . / \ "`, space or NUL.
fn check_db_name(m: &Model, errors: &mut Errors) {
    let Some(lit) = &m.options.db else {
        return;
    };
    let name = lit.value();
    let bad = ['$', '.', '/', ' ', '\\', '"', '\0'];
    if name.is_empty() {
        errors.at(
            lit.span(),
            "invalid database name: it is empty (leave `db` out to use the coordinator's default database)",
        );
    } else if let Some(c) = name.chars().find(|c| bad.contains(c)) {
        errors.at(
            lit.span(),
            format_args!("invalid database name: it contains {c:?}"),
        );
    }
}

/// `marker = "..."` must name a top-level field tandem may take for its
/// marker array: a non-empty name without `.` or NUL, not starting with `$`,
/// and neither `_id` nor tandem's own sub-document.
fn check_marker_name(m: &Model, errors: &mut Errors) {
    let Some(lit) = &m.options.marker else {
        return;
    };
    let name = lit.value();
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.contains('.') {
        Some("it contains `.`; the marker is a top-level field")
    } else if name.starts_with('$') {
        Some("it starts with `$`")
    } else if name.contains('\0') {
        Some("it contains NUL")
    } else if name == "_id" || name == META_FIELD {
        Some("that field is reserved")
    } else {
        None
    };
    if let Some(reason) = reason {
        errors.at(
            lit.span(),
            format_args!("invalid marker field name: {reason}"),
        );
    }
}

/// An `embedded` struct takes no `collection`, `db` or `marker`: it is stored
/// inside other documents, which have those.
fn check_embedded_takes_no_document_options(m: &Model, errors: &mut Errors) {
    let o = &m.options;
    if let Some(span) = o.embedded {
        if o.collection.is_some() || o.db.is_some() || o.marker.is_some() {
            errors.at(
                span,
                "an `embedded` struct is stored inside other documents: it takes no `collection`, `db` or `marker`",
            );
        }
    }
}

/// The struct must derive `Serialize` and `Deserialize` below the attribute:
/// documents are written and read through serde, and the attribute reads the
/// `#[serde]` attributes to know where fields are stored.
fn check_serde_derives(m: &Model, errors: &mut Errors) {
    if !matches!(m.item, Item::NamedStruct) {
        return;
    }
    let missing = match (m.derives.serialize, m.derives.deserialize) {
        (true, true) => return,
        (false, false) => "`#[derive(Serialize, Deserialize)]`",
        (false, true) => "`#[derive(Serialize)]`",
        (true, false) => "`#[derive(Deserialize)]`",
    };
    errors.at(
        m.ident.span(),
        format_args!(
            "#[participant] needs a serde document struct: add {missing} below #[participant] \
             (it cannot see the attributes above it)"
        ),
    );
}

/// The struct must be stored as its fields: with `#[serde(transparent)]` or
/// `#[serde(into = "...")]` the stored document has other fields than the
/// struct, which the builder could not name.
fn check_stored_by_fields(m: &Model, errors: &mut Errors) {
    if !matches!(m.item, Item::NamedStruct) {
        return;
    }
    if let Some((span, what)) = m.serde.not_by_fields {
        errors.at(
            span,
            format_args!(
                "#[participant] cannot address the fields of a struct serialized with `#[serde({what})]`"
            ),
        );
    }
}

/// No `serde(...)` or `participant(...)` attribute may sit inside a
/// `#[cfg_attr(...)]`, on the struct or a field: the macro reads attributes as
/// written, so it would miss a `rename` that serde applies, and send typed
/// changes to a field serde never reads.
fn check_no_attributes_in_cfg_attr(m: &Model, errors: &mut Errors) {
    let hidden = m.serde.in_cfg_attr.iter().chain(
        m.input_fields
            .iter()
            .filter_map(|f| f.serde.in_cfg_attr.as_ref()),
    );
    for (span, name) in hidden {
        errors.at(
            *span,
            format_args!(
                "#[participant] cannot read a `{name}` attribute inside `cfg_attr`: it would \
                 not see what the attribute says (a rename, a skip), and the typed paths could \
                 name a field serde never writes; write `#[{name}(...)]` without `cfg_attr`"
            ),
        );
    }
}

/// No field may carry a `#[cfg(...)]`: the attribute sees it unevaluated,
/// and would give the field typed changes in a build where serde does not
/// have it (a `set_f` writing a field the struct never reads).
fn check_no_cfg_on_fields(m: &Model, errors: &mut Errors) {
    for f in &m.input_fields {
        if let Some(span) = f.serde.cfg {
            errors.at(
                span,
                format_args!(
                    "#[participant] sees `#[cfg(...)]` on field `{}` unevaluated, and would give \
                     it typed changes in builds without it; gate the whole struct, or keep the \
                     field in every build",
                    f.name
                ),
            );
        }
    }
}

/// A `#[serde(flatten)]` field may not be a map or a document: it would
/// read every field the struct does not name, tandem's own (`_tandem`, the
/// marker) included, and writing it back would write them.
fn check_flattened_is_no_map(m: &Model, errors: &mut Errors) {
    let flattened = m
        .input_fields
        .iter()
        .filter(|f| f.serde.flatten && !f.serde.skipped_both);
    for f in flattened {
        let ty = model::generic_arg(&f.ty, "Option").unwrap_or(&f.ty);
        let map = model::last_segment_name(ty).is_some_and(|name| {
            [
                "HashMap",
                "BTreeMap",
                "IndexMap",
                "Map",
                "Document",
                "RawDocumentBuf",
                "Bson",
                "Value",
            ]
            .contains(&name.as_str())
        });
        if map {
            errors.spanned(
                &f.ty,
                format_args!(
                    "a flattened map (`{}`) would read tandem's own fields of the document \
                     (`{META_FIELD}`, the marker) and write them back; flatten a struct instead",
                    f.name
                ),
            );
        }
    }
}

/// No field may have a `#[serde(alias = ...)]`: the struct would read a
/// name that typed changes do not write, so a change (an increment) would
/// create a second field beside the one read, and the document could no
/// longer be read ("duplicate field").
fn check_no_alias(m: &Model, errors: &mut Errors) {
    for span in m.input_fields.iter().filter_map(|f| f.serde.alias) {
        errors.at(
            span,
            "#[participant] cannot follow `alias`: the struct would read a field under a name \
             that typed changes do not write; rename the stored field instead (a migration)",
        );
    }
}

/// No `rename` or `rename_all` whose `serialize` and `deserialize` sides
/// differ (or with one side alone): the same as an `alias`, the struct
/// would read names that typed changes do not write.
fn check_reads_what_it_writes(m: &Model, errors: &mut Errors) {
    let container = m.serde.read_apart.into_iter();
    for span in container.chain(m.input_fields.iter().filter_map(|f| f.serde.read_apart)) {
        errors.at(
            span,
            "#[participant] cannot follow `serialize` and `deserialize` names apart (or one \
             of them alone): the struct would read fields under names that typed changes do \
             not write; give both sides one name (`rename = \"...\"`)",
        );
    }
}

/// A `#[serde_as(...)]` field attribute must have been expanded (by
/// `#[serde_as]` written above `#[participant]`) into the `serde(with)` it
/// stands for: otherwise the field's stored type is unknown here, and typed
/// increments and guards would assume the Rust type.
fn check_serde_as_expanded(m: &Model, errors: &mut Errors) {
    for span in m.input_fields.iter().filter_map(|f| f.serde.serde_as) {
        errors.at(
            span,
            "#[participant] cannot see how `serde_as` stores this field: write `#[serde_as]` \
             above `#[participant]`, so that it is expanded first",
        );
    }
}

/// A document must not be `#[serde(deny_unknown_fields)]`: tandem adds its
/// marker array and `_tandem` to the stored documents, and reading them back
/// would fail.
fn check_no_deny_unknown_fields(m: &Model, errors: &mut Errors) {
    if !matches!(m.item, Item::NamedStruct) || !m.is_document() {
        return;
    }
    if let Some(span) = m.serde.deny_unknown_fields {
        errors.at(
            span,
            "participant documents carry tandem's own fields (the marker array and `_tandem`), \
             which `deny_unknown_fields` would refuse when they are read: remove it",
        );
    }
}

/// The input must be a struct with named fields: a document is stored as
/// named fields, and the builder's methods are named after them.
fn check_named_struct(m: &Model, errors: &mut Errors) {
    match &m.item {
        Item::NamedStruct => {}
        Item::TupleStruct(fields) => errors.spanned(
            fields,
            "#[participant] needs a struct with named fields: a document is stored as named fields",
        ),
        Item::UnitStruct => errors.at(
            m.ident.span(),
            "#[participant] needs a struct with named fields, not a unit struct",
        ),
        Item::Enum(span) => errors.at(
            *span,
            "#[participant] applies to structs with named fields, not to enums",
        ),
        Item::Union(span) => errors.at(
            *span,
            "#[participant] applies to structs with named fields, not to unions",
        ),
    }
}

/// The struct must not be generic: the generated builder and field paths name
/// the fields' types, which a generic struct leaves open.
fn check_no_generics(m: &Model, errors: &mut Errors) {
    if m.generic {
        errors.spanned(
            &m.generics,
            "#[participant] does not support generic structs: declare a struct with concrete field types",
        );
    }
}

/// An `embedded` struct has no `#[participant(id)]` field: only documents
/// stored in a collection have an id.
fn check_embedded_has_no_id(m: &Model, errors: &mut Errors) {
    if m.is_document() {
        return;
    }
    for f in &m.input_fields {
        if let Some(span) = f.options.id {
            errors.at(span, "an `embedded` struct has no id field: remove `id`");
        }
    }
}

/// The id field cannot be skipped, by `#[participant(skip)]` or by serde: a
/// document is found by its stored `_id`.
fn check_id_not_skipped(m: &Model, errors: &mut Errors) {
    for f in &m.input_fields {
        let Some(id) = f.options.id else {
            continue;
        };
        if let Some(skip) = f.options.skip {
            errors.at(skip, "the id field cannot be skipped");
        } else if f.serde.skipped {
            errors.at(
                id,
                "the id field is skipped by serde: it must be stored as `_id`",
            );
        }
    }
}

/// The id field cannot be `nested`: an id is a whole value, not a document
/// whose fields are changed one by one.
fn check_id_not_nested(m: &Model, errors: &mut Errors) {
    for f in &m.input_fields {
        if let (Some(_), Some(nested)) = (f.options.id, f.options.nested) {
            errors.at(nested, "the id field cannot be `nested`");
        }
    }
}

/// A field stored under the marker's name must be a `Vec<String>`: tandem
/// keeps the ids of pending transactions in that array.
fn check_marker_field_is_array(m: &Model, errors: &mut Errors) {
    let Kind::Document { marker, .. } = &m.kind else {
        return;
    };
    for f in with_role(m, Role::Marker) {
        if model::generic_arg(&f.ty, "Vec").is_none() {
            errors.spanned(
                &f.ty,
                format_args!(
                    "marker field clash: `{}` is stored as `{marker}`, the array where tandem \
                     records pending transactions; declare it as `Vec<String>`, or choose another \
                     marker name with #[participant(marker = \"...\")]",
                    f.name
                ),
            );
        }
    }
}

/// A field stored under the marker's name must have a serde default: the
/// array is absent from documents no transaction has touched, and reading
/// them would fail.
fn check_marker_field_default(m: &Model, errors: &mut Errors) {
    let Kind::Document { marker, .. } = &m.kind else {
        return;
    };
    for f in with_role(m, Role::Marker) {
        if model::generic_arg(&f.ty, "Vec").is_some() && !f.serde.default && !m.serde.default {
            errors.at(
                f.member.span(),
                format_args!(
                    "the marker field `{marker}` is absent from documents no transaction touched \
                     yet: add `#[serde(default)]` to `{}`",
                    f.name
                ),
            );
        }
    }
}

/// No field of a document may be stored as `_tandem`: tandem keeps its own
/// data (lock, pending delete, placeholder) in that sub-document.
fn check_meta_field_reserved(m: &Model, errors: &mut Errors) {
    for f in with_role(m, Role::Meta) {
        errors.at(
            f.member.span(),
            format_args!("`{META_FIELD}` is reserved by tandem for its own data: rename the field"),
        );
    }
}

/// Every stored name must be addressable by a field path (non-empty, no `.`,
/// no NUL, no leading `$`): the builder's changes and guards name the field
/// by its path, which tandem would refuse.
fn check_stored_names_addressable(m: &Model, errors: &mut Errors) {
    for f in with_role(m, Role::Unaddressable) {
        errors.at(
            f.member.span(),
            format_args!(
                "field `{}` is stored as {:?}, which cannot be addressed by a field path \
                 (names must be non-empty, without `.`, NUL or a leading `$`, and inside an \
                 embedded struct not a number with a leading zero)",
                f.name, f.stored
            ),
        );
    }
}

/// A field marked `#[participant(id)]` must be stored as `_id`: MongoDB finds
/// documents by `_id`, and the mark does not rename the field.
fn check_id_stored_as_id(m: &Model, errors: &mut Errors) {
    for f in with_role(m, Role::Id) {
        if let Some(span) = f.options.id {
            if f.stored != "_id" {
                errors.at(
                    span,
                    format_args!(
                        "the id field must be stored as `_id`, but `{}` is stored as `{}`: \
                         add #[serde(rename = \"_id\")]",
                        f.name, f.stored
                    ),
                );
            }
        }
    }
}

/// A document has one id field: one `#[participant(id)]`, and one field
/// stored as `_id` among those not marked.
fn check_single_id(m: &Model, errors: &mut Errors) {
    let (mut marked, mut named) = (false, false);
    for f in with_role(m, Role::Id) {
        match f.options.id {
            Some(span) if marked => errors.at(
                span,
                "duplicate #[participant(id)]: a document has one id field",
            ),
            Some(_) => marked = true,
            None if named => errors.at(f.member.span(), "two fields are stored as `_id`"),
            None => named = true,
        }
    }
}

/// A `#[participant(nested)]` field must hold a struct (or an `Option` of
/// one), which must be `#[participant(embedded)]`: its fields are addressed by
/// dotted paths through the embedded struct's field paths. (Whether the type
/// is embedded is checked by the compiler, through the generated code.)
fn check_nested_is_embedded(m: &Model, errors: &mut Errors) {
    for f in with_role(m, Role::Builder) {
        if let Some(span) = f.options.nested {
            if model::nested_type(&f.ty).is_none() {
                errors.at(
                    span,
                    "`nested` applies to a field holding a struct marked #[participant(embedded)] \
                     (or an `Option` of one)",
                );
            }
        }
    }
}

/// A document needs `collection = "..."`: the collection its documents live
/// in. (Without it, the struct may have been meant `embedded`.)
fn check_collection_given(m: &Model, errors: &mut Errors) {
    if m.is_document() && m.options.collection.is_none() {
        errors.at(
            Span::call_site(),
            "#[participant] needs `collection = \"...\"` (the collection the documents live in), \
             or `embedded` for a struct stored inside other documents",
        );
    }
}

/// A document needs an id field, stored as `_id`: every change addresses one
/// document by its id. A `#[participant(id)]` that is misplaced has been
/// reported where it is, and is not reported again as a missing id.
fn check_has_id(m: &Model, errors: &mut Errors) {
    let Kind::Document { id: None, .. } = &m.kind else {
        return;
    };
    let id_option_seen = m.input_fields.iter().any(|f| f.options.id.is_some());
    if matches!(m.item, Item::NamedStruct) && !id_option_seen {
        let ident = &m.ident;
        errors.at(
            ident.span(),
            format_args!(
                "`{ident}` has no id field: add #[serde(rename = \"_id\")] to the field holding \
                 the document id (#[participant(id)] alone is not enough: the id must be stored as `_id`)"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::TokenStream;
    use quote::quote;

    use crate::model::Model;

    /// The messages of the errors for `#[participant(args)] item`, in order.
    fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
        let mut input = syn::parse2(item).unwrap();
        let (model, mut errors) = Model::build(args, &mut input);
        super::check(&model, &mut errors);
        errors
            .finish()
            .into_iter()
            .flatten()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn option_values() {
        let id = quote!(
            #[derive(Serialize, Deserialize)]
            struct A {
                #[serde(rename = "_id")]
                id: i64,
            }
        );
        assert_eq!(
            errors(
                quote!(collection = "a$", db = "x.y", marker = "_tandem"),
                id.clone()
            ),
            [
                "invalid collection name: it contains `$`",
                "invalid database name: it contains '.'",
                "invalid marker field name: that field is reserved",
            ]
        );
        assert_eq!(
            errors(quote!(collection = ".a", db = "", marker = "a.b"), id),
            [
                "invalid collection name: it starts with `.`",
                "invalid database name: it is empty (leave `db` out to use the coordinator's default database)",
                "invalid marker field name: it contains `.`; the marker is a top-level field",
            ]
        );
    }

    #[test]
    fn container() {
        assert_eq!(
            errors(
                quote!(embedded, collection = "a"),
                quote!(#[derive(Deserialize)] struct A { #[participant(id)] id: i64, #[participant(nested)] n: i64 })
            ),
            [
                "an `embedded` struct is stored inside other documents: it takes no `collection`, `db` or `marker`",
                "#[participant] needs a serde document struct: add `#[derive(Serialize)]` below #[participant] (it cannot see the attributes above it)",
                "an `embedded` struct has no id field: remove `id`",
                "`nested` applies to a field holding a struct marked #[participant(embedded)] (or an `Option` of one)",
            ]
        );
        assert_eq!(
            errors(
                quote!(collection = "a"),
                quote!(#[derive(Serialize, Deserialize)] #[serde(into = "B", deny_unknown_fields)] struct A<T> { #[serde(rename = "_id")] id: T })
            ),
            [
                "#[participant] cannot address the fields of a struct serialized with `#[serde(into)]`",
                "participant documents carry tandem's own fields (the marker array and `_tandem`), which `deny_unknown_fields` would refuse when they are read: remove it",
                "#[participant] does not support generic structs: declare a struct with concrete field types",
            ]
        );
        assert_eq!(
            errors(quote!(collection = "a"), quote!(union A { x: i64 })),
            ["#[participant] applies to structs with named fields, not to unions"]
        );
    }

    #[test]
    fn fields() {
        assert_eq!(
            errors(
                quote!(collection = "a"),
                quote!(#[derive(Serialize, Deserialize)] struct A {
                    #[participant(id, skip)] a: i64,
                    #[participant(id, nested)] #[serde(skip)] b: i64,
                    #[serde(rename = "pendingTransactions")] p1: i64,
                    #[serde(rename = "pendingTransactions")] p2: Vec<String>,
                    #[serde(rename = "_tandem")] t: i64,
                    #[serde(rename = "$e")] f: i64,
                    #[participant(id)] g: i64,
                    #[participant(id)] #[serde(rename = "_id")] h: i64,
                    #[serde(rename = "_id")] i: i64,
                    #[serde(rename = "_id")] j: i64,
                    #[participant(nested)] k: Option<Vec<X>>,
                    #[serde(flatten)] l: L,
                })
            ),
            [
                "the id field cannot be skipped",
                "the id field is skipped by serde: it must be stored as `_id`",
                "the id field cannot be `nested`",
                "marker field clash: `p1` is stored as `pendingTransactions`, the array where tandem records pending transactions; declare it as `Vec<String>`, or choose another marker name with #[participant(marker = \"...\")]",
                "the marker field `pendingTransactions` is absent from documents no transaction touched yet: add `#[serde(default)]` to `p2`",
                "`_tandem` is reserved by tandem for its own data: rename the field",
                "field `f` is stored as \"$e\", which cannot be addressed by a field path (names must be non-empty, without `.`, NUL or a leading `$`, and inside an embedded struct not a number with a leading zero)",
                "the id field must be stored as `_id`, but `g` is stored as `g`: add #[serde(rename = \"_id\")]",
                "duplicate #[participant(id)]: a document has one id field",
                "two fields are stored as `_id`",
                "`nested` applies to a field holding a struct marked #[participant(embedded)] (or an `Option` of one)",
            ]
        );
    }

    #[test]
    fn a_misplaced_id_is_not_also_a_missing_id() {
        assert_eq!(
            errors(
                quote!(collection = "a"),
                quote!(
                    #[derive(Serialize, Deserialize)]
                    struct A {
                        #[participant(id)]
                        #[serde(skip)]
                        id: i64,
                    }
                )
            ),
            ["the id field is skipped by serde: it must be stored as `_id`"]
        );
        assert_eq!(
            errors(quote!(), quote!(#[derive(Serialize, Deserialize)] struct A { id: i64 })),
            [
                "#[participant] needs `collection = \"...\"` (the collection the documents live in), or `embedded` for a struct stored inside other documents",
                "`A` has no id field: add #[serde(rename = \"_id\")] to the field holding the document id (#[participant(id)] alone is not enough: the id must be stored as `_id`)",
            ]
        );
    }

    #[test]
    fn an_embedded_struct_keeps_the_names_documents_reserve() {
        assert_eq!(
            errors(
                quote!(embedded),
                quote!(
                    #[derive(Serialize, Deserialize)]
                    struct A {
                        pendingTransactions: i64,
                        _tandem: i64,
                        #[serde(rename = "_id")]
                        i: i64,
                    }
                )
            ),
            Vec::<String>::new()
        );
    }
}
