//! Procedural macros for `fabric`, re-exported by it: use them as `fabric::direct!` and
//! `#[derive(fabric::CqFormat)]`.
//!
//! - [`direct!`](macro@direct) picks the static stack at build time, with the provider
//!   named by the build-time variable `FABRIC_DIRECT` (one binary per cluster).
//! - [`CqFormat`](macro@CqFormat) turns a `#[repr(C)]` struct holding a subset of the
//!   completion fields into a CQ entry format (the `C` parameter of a stack).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, LitStr, Token, Type};

/// The build-time variable naming the provider of [`direct!`](macro@direct).
const ENV: &str = "FABRIC_DIRECT";

/// The provider used when `FABRIC_DIRECT` is unset or empty.
const DEFAULT_PROVIDER: &str = "loopback";

/// Known provider names and the provider type each selects. A provider whose crate does
/// not exist yet (or is not a dependency) fails at the generated path, naming its crate.
const PROVIDERS: &[(&str, &str)] = &[
    ("loopback", "::fabric_loopback::Loopback"),
    ("shm", "::fabric_shm::Shm"),
    ("tcp", "::fabric_tcp::Tcp"),
    ("udp", "::fabric_udp::Udp"),
];

/// The provider type path for `name` (`None`: the default), or the error text naming the
/// known providers.
fn resolve_provider(name: Option<&str>) -> Result<&'static str, String> {
    let name = match name.map(str::trim) {
        None | Some("") => DEFAULT_PROVIDER,
        Some(n) => n,
    };
    PROVIDERS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, path)| *path)
        .ok_or_else(|| {
            let known: Vec<&str> = PROVIDERS.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown fabric provider `{name}` (from {ENV} or `provider = ...`); known providers: {}",
                known.join(", ")
            )
        })
}

/// One `key = value` argument of `direct!`.
struct Arg {
    key: Ident,
    value: ArgValue,
}

enum ArgValue {
    Name(LitStr),
    Type(Box<Type>),
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let key: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let value = if input.peek(LitStr) {
            ArgValue::Name(input.parse()?)
        } else {
            ArgValue::Type(Box::new(input.parse()?))
        };
        Ok(Arg { key, value })
    }
}

/// Maps a short name (`Domain`, `Manual`, `Tagged`, `Table`, ...) of parameter `key` to
/// its `fabric` type; any other type is used as written.
fn short_name(key: &str, ty: &Type) -> TokenStream2 {
    let Type::Path(p) = ty else {
        return ty.to_token_stream();
    };
    let Some(id) = p.path.get_ident().filter(|_| p.qself.is_none()) else {
        return ty.to_token_stream();
    };
    let mapped = match (key, id.to_string().as_str()) {
        ("threading", "Domain") => "ThreadDomain",
        ("threading", "Safe") => "ThreadSafe",
        ("threading", "Endpoint") => "ThreadEndpoint",
        ("threading", "Completion") => "ThreadCompletion",
        ("progress", "Manual") => "Manual",
        ("progress", "Auto") => "Auto",
        ("cq", "Context") => "CqContext",
        ("cq", "Msg") => "CqMsg",
        ("cq", "Data") => "CqData",
        ("cq", "Tagged") => "CqTagged",
        ("av", "Table") => "Table",
        ("av", "Map") => "Map",
        _ => return ty.to_token_stream(),
    };
    let mapped = Ident::new(mapped, id.span());
    quote!(::fabric::#mapped)
}

/// The static stack picked at build time: `fabric::direct!(threading = Domain, progress =
/// Manual, cq = Tagged, av = Table)` is the type
/// `fabric::Stack<Provider, ThreadDomain, Manual, CqTagged, Table>`, where `Provider` is
/// named by the build-time environment variable `FABRIC_DIRECT`.
///
/// ```ignore
/// // FABRIC_DIRECT=loopback cargo build
/// type Net = fabric::direct!(threading = Domain, progress = Manual);
/// ```
///
/// Arguments (all optional, any order; the defaults are `Stack`'s):
///
/// | key | short names | default |
/// |---|---|---|
/// | `threading` | `Domain`, `Safe`, `Endpoint`, `Completion` | `Domain` |
/// | `progress` | `Manual`, `Auto` | `Manual` |
/// | `cq` | `Context`, `Msg`, `Data`, `Tagged` | `Tagged` |
/// | `av` | `Table`, `Map` | `Table` |
/// | `provider` | `"loopback"`, `"shm"`, `"tcp"`, `"udp"` | `$FABRIC_DIRECT` |
///
/// Any other type is used as written (`cq = MyEntry` for a derived format,
/// `threading = fabric::ThreadSafe`, `provider = my_crate::MyProvider`).
///
/// The provider: `provider = "name"` (or a type) if given, else `FABRIC_DIRECT`, else
/// (unset or empty) `loopback`. Names are case-insensitive; `loopback` is
/// `fabric_loopback::Loopback`, `shm` is `fabric_shm::Shm`, `tcp` is `fabric_tcp::Tcp`,
/// `udp` is `fabric_udp::Udp`: the application depends on the provider's crate. An
/// unknown name is a compile error listing the known ones. The expansion reads
/// `option_env!("FABRIC_DIRECT")`, so cargo rebuilds the crate when the variable changes.
#[proc_macro]
pub fn direct(input: TokenStream) -> TokenStream {
    match direct_impl(input.into()) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn direct_impl(input: TokenStream2) -> syn::Result<TokenStream2> {
    let args = syn::parse::Parser::parse2(Punctuated::<Arg, Token![,]>::parse_terminated, input)?;
    let mut provider: Option<TokenStream2> = None;
    let mut threading = quote!(::fabric::ThreadDomain);
    let mut progress = quote!(::fabric::Manual);
    let mut cq = quote!(::fabric::CqTagged);
    let mut av = quote!(::fabric::Table);
    let mut seen: Vec<String> = Vec::new();
    for a in args {
        let key = a.key.to_string();
        if seen.contains(&key) {
            return Err(syn::Error::new(
                a.key.span(),
                format!("`{key}` given twice"),
            ));
        }
        seen.push(key.clone());
        let slot = match key.as_str() {
            "provider" => {
                provider = Some(match &a.value {
                    ArgValue::Name(s) => {
                        let path = resolve_provider(Some(&s.value()))
                            .map_err(|m| syn::Error::new(s.span(), m))?;
                        provider_path(path, s.span())
                    }
                    ArgValue::Type(t) => t.to_token_stream(),
                });
                continue;
            }
            "threading" => &mut threading,
            "progress" => &mut progress,
            "cq" => &mut cq,
            "av" => &mut av,
            _ => {
                return Err(syn::Error::new(
                    a.key.span(),
                    format!(
                        "unknown argument `{key}`; expected `provider`, `threading`, `progress`, `cq` or `av`"
                    ),
                ))
            }
        };
        *slot = match &a.value {
            ArgValue::Type(t) => short_name(&key, t),
            ArgValue::Name(s) => {
                return Err(syn::Error::new(
                    s.span(),
                    format!("`{key}` takes a type or a short name, not a string"),
                ))
            }
        };
    }
    let provider = match provider {
        Some(p) => p,
        None => {
            let var = std::env::var(ENV).ok();
            let path = resolve_provider(var.as_deref())
                .map_err(|m| syn::Error::new(Span::call_site(), m))?;
            provider_path(path, Span::call_site())
        }
    };
    // The projection through a one-element array carries `option_env!` in its length:
    // rustc records the variable in the crate's dep-info, so cargo rebuilds (and this
    // macro runs again) when `FABRIC_DIRECT` changes. It normalizes to the bare `Stack`.
    Ok(quote! {
        <[::fabric::Stack<#provider, #threading, #progress, #cq, #av>; {
            let _ = ::core::option_env!("FABRIC_DIRECT");
            1
        }] as ::fabric::__private::One>::Item
    })
}

/// `tokens` with every span set to `span`, so a diagnostic about them points there.
fn respan(tokens: TokenStream2, span: Span) -> TokenStream2 {
    tokens
        .into_iter()
        .map(|mut t| {
            if let proc_macro2::TokenTree::Group(g) = &t {
                let mut ng = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                ng.set_span(span);
                t = proc_macro2::TokenTree::Group(ng);
            } else {
                t.set_span(span);
            }
            t
        })
        .collect()
}

fn provider_path(path: &str, span: Span) -> TokenStream2 {
    let segs = path
        .trim_start_matches("::")
        .split("::")
        .map(|s| Ident::new(s, span));
    quote_spanned!(span=> #(::#segs)*)
}

/// The completion fields a derived format may hold, with their types.
const FIELDS: &[(&str, &str)] = &[
    ("context", "::fabric::Context"),
    ("flags", "::fabric::flags::CqFlags"),
    ("len", "usize"),
    ("buf", "usize"),
    ("data", "u64"),
    ("tag", "u64"),
    ("src", "::fabric::FiAddr"),
];

/// Derives `fabric::CqFormat` for a user-defined CQ entry: a `#[repr(C)]` struct with
/// named fields, each one of the completion fields
///
/// | field | type |
/// |---|---|
/// | `context` | `fabric::Context` |
/// | `flags` | `fabric::flags::CqFlags` |
/// | `len` | `usize` |
/// | `buf` | `usize` |
/// | `data` | `u64` |
/// | `tag` | `u64` |
/// | `src` | `fabric::FiAddr` (the source address with `FI_SOURCE`, else `FI_ADDR_NOTAVAIL`) |
///
/// in any order and any subset. The struct is its own format (`type Entry = Self`,
/// `KIND = CqFormatKind::Unspec`), so it is the `C` parameter of a stack, and the
/// provider writes exactly the declared fields. It must also be `Copy + Default`.
///
/// ```ignore
/// #[derive(Clone, Copy, Default, Debug, fabric::CqFormat)]
/// #[repr(C)]
/// struct Entry {
///     context: fabric::Context,
///     len: usize,
///     src: fabric::FiAddr,
/// }
/// type Net = fabric::Stack<fabric_loopback::Loopback, fabric::ThreadDomain, fabric::Manual, Entry>;
/// ```
///
/// A field with another name, a field of the wrong type, a struct without `#[repr(C)]`,
/// a generic struct, a tuple struct, an enum or a union is a compile error.
#[proc_macro_derive(CqFormat)]
pub fn derive_cq_format(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    match derive_impl(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn is_repr_c(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        let mut c = false;
        if a.path().is_ident("repr") {
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("C") {
                    c = true;
                }
                // Skip arguments such as `align(8)`.
                if m.input.peek(syn::token::Paren) {
                    let _content;
                    syn::parenthesized!(_content in m.input);
                }
                Ok(())
            });
        }
        c
    })
}

fn derive_impl(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            name.span(),
            "CqFormat can only be derived for a struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new(
            data.fields.span(),
            "CqFormat can only be derived for a struct with named fields",
        ));
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new(
            input.generics.span(),
            "CqFormat cannot be derived for a generic struct",
        ));
    }
    if !is_repr_c(input) {
        return Err(syn::Error::new(
            name.span(),
            "CqFormat entries must be `#[repr(C)]`: add `#[repr(C)]` to the struct",
        ));
    }
    let mut inits = Vec::new();
    let mut outs = Vec::new();
    for f in &fields.named {
        let Some(id) = &f.ident else { continue };
        let fname = id.to_string();
        let Some((_, want)) = FIELDS.iter().find(|(n, _)| *n == fname) else {
            let known: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
            return Err(syn::Error::new(
                id.span(),
                format!(
                    "`{fname}` is not a completion field; a CqFormat entry holds any of: {}",
                    known.join(", ")
                ),
            ));
        };
        let ty = &f.ty;
        let want = respan(syn::parse_str::<Type>(want)?.to_token_stream(), ty.span());
        // Spanned at the field's type, so a wrong type is reported there; the helper's
        // bound names both the declared and the expected type.
        inits.push(quote_spanned! {ty.span()=>
            #id: ::fabric::__private::field::<#ty, #want>(c.#id)
        });
        outs.push(quote_spanned! {ty.span()=> #id: e.#id });
    }
    Ok(quote! {
        impl ::fabric::CqFormat for #name {
            const KIND: ::fabric::attr::CqFormatKind = ::fabric::attr::CqFormatKind::Unspec;
            type Entry = Self;
            #[inline(always)]
            fn make(c: &::fabric::Completion) -> Self {
                #name { #(#inits,)* }
            }
            #[inline(always)]
            fn completion(e: &Self) -> ::fabric::Completion {
                ::fabric::Completion { #(#outs,)* ..::core::default::Default::default() }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_is_loopback() {
        assert_eq!(resolve_provider(None), Ok("::fabric_loopback::Loopback"));
        assert_eq!(
            resolve_provider(Some("")),
            Ok("::fabric_loopback::Loopback")
        );
        assert_eq!(
            resolve_provider(Some("  ")),
            Ok("::fabric_loopback::Loopback")
        );
    }

    #[test]
    fn known_names_map_to_their_crates() {
        assert_eq!(
            resolve_provider(Some("loopback")),
            Ok("::fabric_loopback::Loopback")
        );
        assert_eq!(resolve_provider(Some("SHM")), Ok("::fabric_shm::Shm"));
        assert_eq!(resolve_provider(Some(" tcp ")), Ok("::fabric_tcp::Tcp"));
        assert_eq!(resolve_provider(Some("udp")), Ok("::fabric_udp::Udp"));
    }

    #[test]
    fn unknown_name_lists_known_ones() {
        let e = resolve_provider(Some("verbs")).unwrap_err();
        assert!(e.contains("`verbs`"), "{e}");
        assert!(e.contains("loopback, shm, tcp, udp"), "{e}");
    }

    #[test]
    fn every_provider_path_parses_as_a_type() {
        for (_, p) in PROVIDERS {
            syn::parse_str::<Type>(p).unwrap();
        }
        for (_, t) in FIELDS {
            syn::parse_str::<Type>(t).unwrap();
        }
    }

    #[test]
    fn direct_expands_defaults_and_overrides() {
        let out = direct_impl(quote!(provider = "loopback", cq = Msg, threading = Safe))
            .unwrap()
            .to_string();
        assert!(out.contains(":: fabric_loopback :: Loopback"), "{out}");
        assert!(out.contains(":: fabric :: ThreadSafe"), "{out}");
        assert!(out.contains(":: fabric :: Manual"), "{out}");
        assert!(out.contains(":: fabric :: CqMsg"), "{out}");
        assert!(out.contains(":: fabric :: Table"), "{out}");
        assert!(out.contains("option_env"), "{out}");
    }

    #[test]
    fn direct_rejects_unknown_and_repeated_arguments() {
        let e = direct_impl(quote!(color = Red)).unwrap_err().to_string();
        assert!(e.contains("unknown argument `color`"), "{e}");
        let e = direct_impl(quote!(cq = Msg, cq = Data))
            .unwrap_err()
            .to_string();
        assert!(e.contains("given twice"), "{e}");
        let e = direct_impl(quote!(provider = "ib"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("known providers: loopback"), "{e}");
    }

    #[test]
    fn derive_checks_shape() {
        let ok: DeriveInput = syn::parse_quote! {
            #[repr(C, align(8))]
            struct E { tag: u64, src: fabric::FiAddr }
        };
        let out = derive_impl(&ok).unwrap().to_string();
        assert!(out.contains("c . tag"), "{out}");
        assert!(out.contains("c . src"), "{out}");
        assert!(!out.contains("c . len"), "{out}");
        let no_repr: DeriveInput = syn::parse_quote! { struct E { tag: u64 } };
        assert!(derive_impl(&no_repr)
            .unwrap_err()
            .to_string()
            .contains("repr(C)"));
        let bad: DeriveInput = syn::parse_quote! { #[repr(C)] struct E { colour: u64 } };
        assert!(derive_impl(&bad)
            .unwrap_err()
            .to_string()
            .contains("`colour` is not a completion field"));
        let tuple: DeriveInput = syn::parse_quote! { #[repr(C)] struct E(u64); };
        assert!(derive_impl(&tuple).is_err());
    }
}
