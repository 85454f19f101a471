//! The checked model of a `#[participant]` struct: what the code generator needs,
//! with the spans of the input kept for error messages.
//!
//! [`Model::build`] always returns a model, even for a faulty input, together
//! with every error found, so that the generator can emit stubs that keep the
//! rest of the user's crate from adding errors of its own.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Data, DeriveInput, ExprPath, Fields, GenericArgument, Ident, Path, PathArguments, Type,
    Visibility,
};

use crate::attr::{self, ContainerOptions, Errors, FieldOptions, SerdeContainer, SerdeField};

/// The default marker field name (as in `tandem::change::DEFAULT_MARKER`).
pub(crate) const DEFAULT_MARKER: &str = "pendingTransactions";
/// The sub-document tandem keeps on participant documents (as in `tandem::change::META_FIELD`).
pub(crate) const META_FIELD: &str = "_tandem";

/// The whole input, checked.
pub(crate) struct Model {
    pub(crate) ident: Ident,
    pub(crate) vis: Visibility,
    pub(crate) krate: Path,
    pub(crate) kind: Kind,
    /// The fields the builder has methods for (not the id, the marker or skipped ones).
    pub(crate) fields: Vec<FieldModel>,
    /// Whether the struct has generics (rejected); the stubs then leave fields out.
    pub(crate) generic: bool,
    /// The generics, for stub impls of a rejected generic struct.
    pub(crate) generics: syn::Generics,
}

/// A document stored in a collection, or a struct embedded in documents.
pub(crate) enum Kind {
    Document {
        collection: String,
        db: Option<String>,
        marker: String,
        /// `None` when the input has no id field (an error).
        id: Option<Box<IdField>>,
    },
    Embedded,
}

/// The id field of a document.
pub(crate) struct IdField {
    /// The type `X::change` takes: the field's type, without an `Option`.
    pub(crate) ty: Type,
    pub(crate) number: bool,
    pub(crate) serialize_with: Option<ExprPath>,
}

/// One field of the document that the builder can change.
pub(crate) struct FieldModel {
    /// The field as written in the struct (possibly a raw identifier).
    pub(crate) member: Ident,
    /// The Rust name without `r#`, for the method names.
    pub(crate) name: String,
    /// The name the field is stored under.
    pub(crate) stored: String,
    pub(crate) ty: Type,
    pub(crate) shape: Shape,
    /// For `#[participant(nested)]`: the embedded type.
    pub(crate) nested: Option<Type>,
    pub(crate) serialize_with: Option<ExprPath>,
}

/// What a field's type allows, judged from how it is written.
pub(crate) enum Shape {
    /// A primitive number; `inc` is `true` for `i32`, `i64` and `f64`.
    Number { inc: bool },
    /// A `String` or a date: ordered, but not a number.
    Ordered,
    /// `Option<T>`.
    Option,
    /// `Vec<T>`.
    Vec { elem: Box<Type>, number: bool },
    /// Anything else.
    Other,
}

impl Shape {
    fn of(ty: &Type) -> Shape {
        if let Some(name) = primitive_number(ty) {
            return Shape::Number {
                inc: matches!(name.as_str(), "i32" | "i64" | "f64"),
            };
        }
        if generic_arg(ty, "Option").is_some() {
            return Shape::Option;
        }
        if let Some(elem) = generic_arg(ty, "Vec") {
            let number = primitive_number(elem).is_some();
            return Shape::Vec {
                elem: Box::new(elem.clone()),
                number,
            };
        }
        match last_segment(ty) {
            Some(s) if (s.ident == "String" || s.ident == "DateTime") => Shape::Ordered,
            _ => Shape::Other,
        }
    }

    /// Whether values are passed as the type itself (numbers, so that literals
    /// take the field's type) rather than `impl Into<T>`.
    pub(crate) fn is_number(&self) -> bool {
        matches!(self, Shape::Number { .. })
    }
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Group(g) => last_segment(&g.elem),
        Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

/// The name of a primitive number type, written `i64`, `core::primitive::i64`, ...
pub(crate) fn primitive_number(ty: &Type) -> Option<String> {
    let seg = last_segment(ty)?;
    if !seg.arguments.is_empty() {
        return None;
    }
    let name = seg.ident.to_string();
    const NUMBERS: [&str; 14] = [
        "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
        "f32", "f64",
    ];
    NUMBERS.contains(&name.as_str()).then_some(name)
}

/// `T` in `Name<T>` (e.g. `Option<T>`, `std::vec::Vec<T>`).
fn generic_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let seg = last_segment(ty)?;
    if seg.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(t), None) => Some(t),
        _ => None,
    }
}

impl Model {
    /// Checks the input, and removes the `#[participant]` attributes from it
    /// (they are not attributes the compiler knows).
    pub(crate) fn build(args: TokenStream, input: &mut DeriveInput) -> (Model, Option<syn::Error>) {
        let mut errors = Errors::default();

        let mut options = ContainerOptions::default();
        options.parse(args, &mut errors);
        let mut extra = Vec::new();
        input.attrs.retain(|a| {
            let ours = attr::is_participant(a);
            if ours {
                extra.push(a.clone());
            }
            !ours
        });
        for a in extra {
            match &a.meta {
                syn::Meta::List(list) => options.parse(list.tokens.clone(), &mut errors),
                other => errors.at(
                    other.span(),
                    "a further #[participant] attribute needs options: #[participant(...)]",
                ),
            }
        }

        let serde = SerdeContainer::parse(&input.attrs);
        let krate = options
            .krate
            .clone()
            .unwrap_or_else(|| syn::parse_quote!(::tandem));

        let embedded = options.embedded.is_some();
        if let Some(span) = options.embedded {
            if options.collection.is_some() || options.db.is_some() || options.marker.is_some() {
                errors.at(
                    span,
                    "an `embedded` struct is stored inside other documents: it takes no `collection`, `db` or `marker`",
                );
            }
        }

        let ident = input.ident.clone();
        let is_struct =
            matches!(&input.data, Data::Struct(s) if matches!(s.fields, Fields::Named(_)));
        let mut no_serde = false;
        if is_struct {
            let (ser, de) = attr::serde_derives(&input.attrs);
            no_serde = !ser && !de;
            if !ser || !de {
                let missing = match (ser, de) {
                    (false, false) => "`#[derive(Serialize, Deserialize)]`",
                    (false, true) => "`#[derive(Serialize)]`",
                    _ => "`#[derive(Deserialize)]`",
                };
                errors.at(
                    ident.span(),
                    format_args!(
                        "#[participant] needs a serde document struct: add {missing} below #[participant] \
                         (it cannot see the attributes above it)"
                    ),
                );
            }
            if let Some((span, what)) = serde.not_by_fields {
                errors.at(
                    span,
                    format_args!(
                        "#[participant] cannot address the fields of a struct serialized with `#[serde({what})]`"
                    ),
                );
            }
            if !embedded {
                if let Some(span) = serde.deny_unknown_fields {
                    errors.at(
                        span,
                        "participant documents carry tandem's own fields (the marker array and `_tandem`), \
                         which `deny_unknown_fields` would refuse when they are read: remove it",
                    );
                }
            }
        }

        // The shape of the input.
        let mut named = None;
        match &mut input.data {
            Data::Struct(s) => match &mut s.fields {
                Fields::Named(fields) => named = Some(fields),
                Fields::Unnamed(fields) => errors.spanned(
                    &*fields,
                    "#[participant] needs a struct with named fields: a document is stored as named fields",
                ),
                Fields::Unit => errors.at(
                    ident.span(),
                    "#[participant] needs a struct with named fields, not a unit struct",
                ),
            },
            Data::Enum(e) => errors.at(
                e.enum_token.span,
                "#[participant] applies to structs with named fields, not to enums",
            ),
            Data::Union(u) => errors.at(
                u.union_token.span,
                "#[participant] applies to structs with named fields, not to unions",
            ),
        }

        let generic = !input.generics.params.is_empty();
        if generic {
            errors.spanned(
                &input.generics,
                "#[participant] does not support generic structs: declare a struct with concrete field types",
            );
        }

        let marker = options
            .marker
            .as_ref()
            .map(|m| m.value())
            .unwrap_or_else(|| DEFAULT_MARKER.to_owned());

        // The fields.
        let mut fields = Vec::new();
        let mut id_marked: Option<(Span, IdField)> = None;
        let mut id_named: Option<IdField> = None;
        // A mistaken `#[participant(id)]` is reported where it is, not as a missing id.
        let mut id_option_seen = false;
        if let Some(named) = named {
            for field in named.named.iter_mut() {
                let field_options = FieldOptions::parse(&field.attrs, &mut errors);
                field.attrs.retain(|a| !attr::is_participant(a));
                let Some(member) = field.ident.clone() else {
                    continue;
                };
                let name = member.unraw().to_string();
                let field_serde = SerdeField::parse(&field.attrs);
                let stored = match &field_serde.rename {
                    Some(rename) => rename.clone(),
                    None => match serde.rename_all {
                        Some(rule) => rule.apply(&name),
                        None => name.clone(),
                    },
                };
                let ty = field.ty.clone();

                if embedded {
                    if let Some(span) = field_options.id {
                        errors.at(span, "an `embedded` struct has no id field: remove `id`");
                    }
                }

                id_option_seen |= field_options.id.is_some();
                if field_serde.skipped || field_options.skip.is_some() {
                    if let Some(span) = field_options.id {
                        if field_serde.skipped && field_options.skip.is_none() {
                            errors.at(
                                span,
                                "the id field is skipped by serde: it must be stored as `_id`",
                            );
                        }
                    }
                    continue;
                }

                let stored_span = member.span();
                if !embedded && stored == marker {
                    if generic_arg(&ty, "Vec").is_none() {
                        errors.spanned(
                            &ty,
                            format_args!(
                                "marker field clash: `{name}` is stored as `{marker}`, the array where tandem \
                                 records pending transactions; declare it as `Vec<String>`, or choose another \
                                 marker name with #[participant(marker = \"...\")]"
                            ),
                        );
                    } else if !field_serde.default && !serde.default {
                        errors.at(
                            stored_span,
                            format_args!(
                                "the marker field `{marker}` is absent from documents no transaction touched \
                                 yet: add `#[serde(default)]` to `{name}`"
                            ),
                        );
                    }
                    continue;
                }
                if !embedded && stored == META_FIELD {
                    errors.at(
                        stored_span,
                        format_args!("`{META_FIELD}` is reserved by tandem for its own data: rename the field"),
                    );
                    continue;
                }
                if field_serde.flatten {
                    // Flattened fields are stored at the top level under names only
                    // their own type knows: the builder has no methods for them.
                    continue;
                }
                if stored.is_empty()
                    || stored.contains('.')
                    || stored.starts_with('$')
                    || stored.contains('\0')
                {
                    errors.at(
                        stored_span,
                        format_args!(
                            "field `{name}` is stored as {stored:?}, which cannot be addressed by a field path \
                             (names must be non-empty, without `.`, NUL or a leading `$`)"
                        ),
                    );
                    continue;
                }

                let is_id = !embedded && (field_options.id.is_some() || stored == "_id");
                if is_id {
                    let (ty, number) =
                        match (&field_serde.serialize_with, generic_arg(&ty, "Option")) {
                            (None, Some(inner)) => {
                                (inner.clone(), primitive_number(inner).is_some())
                            }
                            _ => (ty.clone(), primitive_number(&ty).is_some()),
                        };
                    let id = IdField {
                        ty,
                        number,
                        serialize_with: field_serde.serialize_with.clone(),
                    };
                    if let Some(span) = field_options.id {
                        if stored != "_id" {
                            errors.at(
                                span,
                                format_args!(
                                    "the id field must be stored as `_id`, but `{name}` is stored as `{stored}`: \
                                     add #[serde(rename = \"_id\")]"
                                ),
                            );
                        }
                        if id_marked.is_some() {
                            errors.at(
                                span,
                                "duplicate #[participant(id)]: a document has one id field",
                            );
                        } else {
                            id_marked = Some((span, id));
                        }
                    } else if id_named.is_some() {
                        errors.at(stored_span, "two fields are stored as `_id`");
                    } else {
                        id_named = Some(id);
                    }
                    continue;
                }

                let nested = match field_options.nested {
                    Some(span) => {
                        let inner = generic_arg(&ty, "Option").unwrap_or(&ty);
                        let bad = primitive_number(inner).is_some()
                            || generic_arg(inner, "Vec").is_some()
                            || !matches!(inner, Type::Path(_));
                        if bad {
                            errors.at(
                                span,
                                "`nested` applies to a field holding a struct marked #[participant(embedded)] \
                                 (or an `Option` of one)",
                            );
                            None
                        } else {
                            Some(inner.clone())
                        }
                    }
                    None => None,
                };

                fields.push(FieldModel {
                    member,
                    name,
                    stored,
                    shape: Shape::of(&ty),
                    ty,
                    nested,
                    serialize_with: field_serde.serialize_with,
                });
            }
        }

        let kind = if embedded {
            Kind::Embedded
        } else {
            let collection = match &options.collection {
                Some(c) => c.value(),
                None => {
                    errors.at(
                        Span::call_site(),
                        "#[participant] needs `collection = \"...\"` (the collection the documents live in), \
                         or `embedded` for a struct stored inside other documents",
                    );
                    String::new()
                }
            };
            let id = match (id_marked, id_named) {
                (Some((_, id)), _) => Some(Box::new(id)),
                (None, Some(id)) => Some(Box::new(id)),
                (None, None) => {
                    if is_struct && !id_option_seen {
                        errors.at(
                            ident.span(),
                            format_args!(
                                "`{ident}` has no id field: add #[serde(rename = \"_id\")] to the field holding \
                                 the document id (#[participant(id)] alone is not enough: the id must be stored as `_id`)"
                            ),
                        );
                    }
                    None
                }
            };
            Kind::Document {
                collection,
                db: options.db.as_ref().map(|d| d.value()),
                marker,
                id,
            }
        };

        if no_serde {
            // Without a serde derive, the compiler would add an error of its own
            // for every `#[serde]` attribute: leave them out.
            strip_serde_attrs(input);
        }

        let model = Model {
            ident,
            vis: input.vis.clone(),
            krate,
            kind,
            fields,
            generic,
            generics: input.generics.clone(),
        };
        (model, errors.finish())
    }
}

fn strip_serde_attrs(input: &mut DeriveInput) {
    let serde = |a: &syn::Attribute| a.path().is_ident("serde");
    input.attrs.retain(|a| !serde(a));
    if let Data::Struct(s) = &mut input.data {
        for field in s.fields.iter_mut() {
            field.attrs.retain(|a| !serde(a));
        }
    }
}
