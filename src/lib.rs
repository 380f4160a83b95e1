//! `fabric`: the OFI/libfabric programming model with the whole stack chosen at compile time.
#![deny(unsafe_code)]

pub mod attr;
pub mod error;
pub mod flags;
pub mod types;

#[allow(unsafe_code)]
pub mod atomic;
pub mod av_table;
pub mod av_type;
pub mod eventq;
pub mod info;
pub mod matching;
pub mod mr_table;
pub mod ring;
#[allow(unsafe_code)]
pub mod waitobj;

pub use error::{Error, Result};
pub use av_type::{AvType, Map, Table};
pub use types::{Context, FiAddr, MrKey};
