//! Expansion snapshots: the expander's output for fixed inputs, pretty-printed
//! and compared with `tests/snapshots/*.rs.snap`. Run with `UPDATE_SNAPSHOTS=1`
//! to write the files anew after an intended change of the generated code.

use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::quote;

fn pretty(tokens: TokenStream) -> String {
    let file: syn::File = syn::parse2(tokens).expect("the expansion parses as a file");
    prettyplease::unparse(&file)
}

fn check(name: &str, args: TokenStream, item: TokenStream) {
    let header = format!("// #[participant({args})]\n");
    let actual = header + &pretty(crate::expand::expand(args, item));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.rs.snap"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_SNAPSHOTS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{}: the expansion changed (first difference at line {}); \
             run with UPDATE_SNAPSHOTS=1 to accept it\n--- actual ---\n{actual}",
            path.display(),
            line + 1
        );
    }
}

#[test]
fn account() {
    check(
        "account",
        quote!(collection = "accounts"),
        quote! {
            #[derive(Serialize, Deserialize)]
            pub struct Account {
                #[serde(rename = "_id")]
                pub id: String,
                pub balance: i64,
                pub nick: Option<String>,
                pub tags: Vec<String>,
            }
        },
    );
}

#[test]
fn renamed_with_options() {
    check(
        "renamed_with_options",
        quote!(
            collection = "orders",
            db = "shop",
            marker = "txs",
            crate = "::tandem_alias"
        ),
        quote! {
            #[derive(serde::Serialize, serde::Deserialize)]
            #[serde(rename_all = "camelCase")]
            pub(crate) struct Order {
                #[participant(id)]
                #[serde(rename = "_id")]
                id: i64,
                order_state: State,
                #[serde(rename = "total")]
                total_cents: i32,
                #[serde(default)]
                txs: Vec<String>,
                #[participant(skip)]
                cache: u8,
                #[serde(skip)]
                scratch: u8,
                #[serde(with = "as_text")]
                code: u32,
            }
        },
    );
}

#[test]
fn embedded() {
    check(
        "embedded",
        quote!(embedded),
        quote! {
            #[derive(Serialize, Deserialize)]
            #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
            pub struct Address {
                pub city: String,
                pub zip_code: Option<String>,
                #[participant(nested)]
                pub geo: Geo,
            }
        },
    );
}

#[test]
fn nested_document() {
    check(
        "nested_document",
        quote!(collection = "customers"),
        quote! {
            #[derive(Serialize, Deserialize)]
            struct Customer {
                #[serde(rename = "_id")]
                id: ObjectId,
                #[participant(nested)]
                address: Address,
                #[participant(nested)]
                billing: Option<Address>,
            }
        },
    );
}

#[test]
fn errors_give_stubs() {
    check(
        "errors_give_stubs",
        quote!(colection = "accounts"),
        quote! {
            #[derive(Serialize, Deserialize)]
            struct Account {
                balance: i64,
                #[participant(nested, whatever)]
                address: Address,
            }
        },
    );
}

#[test]
fn enum_input_keeps_the_item() {
    check(
        "enum_input",
        quote!(collection = "states"),
        quote! {
            #[derive(Serialize, Deserialize)]
            enum State {
                Paid,
            }
        },
    );
}
