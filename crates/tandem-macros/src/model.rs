//! The model of a `#[participant]` struct: what the code generator needs, and
//! the facts about the input that [`crate::check`] judges, with the input's
//! spans kept for error messages.
//!
//! [`Model::build`] only builds: it reports the attributes it cannot parse,
//! and otherwise always returns a model, even for a faulty input (a missing
//! collection is empty, a missing id is `None`, fields tandem keeps for itself
//! get no builder methods). The rules are checked afterwards by
//! [`crate::check::check`], so that the generator can emit stubs that keep the
//! rest of the user's crate from adding errors of its own.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    Data, DeriveInput, ExprPath, Fields, FieldsUnnamed, GenericArgument, Ident, Path,
    PathArguments, Type, Visibility,
};

use crate::attr::{self, ContainerOptions, Errors, FieldOptions, SerdeContainer, SerdeField};
use crate::consts::{DEFAULT_MARKER, META_FIELD};

/// The whole input: what the generator needs, and the facts the checks judge.
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
    /// The `#[participant(...)]` options of the struct, as written.
    pub(crate) options: ContainerOptions,
    /// What the struct's `#[serde(...)]` attributes say.
    pub(crate) serde: SerdeContainer,
    /// Which of `Serialize` and `Deserialize` the struct derives.
    pub(crate) derives: Derives,
    /// What kind of item the input is.
    pub(crate) item: Item,
    /// Every named field of the input, with what the model made of it.
    pub(crate) input_fields: Vec<InputField>,
}

/// Which serde traits the input derives (below `#[participant]`).
pub(crate) struct Derives {
    pub(crate) serialize: bool,
    pub(crate) deserialize: bool,
}

/// The kind of item the attribute is on; only `NamedStruct` can be a document.
pub(crate) enum Item {
    NamedStruct,
    TupleStruct(FieldsUnnamed),
    UnitStruct,
    Enum(Span),
    Union(Span),
}

/// One named field of the input, as written, and what the model made of it.
pub(crate) struct InputField {
    /// The field as written in the struct (possibly a raw identifier).
    pub(crate) member: Ident,
    /// The Rust name without `r#`.
    pub(crate) name: String,
    /// The name the field is stored under.
    pub(crate) stored: String,
    pub(crate) ty: Type,
    pub(crate) options: FieldOptions,
    pub(crate) serde: SerdeField,
    pub(crate) role: Role,
}

/// What a field is to the model, decided in this order (the first that applies).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `#[serde(skip)]`, `skip_serializing`, `skip_deserializing` or
    /// `#[participant(skip)]`: the builder leaves it alone.
    Skipped,
    /// Stored under the marker's name (documents only).
    Marker,
    /// Stored as tandem's own sub-document (documents only).
    Meta,
    /// `#[serde(flatten)]`: stored at the top level under names only its type knows.
    Flattened,
    /// Stored under a name no field path can address.
    Unaddressable,
    /// Marked `#[participant(id)]` or stored as `_id` (documents only).
    Id,
    /// A field the builder has methods for.
    Builder,
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
    /// A stored document may lack the field while the struct reads a value
    /// (its default), so no guard on its value or presence, and no
    /// increment, can follow what the struct reads: `skip_serializing_if`
    /// on a field that is not an `Option`, or an `Option` whose absence may
    /// read as `Some` (a `default = "path"` on it, or the struct's own
    /// default not derived, or a function's).
    pub(crate) may_be_absent: bool,
    /// A `HashMap` or `HashSet` (alone, or inside an `Option` or a `Vec`):
    /// serialized in the order of its hashes, which differs between two
    /// equal values, so no equality of its BSON follows the struct's.
    pub(crate) unordered: bool,
    /// An `Option` with `skip_serializing_if` whose absence reads as `None`
    /// (no function defaulting it, and none reading it unless a plain
    /// `default` supplies the `None`): serde stores the values its
    /// predicate skips by leaving the field out, whatever serializes the
    /// others.
    pub(crate) none_absent: bool,
    /// The predicate of `skip_serializing_if`, for a `none_absent` field
    /// (`None`: `Option::is_none`, when it does not parse as a path).
    pub(crate) skip_if: Option<ExprPath>,
    /// Read by a function (`with`, `deserialize_with`), which may refuse an
    /// absent field: no typed path, whose generic `unset` removes it.
    pub(crate) deserialize_with: bool,
}

/// What a field's type allows, judged from how it is written.
pub(crate) enum Shape {
    /// A primitive number or a `Decimal128`; `inc` is `true` for `i32`,
    /// `i64`, `f64` and `Decimal128`.
    Number { inc: bool },
    /// A `String` or a BSON date (`DateTime` without type arguments, as
    /// `bson::DateTime`; chrono's `DateTime<Tz>` is stored as a string, which
    /// does not sort as time): ordered, but not a number.
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
            Some(s) if s.ident == "String" && s.arguments.is_empty() => Shape::Ordered,
            Some(s) if s.ident == "DateTime" && s.arguments.is_empty() => Shape::Ordered,
            // `bson::Decimal128`, MongoDB's type for money: incremented and
            // compared as a number.
            Some(s) if s.ident == "Decimal128" && s.arguments.is_empty() => {
                Shape::Number { inc: true }
            }
            _ => Shape::Other,
        }
    }

    /// Whether values are passed as the type itself (numbers, so that literals
    /// take the field's type) rather than `impl Into<T>`.
    pub(crate) fn is_number(&self) -> bool {
        matches!(self, Shape::Number { .. })
    }
}

/// The name of the last segment of `ty`'s path (`HashMap` for
/// `std::collections::HashMap<K, V>`).
pub(crate) fn last_segment_name(ty: &Type) -> Option<String> {
    last_segment(ty).map(|s| s.ident.to_string())
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

/// The embedded type of a `#[participant(nested)]` field of type `ty`: `ty`
/// itself or the `T` of `Option<T>`, when that can be a struct.
pub(crate) fn nested_type(ty: &Type) -> Option<&Type> {
    let inner = generic_arg(ty, "Option").unwrap_or(ty);
    let bad = primitive_number(inner).is_some()
        || generic_arg(inner, "Vec").is_some()
        || !matches!(inner, Type::Path(_));
    (!bad).then_some(inner)
}

/// `T` in `Name<T>` (e.g. `Option<T>`, `std::vec::Vec<T>`).
/// Whether `ty` is a date with type arguments (chrono's `DateTime<Tz>`,
/// stored as RFC 3339 text, which does not sort as time), or an `Option` or
/// `Vec` of one.
pub(crate) fn text_date(ty: &Type) -> bool {
    if let Some(inner) = generic_arg(ty, "Option").or_else(|| generic_arg(ty, "Vec")) {
        return text_date(inner);
    }
    last_segment(ty).is_some_and(|s| s.ident == "DateTime" && !s.arguments.is_empty())
}

pub(crate) fn generic_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
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
    /// Builds the model of the input, and removes the `#[participant]`
    /// attributes from it (they are not attributes the compiler knows).
    /// The errors are those of attributes that do not parse; the rules are
    /// [`crate::check`]'s.
    pub(crate) fn build(args: TokenStream, input: &mut DeriveInput) -> (Model, Errors) {
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
        let (serialize, deserialize) = attr::serde_derives(&input.attrs);
        let derives_default = attr::derives_default(&input.attrs);
        let derives = Derives {
            serialize,
            deserialize,
        };
        let marker = options
            .marker
            .as_ref()
            .map(|m| m.value())
            .unwrap_or_else(|| DEFAULT_MARKER.to_owned());

        let mut named = None;
        let item = match &mut input.data {
            Data::Struct(s) => match &mut s.fields {
                Fields::Named(fields) => {
                    named = Some(fields);
                    Item::NamedStruct
                }
                Fields::Unnamed(fields) => Item::TupleStruct(fields.clone()),
                Fields::Unit => Item::UnitStruct,
            },
            Data::Enum(e) => Item::Enum(e.enum_token.span),
            Data::Union(u) => Item::Union(u.union_token.span),
        };

        let mut input_fields = Vec::new();
        for field in named.into_iter().flat_map(|n| n.named.iter_mut()) {
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
            // Only a field serde neither writes nor reads escapes the
            // marker's and `_tandem`'s rules: one skipped by this attribute
            // alone, or on one side of serde only, still meets tandem's data.
            let role = if field_serde.skipped_both {
                Role::Skipped
            } else if !embedded && stored == marker {
                Role::Marker
            } else if !embedded && stored == META_FIELD {
                Role::Meta
            } else if field_options.skip.is_some() {
                Role::Skipped
            } else if field_serde.skipped && (embedded || stored != "_id") {
                // Written and never read, or the other way round: no typed
                // change or guard follows the struct (an id keeps its role,
                // which has no methods).
                Role::Skipped
            } else if field_serde.flatten {
                Role::Flattened
            } else if !addressable(&stored) || (embedded && leading_zero_number(&stored)) {
                Role::Unaddressable
            } else if !embedded && (field_options.id.is_some() || stored == "_id") {
                Role::Id
            } else {
                Role::Builder
            };
            input_fields.push(InputField {
                member,
                name,
                stored,
                ty: field.ty.clone(),
                options: field_options,
                serde: field_serde,
                role,
            });
        }

        let fields = input_fields
            .iter()
            .filter(|f| f.role == Role::Builder)
            .map(|f| FieldModel {
                member: f.member.clone(),
                name: f.name.clone(),
                stored: f.stored.clone(),
                shape: Shape::of(&f.ty),
                ty: f.ty.clone(),
                nested: f.options.nested.and(nested_type(&f.ty)).cloned(),
                serialize_with: f.serde.serialize_with.clone(),
                // Absent while the struct reads a value: skipped when not an
                // `Option`; an `Option` whose default is a function's, or
                // the struct's own `Default` not derived (either may be
                // `Some`).
                may_be_absent: {
                    let option = generic_arg(&f.ty, "Option").is_some();
                    // The struct's own default supplies the field: a
                    // `Default` not derived here, or a function's.
                    let container =
                        serde.default && (serde.default_fn || !derives_default) && !f.serde.default;
                    (f.serde.skip_if && !option) || (option && (f.serde.default_fn || container))
                },
                unordered: unordered(&f.ty),
                // `None` is stored by leaving the field out, and an absent
                // field reads as `None`: an unset then removes the field,
                // as serde would (a sparse index on it keeps working). The
                // serializer does not matter: serde skips the field before
                // calling it.
                none_absent: none_absent(f),
                skip_if: none_absent(f).then(|| f.serde.skip_if_fn.clone()).flatten(),
                deserialize_with: f.serde.deserialize_with,
            })
            .collect();

        let kind = if embedded {
            Kind::Embedded
        } else {
            // The one marked #[participant(id)], else the one stored as `_id`.
            let ids = || input_fields.iter().filter(|f| f.role == Role::Id);
            let id = ids()
                .find(|f| f.options.id.is_some())
                .or_else(|| ids().next())
                .map(|f| Box::new(IdField::of(f)));
            Kind::Document {
                collection: options
                    .collection
                    .as_ref()
                    .map(|c| c.value())
                    .unwrap_or_default(),
                db: options.db.as_ref().map(|d| d.value()),
                marker,
                id,
            }
        };

        if matches!(item, Item::NamedStruct) && !serialize && !deserialize {
            // Without a serde derive, the compiler would add an error of its own
            // for every `#[serde]` attribute: leave them out.
            strip_serde_attrs(input);
        }

        let model = Model {
            ident: input.ident.clone(),
            vis: input.vis.clone(),
            krate,
            kind,
            fields,
            generic: !input.generics.params.is_empty(),
            generics: input.generics.clone(),
            options,
            serde,
            derives,
            item,
            input_fields,
        };
        (model, errors)
    }

    /// Whether the input is a document (not an `embedded` struct).
    pub(crate) fn is_document(&self) -> bool {
        matches!(self.kind, Kind::Document { .. })
    }
}

/// Whether serde stores `f` by leaving it out when its predicate says so,
/// and reads it back as `None` when absent (see `FieldModel::none_absent`).
fn none_absent(f: &InputField) -> bool {
    f.serde.skip_if && !f.serde.default_fn && (!f.serde.deserialize_with || f.serde.default)
}

impl IdField {
    fn of(f: &InputField) -> IdField {
        let (ty, number) = match (&f.serde.serialize_with, generic_arg(&f.ty, "Option")) {
            (None, Some(inner)) => (inner.clone(), primitive_number(inner).is_some()),
            _ => (f.ty.clone(), primitive_number(&f.ty).is_some()),
        };
        IdField {
            ty,
            number,
            serialize_with: f.serde.serialize_with.clone(),
        }
    }
}

/// Whether a stored name is a number with a leading zero (`"01"`), which a
/// path refuses past its first segment (where an embedded struct's fields are).
pub(crate) fn leading_zero_number(stored: &str) -> bool {
    stored.len() > 1 && stored.starts_with('0') && stored.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `ty` holds a `HashMap` or `HashSet` anywhere in its type as
/// written (an `Option`, a `Vec`, a `Box`, a map's values, a tuple, an
/// array). A type alias or a struct of your own holding one is not seen.
pub(crate) fn unordered(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.iter().any(|seg| {
            seg.ident == "HashMap"
                || seg.ident == "HashSet"
                || match &seg.arguments {
                    PathArguments::AngleBracketed(args) => args.args.iter().any(|a| match a {
                        GenericArgument::Type(t) => unordered(t),
                        _ => false,
                    }),
                    _ => false,
                }
        }),
        Type::Tuple(t) => t.elems.iter().any(unordered),
        Type::Array(a) => unordered(&a.elem),
        Type::Slice(s) => unordered(&s.elem),
        Type::Reference(r) => unordered(&r.elem),
        Type::Paren(p) => unordered(&p.elem),
        Type::Group(g) => unordered(&g.elem),
        _ => false,
    }
}

/// Whether a stored name can be addressed by a field path: non-empty, without
/// `.` or NUL, not starting with `$` (as `tandem::change::check_path` wants).
pub(crate) fn addressable(stored: &str) -> bool {
    !(stored.is_empty() || stored.contains('.') || stored.starts_with('$') || stored.contains('\0'))
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
