//! The shared-memory layout: the files peers map (endpoint regions, mapped segments,
//! the per-process directory of segments), their formats, and every access to them.
//!
//! This layer owns the provider's `unsafe` (mappings, shared words, copies in and
//! out of memory other processes write). Of the rest of the crate it uses only the
//! address format (`name`); the protocols above it (`peer`, `rndv`, `stage`,
//! `direct`, `transport`, `mapped`) reach shared memory only through its
//! bounds-checked accessors: atomics for shared words, and copies or
//! [`fabric::SharedBytes`] for bytes, never Rust references to them.

pub(crate) mod bypass;
pub(crate) mod chantable;
pub(crate) mod directory;
pub(crate) mod lanes;
pub(crate) mod region;
pub(crate) mod segment;
pub(crate) mod sys;
pub(crate) mod word;
