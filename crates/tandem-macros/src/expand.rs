//! Code generation from the `Model`, once checked.
//!
//! For a document struct `X` the output is the struct itself, the builder
//! `XChange` and the field paths `XFields` (both nameable by users), and a
//! `const _: () = { ... };` block with every impl. For an embedded struct it is
//! the struct, `XFields<TandemDoc>` and the impls. (The parameter has an
//! unlikely name, because the field types written by the user are used inside
//! its impls.)
//!
//! When the input has errors, the same items are generated with bodies that
//! do nothing (`unimplemented!()`), so that code using them reports no
//! further errors; only the input's own errors are shown.
//!
//! The file is long because it holds one concern only: the generated items,
//! each a `quote!` template next to the others it must agree with.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, ToTokens};
use syn::ext::IdentExt;
use syn::{DeriveInput, ExprPath, Ident, Type};

use crate::check;
use crate::model::{FieldModel, IdField, Kind, Model, Shape};

/// Expands `#[participant(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut input: DeriveInput = match syn::parse2(item.clone()) {
        Ok(input) => input,
        Err(_) => {
            let error = syn::Error::new(
                Span::call_site(),
                "#[participant] applies to structs with named fields",
            )
            .into_compile_error();
            return quote! { #error #item };
        }
    };
    let (model, mut errors) = Model::build(args, &mut input);
    check::check(&model, &mut errors);
    let error = errors.finish();
    let generated = Gen::new(&model, error.is_some()).generate();
    let error = error.map(syn::Error::into_compile_error);
    quote! {
        #input
        #error
        #generated
    }
}

struct Gen<'a> {
    m: &'a Model,
    /// Generate signatures only (the input has errors).
    stub: bool,
    /// `path::to::tandem::__private`.
    p: TokenStream,
    /// Wrappers of fields serialized through `serialize_with`, emitted in the const block.
    wrappers: std::cell::RefCell<Vec<TokenStream>>,
}

impl<'a> Gen<'a> {
    fn new(m: &'a Model, stub: bool) -> Self {
        let krate = &m.krate;
        Gen {
            m,
            stub,
            p: quote!(#krate::__private),
            wrappers: Default::default(),
        }
    }

    fn fields(&self) -> &'a [FieldModel] {
        if self.m.generic {
            &[]
        } else {
            &self.m.fields
        }
    }

    fn body(&self, body: TokenStream) -> TokenStream {
        if self.stub {
            quote!(::core::unimplemented!())
        } else {
            body
        }
    }

    fn generate(&self) -> TokenStream {
        match &self.m.kind {
            Kind::Document {
                collection,
                db,
                marker,
                id,
            } => self.document(collection, db.as_deref(), marker, id.as_deref()),
            Kind::Embedded => self.embedded(),
        }
    }

    fn change_ident(&self) -> Ident {
        let ident = &self.m.ident;
        format_ident!("{}Change", ident.unraw(), span = ident.span())
    }

    fn fields_ident(&self) -> Ident {
        let ident = &self.m.ident;
        format_ident!("{}Fields", ident.unraw(), span = ident.span())
    }

    /// A value serialized as the field does: through its `serialize_with` function, if any.
    fn serialized(&self, value: TokenStream, ty: &Type, with: Option<&ExprPath>) -> TokenStream {
        let Some(with) = with else {
            return value;
        };
        let p = &self.p;
        let mut wrappers = self.wrappers.borrow_mut();
        let name = format_ident!("__TandemSerializeWith{}", wrappers.len());
        wrappers.push(quote! {
            #[allow(non_camel_case_types)]
            struct #name<'a>(&'a #ty);
            #[automatically_derived]
            impl #p::serde::Serialize for #name<'_> {
                fn serialize<S>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error>
                where
                    S: #p::serde::Serializer,
                {
                    #with(self.0, serializer)
                }
            }
        });
        quote!(#name(&#value))
    }

    fn document(
        &self,
        collection: &str,
        db: Option<&str>,
        marker: &str,
        id: Option<&IdField>,
    ) -> TokenStream {
        let m = self.m;
        let p = &self.p;
        let ident = &m.ident;
        let vis = &m.vis;
        let change = self.change_ident();
        let fields = self.fields_ident();
        let (impl_generics, ty_generics, where_clause) = m.generics.split_for_impl();

        let place = match db {
            Some(db) => format!("the collection `{collection}` of the database `{db}`"),
            None => format!("the collection `{collection}` of the coordinator's default database"),
        };
        let change_doc = format!(
            "A typed change of one [`{ident}`] document.\n\n\
             Start one with `{ident}::change(id)` (an update of fields), `{ident}::delete(id)` or \
             `document.insert()`, chain field changes and guards, and add it to a transaction. \
             Each method records the change under the field's stored path, exactly as the \
             untyped `DocumentChange` builder would; `DocumentChange::from` converts it.\n\n\
             The documents live in {place} and carry the marker array `{marker}`.\n\n\
             Generated by `#[participant]`."
        );
        let fields_doc = format!(
            "The typed paths of the fields of [`{ident}`], returned by [`{ident}::fields`].\n\n\
             Each method returns the `Field` of one field, to pass to the generic methods of \
             [`{change}`] such as [`{change}::set`] and [`{change}::require`]. A field marked \
             `#[participant(nested)]` returns the paths of the embedded struct's fields instead.\n\n\
             Generated by `#[participant]`."
        );

        let db_tokens = match db {
            Some(db) => quote!(::core::option::Option::Some(#db)),
            None => quote!(::core::option::Option::None),
        };

        let (id_ty, id_param, id_into) = match id {
            Some(id) => {
                let ty = &id.ty;
                if id.number {
                    (quote!(#ty), quote!(#ty), quote!(id))
                } else {
                    (
                        quote!(#ty),
                        quote!(impl ::core::convert::Into<#ty>),
                        quote!(::core::convert::Into::into(id)),
                    )
                }
            }
            None => (quote!(()), quote!(impl ::core::marker::Sized), quote!(())),
        };
        let id_value = match id {
            Some(id) => self.serialized(quote!(id), &id.ty, id.serialize_with.as_ref()),
            None => quote!(id),
        };

        let update_body = self.body(quote! {
            #change { inner: #p::update::<Self, _>(&#id_value) }
        });
        let delete_body = self.body(quote! {
            #change { inner: #p::delete::<Self, _>(&#id_value) }
        });
        let insert_body = self.body(quote! {
            #change { inner: #p::insert(self) }
        });

        let change_fn_doc = format!(
            "Starts a change of the existing `{ident}` document whose `_id` is `id`.\n\n\
             Chain field changes and guards on the returned [`{change}`]; the documents live in {place}."
        );
        let delete_fn_doc = format!(
            "The deletion of the `{ident}` document whose `_id` is `id`.\n\n\
             The document is removed when the transaction commits, and stays if it is canceled."
        );
        let insert_fn_doc = format!(
            "The insertion of this document, under the id of its `_id` field, into {place}.\n\n\
             If the transaction is canceled, the document is removed again."
        );
        let get_body = self.body(quote! {
            let id: #id_ty = #id_into;
            let id = #p::id_bson(&#id_value)?;
            #p::ReadDocuments::<Self>::read_by_id(from, id).await
        });
        let find_body = self.body(quote! {
            #p::ReadDocuments::<Self>::read_matching(from, filter, ::core::option::Option::None).await
        });
        let in_flight_body = self.body(quote! {
            let id: #id_ty = #id_into;
            coordinator.in_flight::<Self, _>(&#id_value).await
        });
        let insert_now_body = self.body(quote!(coordinator.insert::<Self>(doc).await));
        let put_body = self.body(quote!(coordinator.put::<Self>(doc).await));
        let get_fn_doc = format!(
            "Reads the `{ident}` document whose `_id` is `id` from {place}, through `from` \
             (a `tandem::Coordinator` or an `Arc` of one).\n\n\
             `None` when there is no such document, or only the placeholder a pending insert \
             reserved. The document may have a transaction in flight (see `{ident}::in_flight`). \
             Needs `{ident}: serde::Deserialize`."
        );
        let find_fn_doc = format!(
            "Reads every `{ident}` document matching `filter` (a MongoDB filter) from {place}, \
             sorted by `_id`, placeholders of pending inserts left out.\n\n\
             Needs `{ident}: serde::Deserialize`."
        );
        let in_flight_fn_doc = format!(
            "Whether the `{ident}` document whose `_id` is `id` has a transaction in flight \
             (a marker, a lock, a pending count, or an insert's placeholder); `false` when there \
             is no such document. Reads that must not see half of a transaction wait until \
             this is `false`."
        );
        let insert_now_fn_doc = format!(
            "Inserts `doc` into {place} at once, outside any transaction (e.g. to set up data); \
             fails with `StoreErrorKind::DuplicateKey` if its `_id` is taken. \
             In a transaction, add `doc.insert()` instead."
        );
        let put_fn_doc = format!(
            "Writes `doc` into {place} at once, outside any transaction: inserts it, or replaces \
             the document with its `_id` if no transaction is in flight on it (else \
             `StoreErrorKind::InFlight`, and nothing changes). For setting up and resetting data."
        );
        let fields_fn_doc = format!(
            "The typed paths of the fields of `{ident}`, for the generic methods of [`{change}`] \
             such as [`{change}::set`]."
        );

        let field_methods = self.change_methods(&change);
        // The typed paths of a (rejected) generic struct would need its parameters.
        let generic_methods = (!m.generic).then(|| self.generic_methods(&quote!(#ident)));
        let path_methods = self.path_methods(&quote!(#ident), None);
        let in_store_body = self.body(quote! {
            #change { inner: self.inner.in_store(store) }
        });
        let from_body = self.body(quote!(change.inner));
        let as_ref_body = self.body(quote!(&self.inner));
        let allow_stub = self.stub.then(|| quote!(#[allow(unused_variables)]));
        let wrappers = self.wrappers.borrow();

        quote! {
            #[doc = #change_doc]
            #[must_use = "a change does nothing until it is added to a transaction"]
            #[derive(::core::clone::Clone, ::core::fmt::Debug, ::core::cmp::PartialEq)]
            #vis struct #change {
                inner: #p::DocumentChange,
            }

            #[doc = #fields_doc]
            #[derive(
                ::core::clone::Clone,
                ::core::marker::Copy,
                ::core::fmt::Debug,
                ::core::default::Default,
            )]
            #vis struct #fields {
                _private: (),
            }

            const _: () = {
                #(#wrappers)*

                #[automatically_derived]
                #allow_stub
                impl #impl_generics #p::ParticipantDocument for #ident #ty_generics #where_clause {
                    type Id = #id_ty;
                    type Change = #change;
                    type Fields = #fields;
                    const COLLECTION: &'static str = #collection;
                    const DB: ::core::option::Option<&'static str> = #db_tokens;
                    const MARKER: &'static str = #marker;

                    fn fields() -> #fields {
                        #fields { _private: () }
                    }

                    fn update(id: Self::Id) -> #change {
                        #update_body
                    }

                    fn delete(id: Self::Id) -> #change {
                        #delete_body
                    }

                    fn insert(&self) -> #change {
                        #insert_body
                    }
                }

                #[automatically_derived]
                #[allow(dead_code, unused_variables)]
                impl #impl_generics #ident #ty_generics #where_clause {
                    #[doc = #change_fn_doc]
                    pub fn change(id: #id_param) -> #change {
                        <Self as #p::ParticipantDocument>::update(#id_into)
                    }

                    #[doc = #delete_fn_doc]
                    pub fn delete(id: #id_param) -> #change {
                        <Self as #p::ParticipantDocument>::delete(#id_into)
                    }

                    #[doc = #insert_fn_doc]
                    pub fn insert(&self) -> #change {
                        <Self as #p::ParticipantDocument>::insert(self)
                    }

                    #[doc = #fields_fn_doc]
                    pub fn fields() -> #fields {
                        #fields { _private: () }
                    }

                    #[doc = #get_fn_doc]
                    pub async fn get<R>(
                        from: &R,
                        id: #id_param,
                    ) -> ::core::result::Result<::core::option::Option<Self>, #p::StoreError>
                    where
                        R: #p::ReadDocuments<Self> + ?::core::marker::Sized,
                    {
                        #get_body
                    }

                    #[doc = #find_fn_doc]
                    pub async fn find<R>(
                        from: &R,
                        filter: #p::bson::Document,
                    ) -> ::core::result::Result<::std::vec::Vec<Self>, #p::StoreError>
                    where
                        R: #p::ReadDocuments<Self> + ?::core::marker::Sized,
                    {
                        #find_body
                    }

                    #[doc = #in_flight_fn_doc]
                    pub async fn in_flight(
                        coordinator: &#p::Coordinator,
                        id: #id_param,
                    ) -> ::core::result::Result<bool, #p::StoreError> {
                        #in_flight_body
                    }

                    #[doc = #insert_now_fn_doc]
                    pub async fn insert_now(
                        coordinator: &#p::Coordinator,
                        doc: &Self,
                    ) -> ::core::result::Result<(), #p::StoreError> {
                        #insert_now_body
                    }

                    #[doc = #put_fn_doc]
                    pub async fn put(
                        coordinator: &#p::Coordinator,
                        doc: &Self,
                    ) -> ::core::result::Result<(), #p::StoreError> {
                        #put_body
                    }
                }

                #[automatically_derived]
                #allow_stub
                impl ::core::convert::From<#change> for #p::DocumentChange {
                    fn from(change: #change) -> Self {
                        #from_body
                    }
                }

                #[automatically_derived]
                impl ::core::convert::AsRef<#p::DocumentChange> for #change {
                    fn as_ref(&self) -> &#p::DocumentChange {
                        #as_ref_body
                    }
                }

                #[automatically_derived]
                #[allow(dead_code, unused_variables, non_snake_case)]
                impl #change {
                    /// Uses the named store of the coordinator instead of its default store.
                    pub fn in_store(self, store: impl ::core::convert::Into<::std::string::String>) -> Self {
                        #in_store_body
                    }

                    #field_methods

                    #generic_methods
                }

                #[automatically_derived]
                #[allow(dead_code, non_snake_case)]
                impl #fields {
                    #path_methods
                }
            };
        }
    }

    fn embedded(&self) -> TokenStream {
        let m = self.m;
        let p = &self.p;
        let ident = &m.ident;
        let vis = &m.vis;
        let fields = self.fields_ident();
        let (impl_generics, ty_generics, where_clause) = m.generics.split_for_impl();

        let fields_doc = format!(
            "The typed paths of the fields of [`{ident}`], embedded in documents of type `TandemDoc`.\n\n\
             A field of type `{ident}` marked `#[participant(nested)]` returns these, prefixed with \
             its own path. Each method returns the `Field` of one field; as a `FieldPath`, this \
             names the whole embedded `{ident}`.\n\n\
             Generated by `#[participant(embedded)]`."
        );
        let path_methods = self.path_methods(&quote!(TandemDoc), Some(quote!(&self.path)));
        let fields_at_body = self.body(quote! {
            #fields { path, nullable, optional_parents, document: #p::PhantomData }
        });
        let allow_stub = self.stub.then(|| quote!(#[allow(unused_variables)]));
        let wrappers = self.wrappers.borrow();
        // The value of a (rejected) generic struct would need its parameters.
        let field_path = (!m.generic).then(|| {
            quote! {
                #[automatically_derived]
                impl<TandemDoc> #p::FieldPath<TandemDoc> for #fields<TandemDoc> {
                    type Value = #ident;

                    fn path(&self) -> &str {
                        &self.path
                    }

                    fn nullable(&self) -> bool {
                        self.nullable
                    }

                    fn optional_parents(&self) -> &[::std::string::String] {
                        &self.optional_parents
                    }
                }
            }
        });

        quote! {
            #[doc = #fields_doc]
            #vis struct #fields<TandemDoc> {
                path: ::std::string::String,
                nullable: bool,
                optional_parents: ::std::vec::Vec<::std::string::String>,
                document: #p::PhantomData<fn() -> TandemDoc>,
            }

            const _: () = {
                #(#wrappers)*

                #[automatically_derived]
                #allow_stub
                impl #impl_generics #p::Embedded for #ident #ty_generics #where_clause {
                    type Fields<TandemDoc> = #fields<TandemDoc>;

                    fn fields_at<TandemDoc>(
                        path: ::std::string::String,
                        nullable: bool,
                        optional_parents: ::std::vec::Vec<::std::string::String>,
                    ) -> #fields<TandemDoc> {
                        #fields_at_body
                    }
                }

                #field_path

                #[automatically_derived]
                impl<TandemDoc> ::core::clone::Clone for #fields<TandemDoc> {
                    fn clone(&self) -> Self {
                        #fields {
                            path: ::core::clone::Clone::clone(&self.path),
                            nullable: self.nullable,
                            optional_parents: ::core::clone::Clone::clone(&self.optional_parents),
                            document: #p::PhantomData,
                        }
                    }
                }

                #[automatically_derived]
                impl<TandemDoc> ::core::fmt::Debug for #fields<TandemDoc> {
                    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                        f.debug_tuple(::core::stringify!(#fields)).field(&self.path).finish()
                    }
                }

                #[automatically_derived]
                #[allow(dead_code, non_snake_case)]
                impl<TandemDoc> #fields<TandemDoc> {
                    #path_methods
                }
            };
        }
    }

    /// The per-field methods of the builder.
    fn change_methods(&self, change: &Ident) -> TokenStream {
        let mut out = TokenStream::new();
        for f in self.fields() {
            out.extend(self.field_change_methods(f, change));
        }
        out
    }

    fn field_change_methods(&self, f: &FieldModel, change: &Ident) -> TokenStream {
        let p = &self.p;
        let ty = &f.ty;
        let span = f.member.span();
        let name = &f.name;
        let stored = &f.stored;
        let with = f.serialize_with.as_ref();
        let method =
            |prefix: &str, suffix: &str| Ident::new(&format!("{prefix}{name}{suffix}"), span);
        let field_text = format!("`{name}` (stored at `{stored}`)");
        let restored =
            "If the transaction is canceled, the field gets back the value it had before.";

        // `value: T` for numbers, so that literals take the field's type; `impl Into<T>` otherwise.
        let param = |ty: &Type, number: bool| {
            if number {
                (quote!(#ty), quote!())
            } else {
                (
                    quote!(impl ::core::convert::Into<#ty>),
                    quote!(let value: #ty = ::core::convert::Into::into(value);),
                )
            }
        };
        let (value_ty, convert) = param(ty, f.shape.is_number());
        let value = self.serialized(quote!(value), ty, with);

        // An `Option` that serde leaves out when its `skip_serializing_if`
        // says so (and reads back as `None` when absent): a value the
        // predicate skips is stored by removing the field, as serde stores
        // it, before any `serialize_with` function would be given it.
        let left_out = (matches!(f.shape, Shape::Option) && f.none_absent && !f.may_be_absent)
            .then(|| match &f.skip_if {
                Some(skip) => quote!(#skip(&value)),
                None => quote!(::core::option::Option::is_none(&value)),
            });
        let set_body = match &left_out {
            Some(skipped) => quote! {
                #convert
                if #skipped {
                    #change { inner: self.inner.unset(#stored) }
                } else {
                    #change { inner: self.inner.set(#stored, #value) }
                }
            },
            None => quote! {
                #convert
                #change { inner: self.inner.set(#stored, #value) }
            },
        };
        let set_doc = match &left_out {
            Some(_) => format!(
                "Sets {field_text} to `value`; a value serde leaves out \
                 (`skip_serializing_if`) is stored by removing the field.\n\n{restored}"
            ),
            None => format!("Sets {field_text} to `value`.\n\n{restored}"),
        };

        // (doc, name, parameters after `self`, body), in the order rustdoc lists them.
        let mut methods: Vec<(String, Ident, TokenStream, TokenStream)> = Vec::new();
        methods.push((
            set_doc,
            method("set_", ""),
            quote!(, value: #value_ty),
            set_body,
        ));
        match &f.shape {
            Shape::Number { inc: true } if with.is_none() && !f.may_be_absent => methods.push((
                format!(
                    "Adds `by` to {field_text}.\n\n\
                     Increments commute: other transactions may increment the same document at \
                     the same time. If the transaction is canceled, `by` is subtracted again."
                ),
                method("inc_", ""),
                quote!(, by: #ty),
                quote!(#change { inner: self.inner.inc(#stored, by) }),
            )),
            // `None` as serde stores it: left out, for a field whose absence
            // reads as `None` (`skip_serializing_if`, nothing else reading
            // it); else `null`, or what a `with` module writes, since an
            // absent field may read as something else (a `default`, or an
            // error from `deserialize_with`).
            Shape::Option if left_out.is_some() => {
                let none = self.serialized(quote!(value), ty, with);
                let skipped = &left_out;
                methods.push((
                    format!(
                        "Sets {field_text} to `None` as serde stores it: removes the field where \
                         `skip_serializing_if` leaves `None` out.\n\n{restored}"
                    ),
                    method("unset_", ""),
                    quote!(),
                    quote! {
                        let value: #ty = ::core::option::Option::None;
                        if #skipped {
                            #change { inner: self.inner.unset(#stored) }
                        } else {
                            #change { inner: self.inner.set(#stored, #none) }
                        }
                    },
                ))
            }
            Shape::Option => {
                let none = self.serialized(quote!(value), ty, with);
                methods.push((
                    format!(
                        "Sets {field_text} to `None`, stored as serde stores it, so that the \
                         struct reads `None` back.\n\n{restored}"
                    ),
                    method("unset_", ""),
                    quote!(),
                    quote! {
                        let value: #ty = ::core::option::Option::None;
                        #change { inner: self.inner.set(#stored, #none) }
                    },
                ))
            }
            Shape::Vec { elem, number } if with.is_none() => {
                let (elem_ty, convert) = param(elem, *number);
                let restored = "If the transaction is canceled, the array gets back the elements it had before.";
                methods.push((
                    format!("Appends `value` to the array {field_text}.\n\n{restored}"),
                    method("push_", ""),
                    quote!(, value: #elem_ty),
                    quote! {
                        #convert
                        #change { inner: self.inner.push(#stored, value) }
                    },
                ));
                // Not for elements serialized in hash order: two equal
                // ones need not be equal in BSON.
                if !f.unordered {
                    methods.push((
                    format!("Removes every element equal to `value` from the array {field_text}.\n\n{restored}"),
                    method("pull_", ""),
                    quote!(, value: #elem_ty),
                    quote! {
                        #convert
                        #change { inner: self.inner.pull(#stored, value) }
                    },
                ));
                }
            }
            _ => {}
        }

        let guard_doc = |what: &str| {
            format!("Guard: the change applies only if {field_text} {what}; otherwise the transaction is canceled.")
        };
        // A field that may be absent while the struct reads its default has
        // no value guard: `$ne` would pass on the absent field, `$eq` refuse.
        // Nor a field serialized in hash order (`HashMap`, `HashSet`): two
        // equal values need not be equal in BSON.
        let mut compare = if f.may_be_absent || f.unordered {
            vec![]
        } else {
            vec![("Eq", "equals `value`"), ("Ne", "differs from `value`")]
        };
        // Ordered guards compare the stored values: not for a field stored
        // through its own serializer (a number written as a string would
        // compare as text).
        if matches!(f.shape, Shape::Number { .. } | Shape::Ordered)
            && with.is_none()
            && !f.may_be_absent
        {
            compare.extend([
                ("Gt", "is greater than `value`"),
                ("Gte", "is at least `value`"),
                ("Lt", "is less than `value`"),
                ("Lte", "is at most `value`"),
            ]);
        }
        for (op, what) in compare {
            let suffix = format!("_{}", op.to_lowercase());
            let op = Ident::new(op, Span::call_site());
            methods.push((
                guard_doc(what),
                method("require_", &suffix),
                quote!(, value: #value_ty),
                quote! {
                    #convert
                    #change { inner: self.inner.require(#stored, #p::GuardOp::#op, #value) }
                },
            ));
        }
        // Not through a `with` module, which may store `None` as something
        // other than `null` (an empty string): `require_f_eq(None)` goes
        // through it instead.
        if matches!(f.shape, Shape::Option) && !f.may_be_absent && with.is_none() {
            // Serde stores `None` as `null`, which `$exists` counts as present:
            // the guards test what the struct reads, `Some` or `None`.
            for (name, op, what) in [
                (
                    "exists",
                    "Ne",
                    "holds a value (`Some`: present and not `null`)",
                ),
                ("missing", "Eq", "holds no value (`None`: absent or `null`)"),
            ] {
                let suffix = format!("_{name}");
                let op = Ident::new(op, Span::call_site());
                methods.push((
                    guard_doc(what),
                    method("require_", &suffix),
                    quote!(),
                    quote! {
                        #change {
                            inner: self.inner.require(#stored, #p::GuardOp::#op, #p::bson::Bson::Null),
                        }
                    },
                ));
            }
        }

        methods
            .into_iter()
            .map(|(doc, ident, params, body)| {
                let body = self.body(body);
                quote! {
                    #[doc = #doc]
                    pub fn #ident(self #params) -> Self {
                        #body
                    }
                }
            })
            .collect()
    }

    /// The builder methods taking a typed field path.
    fn generic_methods(&self, doc: &TokenStream) -> TokenStream {
        let p = &self.p;
        let change = self.change_ident();
        let ident = &self.m.ident;
        let fields_link = format!("[`{ident}::fields`]");
        let body = |b: TokenStream| self.body(b);
        let path = quote!(#p::FieldPath::path(&field));

        let set_doc = format!(
            "Sets `field` (a path from {fields_link}) to `value`.\n\n\
             If the transaction is canceled, the field gets back the value it had before.\n\n\
             A path below an `Option` embedded document guards the change on that document \
             existing (`FieldPath::optional_parents`)."
        );
        // A change that would create the field guards its optional parents
        // (`FieldPath::optional_parents`).
        let held = quote!(#p::parents_held::<#doc, F>(self.inner, &field));
        let set = body(quote!(#change { inner: #held.set(#path, value) }));
        let inc_doc = format!(
            "Adds `by` to the number `field` (a path from {fields_link}).\n\n\
             Increments commute: other transactions may increment the same document at the same \
             time. If the transaction is canceled, `by` is subtracted again.\n\n\
             A path below an `Option` embedded document guards the change on that document \
             existing (`FieldPath::optional_parents`)."
        );
        let inc = body(quote!(#change { inner: #held.inc(#path, by) }));
        let unset_doc = format!(
            "Removes the optional `field` (a path from {fields_link}) from the document.\n\n\
             If the transaction is canceled, the field gets back the value it had before."
        );
        let unset = body(quote!(#change { inner: self.inner.unset(#path) }));
        let push_doc = format!(
            "Appends `value` to the array `field` (a path from {fields_link}).\n\n\
             A path below an `Option` embedded document guards the change on that document \
             existing (`FieldPath::optional_parents`)."
        );
        let push = body(quote!(#change { inner: #held.push(#path, value) }));
        let pull_doc =
            format!("Removes every element equal to `value` from the array `field` (a path from {fields_link}).");
        let pull = body(quote!(#change { inner: self.inner.pull(#path, value) }));
        let require_doc = format!(
            "Guard: the change applies only if `field` (a path from {fields_link}) compares to \
             `value` as `op` says; otherwise the transaction is canceled."
        );
        let require = body(quote!(#change { inner: self.inner.require(#path, op, value) }));

        let guard = |op: &str, what: &str| {
            let doc_text = format!(
                "Guard: the change applies only if `field` (a path from {fields_link}) {what}; \
                 otherwise the transaction is canceled."
            );
            let name = Ident::new(&format!("require_{}", op.to_lowercase()), Span::call_site());
            let op = Ident::new(op, Span::call_site());
            let body =
                body(quote!(#change { inner: self.inner.require(#path, #p::GuardOp::#op, value) }));
            quote! {
                #[doc = #doc_text]
                pub fn #name<F>(self, field: F, value: F::Value) -> Self
                where
                    F: #p::FieldPath<#doc>,
                    F::Value: #p::serde::Serialize,
                {
                    #body
                }
            }
        };
        let guards = [
            guard("Eq", "equals `value`"),
            guard("Ne", "differs from `value`"),
            guard("Gt", "is greater than `value`"),
            guard("Gte", "is at least `value`"),
            guard("Lt", "is less than `value`"),
            guard("Lte", "is at most `value`"),
        ];
        let presence = |op: &str, null_op: &str, what: &str| {
            let doc_text = format!(
                "Guard: the change applies only if `field` (a path from {fields_link}) {what}; \
                 otherwise the transaction is canceled.\n\n\
                 For the path of an `Option` field, a stored `null` (serde's `None`) counts as \
                 no value (see `FieldPath::nullable`)."
            );
            let name = Ident::new(&format!("require_{}", op.to_lowercase()), Span::call_site());
            let op = Ident::new(op, Span::call_site());
            let null_op = Ident::new(null_op, Span::call_site());
            let body = body(quote! {
                let op = if #p::FieldPath::nullable(&field) {
                    #p::GuardOp::#null_op
                } else {
                    #p::GuardOp::#op
                };
                #change { inner: self.inner.require(#path, op, #p::bson::Bson::Null) }
            });
            quote! {
                #[doc = #doc_text]
                pub fn #name<F>(self, field: F) -> Self
                where
                    F: #p::FieldPath<#doc>,
                {
                    #body
                }
            }
        };
        let exists = presence("Exists", "Ne", "holds a value");
        let missing = presence("Missing", "Eq", "holds no value");

        quote! {
            #[doc = #set_doc]
            pub fn set<F>(self, field: F, value: F::Value) -> Self
            where
                F: #p::FieldPath<#doc>,
                F::Value: #p::serde::Serialize,
            {
                #set
            }

            #[doc = #inc_doc]
            pub fn inc<F>(self, field: F, by: F::Value) -> Self
            where
                F: #p::FieldPath<#doc>,
                F::Value: #p::Numeric,
            {
                #inc
            }

            #[doc = #unset_doc]
            pub fn unset<F, T>(self, field: F) -> Self
            where
                F: #p::FieldPath<#doc, Value = ::core::option::Option<T>>,
            {
                #unset
            }

            #[doc = #push_doc]
            pub fn push<F, T>(self, field: F, value: T) -> Self
            where
                F: #p::FieldPath<#doc, Value = ::std::vec::Vec<T>>,
                T: #p::serde::Serialize,
            {
                #push
            }

            #[doc = #pull_doc]
            pub fn pull<F, T>(self, field: F, value: T) -> Self
            where
                F: #p::FieldPath<#doc, Value = ::std::vec::Vec<T>>,
                T: #p::serde::Serialize,
            {
                #pull
            }

            #[doc = #require_doc]
            pub fn require<F>(self, field: F, op: #p::GuardOp, value: F::Value) -> Self
            where
                F: #p::FieldPath<#doc>,
                F::Value: #p::serde::Serialize,
            {
                #require
            }

            #(#guards)*
            #exists
            #missing
        }
    }

    /// The methods of the fields type: one typed path per field.
    ///
    /// `doc` is the document type of the paths; `prefix` the expression of the
    /// embedded document's own path (`None` at the root).
    fn path_methods(&self, doc: &TokenStream, prefix: Option<TokenStream>) -> TokenStream {
        let p = &self.p;
        let mut out = TokenStream::new();
        for f in self.fields() {
            if f.serialize_with.is_some()
                || f.deserialize_with
                || f.unordered
                || f.may_be_absent
                || crate::model::text_date(&f.ty)
            {
                // A typed path would let values bypass the field's serializer,
                // guard a value the document may not hold, or compare dates
                // stored as text in order (the generic ordered guards).
                continue;
            }
            let member = &f.member;
            let name = &f.name;
            let stored = &f.stored;
            let ty = &f.ty;
            let shown = match &prefix {
                Some(_) => format!("`<path>.{stored}`"),
                None => format!("`{stored}`"),
            };
            let path = match &prefix {
                Some(prefix) => quote!(#p::join(#prefix, #stored)),
                None => quote!(::std::string::String::from(#stored)),
            };
            // The `Option` embedded documents the field lies below: the
            // embedded document's own, and itself if it is an `Option`.
            let parents = match &prefix {
                Some(_) => {
                    quote!(#p::parents_below(&self.optional_parents, &self.path, self.nullable))
                }
                None => quote!(::std::vec::Vec::new()),
            };
            let tokens = match &f.nested {
                Some(nested) => {
                    let doc_text = format!(
                        "The paths of the fields of `{name}`, an embedded `{}` stored at {shown}.",
                        type_text(nested)
                    );
                    // Spanned at the field's type, where a missing `Embedded` is reported.
                    let span = syn::spanned::Spanned::span(nested);
                    let fields_ty = respan(quote!(<#nested as #p::Embedded>::Fields<#doc>), span);
                    let fields_at =
                        respan(quote!(<#nested as #p::Embedded>::fields_at::<#doc>), span);
                    let nullable = matches!(f.shape, Shape::Option);
                    let body =
                        self.body(respan(quote!(#fields_at(#path, #nullable, #parents)), span));
                    quote! {
                        #[doc = #doc_text]
                        #[must_use]
                        pub fn #member(&self) -> #fields_ty {
                            #body
                        }
                    }
                }
                None => {
                    let doc_text = format!("The path of `{name}`, stored at {shown}.");
                    let nullable = matches!(f.shape, Shape::Option);
                    let body = self.body(quote!(#p::field_below(#path, #nullable, #parents)));
                    quote! {
                        #[doc = #doc_text]
                        #[must_use]
                        pub fn #member(&self) -> #p::Field<#doc, #ty> {
                            #body
                        }
                    }
                }
            };
            out.extend(tokens);
        }
        out
    }
}

/// The tokens, all with the span `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut inner =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = proc_macro2::TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

/// A type as written, without the spaces of token printing.
fn type_text(ty: &Type) -> String {
    let mut text = ty.to_token_stream().to_string();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" < ", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
    ] {
        text = text.replace(from, to);
    }
    text
}
