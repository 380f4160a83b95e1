//! Procedural macros for `fabric`.
//!
//! The crate exists so that the workspace layout is stable; its macros (build-time
//! provider selection and the CQ-format derive) arrive with the runtime-dispatch work.
