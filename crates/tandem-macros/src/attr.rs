//! Parsing of the `#[participant(...)]` options and of the `#[serde(...)]`
//! attributes that decide how fields are stored.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprPath, LitStr, Path, Token};

/// Collects every error found in the input, to report them all at once.
#[derive(Default)]
pub(crate) struct Errors {
    first: Option<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.first {
            Some(first) => first.combine(error),
            None => self.first = Some(error),
        }
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// An error spanning all of `tokens` (not only their first token).
    pub(crate) fn spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.first
    }
}

/// Whether an attribute is `#[participant(...)]` (also `#[tandem::participant(...)]`).
pub(crate) fn is_participant(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "participant")
}

/// The container options: `#[participant(collection = "...", ...)]`.
#[derive(Default)]
pub(crate) struct ContainerOptions {
    pub(crate) collection: Option<LitStr>,
    pub(crate) db: Option<LitStr>,
    pub(crate) marker: Option<LitStr>,
    pub(crate) krate: Option<Path>,
    pub(crate) embedded: Option<Span>,
}

const CONTAINER_OPTIONS: &str = "`collection`, `db`, `marker`, `crate` or `embedded`";
const FIELD_OPTIONS: &str = "`id`, `nested` or `skip`";

impl ContainerOptions {
    /// Parses the options of one `#[participant(...)]` (the macro's own arguments
    /// or a further attribute on the struct).
    pub(crate) fn parse(&mut self, tokens: TokenStream, errors: &mut Errors) {
        let parser = syn::meta::parser(|meta| self.parse_one(meta, errors));
        if let Err(e) = parser.parse2(tokens) {
            errors.push(e);
        }
    }

    fn parse_one(&mut self, meta: ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<()> {
        let Some(name) = meta.path.get_ident().map(|i| i.to_string()) else {
            errors.at(
                span_of(&meta.path),
                format_args!("expected a #[participant] option: {CONTAINER_OPTIONS}"),
            );
            return skip_value(&meta);
        };
        let span = span_of(&meta.path);
        match name.as_str() {
            "collection" => {
                let lit = string_value(&meta)?;
                set_once(&mut self.collection, lit, &name, span, errors);
            }
            "db" => {
                let lit = string_value(&meta)?;
                set_once(&mut self.db, lit, &name, span, errors);
            }
            "marker" => {
                let lit = string_value(&meta)?;
                set_once(&mut self.marker, lit, &name, span, errors);
            }
            "crate" => {
                let lit = string_value(&meta)?;
                match lit.parse::<Path>() {
                    Ok(path) => set_once(&mut self.krate, path, &name, span, errors),
                    Err(_) => errors.at(
                        lit.span(),
                        "`crate` takes the path of the tandem crate, e.g. `crate = \"::tandem\"`",
                    ),
                }
            }
            "embedded" => {
                flag(&meta, &name, errors)?;
                set_once(&mut self.embedded, span, &name, span, errors);
            }
            _ => {
                errors.at(
                    span,
                    format_args!(
                        "unknown #[participant] option `{name}`; expected {CONTAINER_OPTIONS}"
                    ),
                );
                skip_value(&meta)?;
            }
        }
        Ok(())
    }
}

/// The field options: `#[participant(id)]`, `#[participant(nested)]`, `#[participant(skip)]`.
#[derive(Default)]
pub(crate) struct FieldOptions {
    pub(crate) id: Option<Span>,
    pub(crate) nested: Option<Span>,
    pub(crate) skip: Option<Span>,
}

impl FieldOptions {
    /// Parses the `#[participant(...)]` attributes of one field.
    pub(crate) fn parse(attrs: &[Attribute], errors: &mut Errors) -> Self {
        let mut options = FieldOptions::default();
        for attr in attrs.iter().filter(|a| is_participant(a)) {
            let parsed = attr.parse_nested_meta(|meta| {
                let span = span_of(&meta.path);
                let name = meta.path.get_ident().map(|i| i.to_string());
                let slot = match name.as_deref() {
                    Some("id") => &mut options.id,
                    Some("nested") => &mut options.nested,
                    Some("skip") => &mut options.skip,
                    _ => {
                        let shown = name.unwrap_or_else(|| path_text(&meta.path));
                        errors.at(
                            span,
                            format_args!(
                                "unknown #[participant] field option `{shown}`; expected {FIELD_OPTIONS}"
                            ),
                        );
                        return skip_value(&meta);
                    }
                };
                let name = name.unwrap_or_default();
                flag(&meta, &name, errors)?;
                set_once(slot, span, &name, span, errors);
                Ok(())
            });
            if let Err(e) = parsed {
                errors.push(e);
            }
        }
        options
    }
}

/// The casing rules of `#[serde(rename_all = "...")]`, applied to field names as serde does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenameRule {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

impl RenameRule {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "lowercase" => RenameRule::Lower,
            "UPPERCASE" => RenameRule::Upper,
            "PascalCase" => RenameRule::Pascal,
            "camelCase" => RenameRule::Camel,
            "snake_case" => RenameRule::Snake,
            "SCREAMING_SNAKE_CASE" => RenameRule::ScreamingSnake,
            "kebab-case" => RenameRule::Kebab,
            "SCREAMING-KEBAB-CASE" => RenameRule::ScreamingKebab,
            _ => return None,
        })
    }

    /// The stored name of the field `field` (its Rust name, without `r#`).
    pub(crate) fn apply(self, field: &str) -> String {
        match self {
            RenameRule::Lower | RenameRule::Snake => field.to_owned(),
            RenameRule::Upper | RenameRule::ScreamingSnake => field.to_ascii_uppercase(),
            RenameRule::Pascal => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            RenameRule::Camel => {
                let pascal = RenameRule::Pascal.apply(field);
                match pascal.chars().next() {
                    Some(first) => {
                        first.to_ascii_lowercase().to_string() + &pascal[first.len_utf8()..]
                    }
                    None => pascal,
                }
            }
            RenameRule::Kebab => field.replace('_', "-"),
            RenameRule::ScreamingKebab => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

/// What the container's `#[serde(...)]` attributes say about storage.
#[derive(Default)]
pub(crate) struct SerdeContainer {
    pub(crate) rename_all: Option<RenameRule>,
    /// `rename_all(serialize = "...", deserialize = "...")` with the two
    /// apart (or one alone): the struct would read names that typed changes
    /// do not write.
    pub(crate) read_apart: Option<Span>,
    pub(crate) deny_unknown_fields: Option<Span>,
    pub(crate) default: bool,
    /// `default = "path"`: absent fields read as a function's struct has them.
    pub(crate) default_fn: bool,
    /// `transparent` or `into = "..."`: the struct is not stored as its fields.
    pub(crate) not_by_fields: Option<(Span, &'static str)>,
    /// A `serde` or `participant` attribute inside `#[cfg_attr(...)]`, which
    /// this macro sees unexpanded: its span and the attribute's name.
    pub(crate) in_cfg_attr: Option<(Span, &'static str)>,
}

impl SerdeContainer {
    /// Reads the container's `#[serde(...)]` attributes. Malformed ones are left
    /// for serde to report.
    pub(crate) fn parse(attrs: &[Attribute]) -> Self {
        let mut serde = SerdeContainer {
            in_cfg_attr: hidden_in_cfg_attr(attrs),
            ..SerdeContainer::default()
        };
        for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
            let _ = attr.parse_nested_meta(|meta| {
                let span = span_of(&meta.path);
                if meta.path.is_ident("rename_all") {
                    let names = names(&meta)?;
                    if names.read_apart() {
                        serde.read_apart = Some(span);
                    }
                    if let Some(rule) = names.serialize.as_deref().and_then(RenameRule::from_name) {
                        serde.rename_all = Some(rule);
                    }
                    Ok(())
                } else if meta.path.is_ident("deny_unknown_fields") {
                    serde.deny_unknown_fields = Some(span);
                    Ok(())
                } else if meta.path.is_ident("default") {
                    serde.default = true;
                    serde.default_fn = meta.input.peek(Token![=]);
                    skip_value(&meta)
                } else if meta.path.is_ident("transparent") {
                    serde.not_by_fields = Some((span, "transparent"));
                    Ok(())
                } else if meta.path.is_ident("into") {
                    serde.not_by_fields = Some((span, "into"));
                    skip_value(&meta)
                } else if meta.path.is_ident("from") {
                    serde.not_by_fields = Some((span, "from"));
                    skip_value(&meta)
                } else if meta.path.is_ident("try_from") {
                    serde.not_by_fields = Some((span, "try_from"));
                    skip_value(&meta)
                } else {
                    skip_value(&meta)
                }
            });
        }
        serde
    }
}

/// What a field's `#[serde(...)]` attributes say about storage.
#[derive(Default)]
pub(crate) struct SerdeField {
    pub(crate) rename: Option<String>,
    /// `skip`, `skip_serializing` or `skip_deserializing`: the field is
    /// not stored, or not read, by serde.
    pub(crate) skipped: bool,
    /// `skip`: serde neither writes nor reads the field.
    pub(crate) skipped_both: bool,
    /// A `#[cfg(...)]` on the field, which the attribute sees unevaluated.
    pub(crate) cfg: Option<Span>,
    pub(crate) flatten: bool,
    pub(crate) default: bool,
    /// The function serializing the field, from `with` or `serialize_with`.
    pub(crate) serialize_with: Option<ExprPath>,
    /// `with` or `deserialize_with`: the field is read by a function, which
    /// may refuse an absent field.
    pub(crate) deserialize_with: bool,
    /// `default = "path"`: a missing field reads as what a function returns.
    pub(crate) default_fn: bool,
    /// `skip_serializing_if`: the field may be absent from the stored
    /// document while the struct reads a value for it.
    pub(crate) skip_if: bool,
    /// The predicate of `skip_serializing_if`, when it parses as a path.
    pub(crate) skip_if_fn: Option<ExprPath>,
    /// An `alias`: a name the struct reads that typed changes do not write.
    pub(crate) alias: Option<Span>,
    /// `rename(serialize = "...", deserialize = "...")` with the two apart
    /// (or one alone): the same.
    pub(crate) read_apart: Option<Span>,
    /// A `#[serde_as(...)]` field attribute not yet expanded by `#[serde_as]`.
    pub(crate) serde_as: Option<Span>,
    /// A `serde` or `participant` attribute inside `#[cfg_attr(...)]`.
    pub(crate) in_cfg_attr: Option<(Span, &'static str)>,
}

impl SerdeField {
    /// Reads a field's `#[serde(...)]` attributes. Malformed ones are left for serde to report.
    pub(crate) fn parse(attrs: &[Attribute]) -> Self {
        let mut serde = SerdeField {
            in_cfg_attr: hidden_in_cfg_attr(attrs),
            cfg: attrs
                .iter()
                .find(|a| a.path().is_ident("cfg"))
                .map(|a| a.path().span()),
            serde_as: attrs
                .iter()
                .find(|a| a.path().is_ident("serde_as"))
                .map(|a| a.path().span()),
            ..SerdeField::default()
        };
        let mut renamed = None;
        let mut read_as = None;
        for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
            let _ = attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("rename") {
                    // Each side as the last `rename` naming it sets it, over
                    // every `serde` attribute of the field.
                    renamed = Some(meta.path.span());
                    let names = names(&meta)?;
                    if names.deserialize.is_some() {
                        read_as = names.deserialize;
                    }
                    if let Some(name) = names.serialize {
                        serde.rename = Some(name);
                    }
                    Ok(())
                } else if meta.path.is_ident("skip") {
                    serde.skipped = true;
                    serde.skipped_both = true;
                    Ok(())
                } else if meta.path.is_ident("skip_serializing")
                    || meta.path.is_ident("skip_deserializing")
                {
                    // Written and never read, or read and never written:
                    // a typed change or guard would disagree with the struct.
                    serde.skipped = true;
                    Ok(())
                } else if meta.path.is_ident("flatten") {
                    serde.flatten = true;
                    Ok(())
                } else if meta.path.is_ident("default") {
                    serde.default = true;
                    serde.default_fn = meta.input.peek(Token![=]);
                    skip_value(&meta)
                } else if meta.path.is_ident("with") {
                    serde.deserialize_with = true;
                    let lit: LitStr = meta.value()?.parse()?;
                    if let Ok(mut path) = lit.parse::<ExprPath>() {
                        path.path
                            .segments
                            .push(syn::Ident::new("serialize", lit.span()).into());
                        serde.serialize_with = Some(path);
                    }
                    Ok(())
                } else if meta.path.is_ident("skip_serializing_if") {
                    serde.skip_if = true;
                    let lit: LitStr = meta.value()?.parse()?;
                    serde.skip_if_fn = lit.parse::<ExprPath>().ok();
                    Ok(())
                } else if meta.path.is_ident("alias") {
                    serde.alias = Some(meta.path.span());
                    skip_value(&meta)
                } else if meta.path.is_ident("deserialize_with") {
                    serde.deserialize_with = true;
                    skip_value(&meta)
                } else if meta.path.is_ident("serialize_with") {
                    let lit: LitStr = meta.value()?.parse()?;
                    if let Ok(path) = lit.parse::<ExprPath>() {
                        serde.serialize_with = Some(path);
                    }
                    Ok(())
                } else {
                    skip_value(&meta)
                }
            });
        }
        if read_as != serde.rename {
            serde.read_apart = renamed;
        }
        serde
    }
}

/// Both sides of `key = "..."` (the same name) or `key(serialize = "...",
/// deserialize = "...")`.
fn names(meta: &ParseNestedMeta<'_>) -> syn::Result<Names> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok(Names {
            serialize: Some(lit.value()),
            deserialize: Some(lit.value()),
        });
    }
    let mut names = Names::default();
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("serialize") {
            let lit: LitStr = inner.value()?.parse()?;
            names.serialize = Some(lit.value());
            Ok(())
        } else if inner.path.is_ident("deserialize") {
            let lit: LitStr = inner.value()?.parse()?;
            names.deserialize = Some(lit.value());
            Ok(())
        } else {
            skip_value(&inner)
        }
    })?;
    Ok(names)
}

/// The names a `rename` or `rename_all` gives each side of serde.
#[derive(Default)]
struct Names {
    serialize: Option<String>,
    deserialize: Option<String>,
}

impl Names {
    /// A read-side name that is not the written one (one side named alone,
    /// or two names): the struct would read a field that typed changes do
    /// not write, or write one it does not read.
    fn read_apart(&self) -> bool {
        self.deserialize != self.serialize
    }
}

/// Whether the derives of the item include `Default`.
pub(crate) fn derives_default(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .filter_map(|a| {
            a.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
                .ok()
        })
        .flatten()
        .any(|p| p.segments.last().is_some_and(|s| s.ident == "Default"))
}

/// Whether the derives of the item include `Serialize` and `Deserialize`.
pub(crate) fn serde_derives(attrs: &[Attribute]) -> (bool, bool) {
    let (mut ser, mut de) = (false, false);
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let Ok(paths) = attr.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
        else {
            continue;
        };
        for path in paths {
            match path.segments.last().map(|s| s.ident.to_string()).as_deref() {
                Some("Serialize") => ser = true,
                Some("Deserialize") => de = true,
                _ => {}
            }
        }
    }
    (ser, de)
}

/// The first `serde(...)` or `participant(...)` attribute written inside a
/// `#[cfg_attr(predicate, ...)]`: an attribute macro runs before `cfg_attr` is
/// expanded on the item's fields (and sees it unexpanded on the struct), so
/// such an attribute would be read by serde and not by `#[participant]`.
fn hidden_in_cfg_attr(attrs: &[Attribute]) -> Option<(Span, &'static str)> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg_attr"))
        .find_map(|attr| match &attr.meta {
            syn::Meta::List(list) => hidden_in_cfg_attr_list(list.tokens.clone()),
            _ => None,
        })
}

/// The same, in the tokens of one `cfg_attr(predicate, attr, attr, ...)`:
/// the attributes follow top-level commas, and a nested `cfg_attr(...)`
/// among them is searched in turn.
fn hidden_in_cfg_attr_list(tokens: TokenStream) -> Option<(Span, &'static str)> {
    use proc_macro2::TokenTree;
    let mut tokens = tokens.into_iter().peekable();
    let mut after_comma = false;
    while let Some(token) = tokens.next() {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                after_comma = true;
                continue;
            }
            TokenTree::Ident(ident) if after_comma => {
                for name in ["serde", "participant"] {
                    if ident == name {
                        return Some((ident.span(), name));
                    }
                }
                if ident == "cfg_attr" {
                    if let Some(TokenTree::Group(group)) = tokens.peek() {
                        if let Some(found) = hidden_in_cfg_attr_list(group.stream()) {
                            return Some(found);
                        }
                    }
                }
            }
            _ => {}
        }
        after_comma = false;
    }
    None
}

fn string_value(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    let name = path_text(&meta.path);
    let value = meta
        .value()
        .map_err(|_| meta.error(format_args!("`{name}` takes a string: `{name} = \"...\"`")))?;
    let mut expr: Expr = value.parse()?;
    // A literal passed through `macro_rules!` (`$c:literal`, `$c:expr`)
    // arrives in an invisible group.
    while let Expr::Group(group) = expr {
        expr = *group.expr;
    }
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format_args!("`{name}` takes a string: `{name} = \"...\"`"),
        )),
    }
}

fn flag(meta: &ParseNestedMeta<'_>, name: &str, errors: &mut Errors) -> syn::Result<()> {
    if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
        errors.at(
            span_of(&meta.path),
            format_args!("`{name}` takes no value: write just `{name}`"),
        );
        skip_value(meta)?;
    }
    Ok(())
}

fn set_once<T>(slot: &mut Option<T>, value: T, name: &str, span: Span, errors: &mut Errors) {
    if slot.is_some() {
        errors.at(
            span,
            format_args!("duplicate #[participant] option `{name}`"),
        );
    } else {
        *slot = Some(value);
    }
}

/// Consumes the value of an option this crate does not handle.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let _: Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        let _: TokenStream = content.parse()?;
    }
    Ok(())
}

fn span_of(path: &Path) -> Span {
    path.span()
}

fn path_text(path: &Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

#[cfg(test)]
mod tests {
    use super::RenameRule::*;

    #[test]
    fn casings_follow_serde() {
        let cases = [
            (Lower, "user_name"),
            (Upper, "USER_NAME"),
            (Pascal, "UserName"),
            (Camel, "userName"),
            (Snake, "user_name"),
            (ScreamingSnake, "USER_NAME"),
            (Kebab, "user-name"),
            (ScreamingKebab, "USER-NAME"),
        ];
        for (rule, expected) in cases {
            assert_eq!(rule.apply("user_name"), expected, "{rule:?}");
        }
        assert_eq!(Camel.apply("a"), "a");
        assert_eq!(Pascal.apply("x_1_y"), "X1Y");
    }
}
